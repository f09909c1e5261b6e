"""Run one soak in a child process and judge it (``run``); used by ``python -m tests.soak`` and the
in-suite test.

A child process keeps the soak's memory, threads and Qt state apart from whatever started it, and
lets a crash (a segfault in Qt, the memory limit) be reported with the seed and the last actions:
the child streams one JSON line per action and faulthandler's dump to the sandbox as it goes.

The verdict is the supervisor's: a stall is ``STALL_CPU_S`` of GUI-thread work on the reference
machine, so the bound scales by this processor's slowness, sampled by a thread of the supervisor
while the child runs (the host's pace moves within minutes; a reading after the run once judged
a stall that came while the host ran slower). ``make soak`` and the perf tier judge alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.speed import PaceSampler

from .report import STALL_CPU_S, failures, print_failure, summary_line, write
from .sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
BACKSTOP_MIB = 256  # the child stops itself at the limit; past limit + this the supervisor kills it


@dataclass
class Outcome:
    passed: bool
    report: dict
    report_path: Path | None  # kept when the run failed or a path was asked for


def _watch(proc: subprocess.Popen, limit_mib: int, timeout_s: float) -> str:
    """Wait for the child; kill it past the memory backstop or the timeout. Returns why it was killed."""
    child = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        try:
            rss = child.memory_info().rss
        except psutil.NoSuchProcess:
            break
        if rss > (limit_mib + BACKSTOP_MIB) * 2**20:
            proc.kill()
            proc.wait()
            return f"killed by the supervisor at {rss / 2**30:.2f} GiB resident"
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return f"killed by the supervisor after {timeout_s:.0f} s (hung)"
        time.sleep(0.1)
    return ""


def _crash_report(box: Sandbox, seed: int, seconds: float, why: str) -> dict:
    """What a dead child left: its streamed actions and faulthandler's stacks."""
    stream, crash = box.root / "actions.jsonl", box.root / "crash.txt"
    by_index: dict[int, dict] = {}
    if stream.exists():
        for line in stream.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written when it died
            by_index[record["i"]] = record  # an action's end line replaces its begin line
    actions = [by_index[i] for i in sorted(by_index)]
    stacks = crash.read_text(encoding="utf-8", errors="replace")[-20000:] if crash.exists() else ""
    report = {
        "seed": seed,
        "seconds": seconds,
        "crash": why,
        "crash_stacks": stacks,
        "actions": actions,
        "duration_s": actions[-1]["t"] if actions else 0,
    }
    report["failures"] = failures(report)
    report["passed"] = False
    return report


def run(
    seed: int,
    seconds: float,
    *,
    report_path: str | Path | None = None,
    limit_mib: int = 4096,
    keep_sandbox: bool = False,
    final_checks: bool = True,
    quiet: bool = False,
    replay: str | Path | None = None,
) -> Outcome:
    """One soak run; ``replay`` (a report) repeats that report's actions (its seed and length)."""
    box = Sandbox.create(prepare=False)
    # TMPDIR must exist when the child starts: a library that asks tempfile for its folder while
    # being imported (before the child prepares the sandbox) would otherwise get /tmp, for good
    box.tmp.mkdir(parents=True, exist_ok=True)
    inner = box.root / "report.json"
    env = {
        **os.environ,
        **box.environment(),
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    }
    cmd = (
        [
            sys.executable,
            "-m",
            "tests.soak.child",
            "--root",
            str(box.root),
            "--seed",
            str(seed),
            "--seconds",
            str(seconds),
            "--report",
            str(inner),
            "--stream",
            str(box.root / "actions.jsonl"),
            "--limit-mib",
            str(limit_mib),
        ]
        + ([] if final_checks else ["--no-final-checks"])
        + (["--replay", str(Path(replay).resolve())] if replay else [])
    )
    if not quiet:
        print(f"soak: seed {seed}, {seconds:g} s, sandbox {box.root}", flush=True)
    with PaceSampler() as pace:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
        killed = _watch(proc, limit_mib, timeout_s=seconds + 900)
    if inner.exists():
        report = json.loads(inner.read_text(encoding="utf-8"))
        if killed or proc.returncode not in (0, 1, 3):
            report["crash"] = killed or f"exit status {proc.returncode}"
    else:
        report = _crash_report(box, seed, seconds, killed or f"exit status {proc.returncode} before any report")
    report["pace"] = {
        "slowness": round(pace.median, 3),
        "samples": len(pace.samples),
        "stall_limit_s": round(STALL_CPU_S * pace.median, 4),
    }
    report["failures"] = failures(report)
    report["passed"] = not report["failures"]
    kept = _keep_report(report, report_path)
    if not report["passed"]:
        print_failure(report, kept)
    elif not quiet:
        print(summary_line(report))
    if keep_sandbox:
        print(f"sandbox kept: {box.root}")
    else:
        box.cleanup()  # the report holds everything (a crash's streamed actions and stacks too)
    return Outcome(report["passed"], report, kept)


def _keep_report(report: dict, path: str | Path | None) -> Path | None:
    if path is None and report["passed"]:
        return None
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="attndesk-soak-report-")) / f"soak-seed{report['seed']}.json"
    return write(report, path)
