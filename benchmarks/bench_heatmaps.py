"""How long the heatmap panel holds the GUI thread: showing a new result, resizing, big runs.

``python benchmarks/bench_heatmaps.py`` (Qt offscreen unless a display is set). For each case the
source is built first (the worker's share, timed apart), then the panel is timed from
``set_source`` until ``shown`` and one full repaint of the canvas, with a 1 ms timer measuring the
longest event-loop stall. Medians of the repeats are printed as a Markdown table.

It only uses the public ``AttentionResult.attention_map``, ``source_for_map`` and
``HeatmapPanel.set_source``, so the same file measures another tree with the same API (put that
tree on PYTHONPATH).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from attndesk import set_torch_environment  # noqa: E402

set_torch_environment()  # before torch loads: importing attndesk sets nothing

from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from attndesk.app.sources.long_source import source_for_map  # noqa: E402
from attndesk.app.tabs.heatmaps.view import HeatmapPanel  # noqa: E402
from attndesk.core import AttentionConfig, run_attention  # noqa: E402
from tests.words import WORDS  # noqa: E402

REPEATS = 5


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed * 3 + i // 5) % len(WORDS)] for i in range(n))


def show(panel: HeatmapPanel, source) -> tuple[float, float]:
    """(ms from set_source to shown + one repaint, longest event-loop stall in ms)."""
    loop = QEventLoop()
    clock = QElapsedTimer()
    gaps, last = [], [0]

    def tick() -> None:
        now = clock.elapsed()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer(interval=1)
    timer.timeout.connect(tick)
    panel.shown.connect(loop.quit)
    clock.start()
    timer.start()
    start = time.perf_counter()
    panel.set_source(source)
    if panel.is_building():
        loop.exec()
    panel.graphics.viewport().repaint()  # what the user waits for: the new picture painted
    elapsed = (time.perf_counter() - start) * 1e3
    tick()
    timer.stop()
    panel.shown.disconnect(loop.quit)
    return elapsed, max(gaps)


def case(panel: HeatmapPanel, name: str, make) -> list[str]:
    shows, stalls, builds = [], [], []
    for r in range(REPEATS):
        result = make(r)
        start = time.perf_counter()
        source = source_for_map(result.attention_map())
        builds.append((time.perf_counter() - start) * 1e3)
        elapsed, stall = show(panel, source)
        shows.append(elapsed)
        stalls.append(stall)
    return [
        name,
        f"{statistics.median(builds):.1f}",
        f"{statistics.median(shows):.1f}",
        f"{statistics.median(stalls):.0f}",
    ]


def resize_case(panel: HeatmapPanel) -> list[str]:
    times = []
    for r in range(REPEATS):
        start = time.perf_counter()
        panel.resize(1100 + 60 * (r % 2), 650 - 40 * (r % 2))
        QApplication.processEvents()  # the resize events, the relayout and one paint
        times.append((time.perf_counter() - start) * 1e3)
    return ["resize, 16 heads x 2048", "-", f"{statistics.median(times):.1f}", "-"]


def main() -> int:
    app = QApplication.instance() or QApplication([sys.argv[0]])
    panel = HeatmapPanel()
    panel.resize(1100, 650)
    panel.show()
    small = AttentionConfig(embed_dim=256, num_heads=8, mask="padding")
    rows = [
        case(panel, "first result, 128 tok, 8 heads", lambda r: run_attention(small, words(128, r))),
        case(panel, "new seed, 128 tok, 8 heads", lambda r: run_attention(small.replace(seed=r), words(128, 0))),
        case(panel, "new text, 100-140 tok, 8 heads", lambda r: run_attention(small, words(100 + 10 * r, r))),
        case(panel, "new seed, 512 tok, 8 heads", lambda r: run_attention(small.replace(seed=r), words(512, 0))),
    ]
    big = AttentionConfig(embed_dim=64, num_heads=16, mask="causal")
    rows.append(case(panel, "2048 tok, 16 heads", lambda r: run_attention(big.replace(seed=r), words(2048, 0))))
    rows.append(resize_case(panel))
    print("| case | source build, worker (ms) | set_source -> shown + repaint (ms) | longest stall (ms) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    panel.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
