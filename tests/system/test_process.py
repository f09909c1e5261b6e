"""Process-wide tuning (system/process.py): the C heap gives large blocks back under a fixed mmap
threshold (``map_large_blocks``), and ``tune_process`` applies it once."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHURN = """
import sys, threading
import numpy as np, psutil
if sys.argv[1] == "fixed":
    from attndesk.system.process import map_large_blocks
    assert map_large_blocks()
def rss():
    return psutil.Process().memory_info().rss / 2**20
def churn():
    # arrays of 4-30 MiB in three threads, freed out of order, as results and side jobs are
    keep = []
    for i in range(60):
        keep.append(np.ones(((4 + i % 26) << 20) // 8))
        if len(keep) > 8:
            keep.pop(i % 7)
    keep.clear()
base = rss()
threads = [threading.Thread(target=churn) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
print(round(rss() - base))
"""


def _retained_mib(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.perf
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_go_back_to_the_system_when_freed():
    fixed = _retained_mib("fixed")
    assert fixed <= 8
    # glibc's own sliding threshold keeps tens of MiB of the same churn (55 MiB measured): the test can fail
    assert _retained_mib("default") > fixed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tune_process_applies_the_settings_once(monkeypatch):
    from attndesk.system import process

    calls = []
    monkeypatch.setattr(process, "_tuned", {})
    monkeypatch.setattr(process, "map_large_blocks", lambda: calls.append(1) or True)
    assert process.tune_process() == {"map_large_blocks": True}
    assert process.tune_process() == {"map_large_blocks": True} and calls == [1]


def test_nothing_else_sets_the_heap_or_the_collector():
    """mallopt and gc settings live in system/process.py only: one place to read what the process runs under."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2] / "attndesk"
    pattern = re.compile(r"\b(mallopt|malloc_trim|gc\.(freeze|set_threshold|disable|enable))\(")
    found = [str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))]
    assert found == ["system/process.py"]
