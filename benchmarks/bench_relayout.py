"""How long the GUI thread works at once when the window's layout changes (``make bench-relayout``).

The real window (Qt offscreen, 1529 x 1100, a 1,500-word text: 1,691 tokens x 4 heads) shows
each view tab in turn; on each, the window is resized six times (wider, narrower, taller,
shorter, both ways), as a user dragging its edge or a dock appearing would. A 5 ms heartbeat
timer measures the longest gap between two beats in GUI-thread CPU time (``time.thread_time``)
after each resize: the work Qt and attndesk did in one go. The reliability limit is 100 ms.

The soak measures the same kind of gap (tests/soak) with its own event filter running; this
benchmark runs the window alone, so its figures are the window's cost without the harness.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from tests.words import WORDS  # noqa: E402 - the repository's root is on the path now

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from attndesk import set_torch_environment  # noqa: E402

set_torch_environment()  # before torch loads: importing attndesk sets nothing

TABS = ("heatmaps", "step-through", "positions", "head-stats", "compare", "rollout", "online-softmax")
RESIZES = ((60, 0), (-60, 0), (0, 50), (0, -50), (200, 100), (-200, -100))
LIMIT_MS = 100.0


def worst_gap_ms(app, seconds: float) -> float:
    """Run the event loop for ``seconds``; the most GUI-thread CPU between two 5 ms beats, in ms."""
    from tests.heartbeat import Heartbeat, run_event_loop

    with Heartbeat(clock=time.thread_time) as beat:
        run_event_loop(int(seconds * 1000))
    return beat.worst * 1e3


def main() -> int:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from attndesk.app.window.main_window import MainWindow

    window = MainWindow(restore=False)
    window.resize(1529, 1100)
    window.show()
    worst_gap_ms(app, 2.0)
    window.state.text = " ".join(WORDS[i % len(WORDS)] for i in range(1500))
    worst_gap_ms(app, 6.0)
    print(f"window 1529 x 1100, {window.statusLabel.text()[:60]}")
    print(f"{'tab':<16}{'worst gap after each of 6 resizes (ms CPU)':<46}{'median':>8}{'max':>7}")
    overall = []
    try:
        for tab in TABS:
            window.state.view.tab = tab
            worst_gap_ms(app, 6.0)  # its result drawn
            gaps = []
            for dw, dh in RESIZES:
                window.resize(window.width() + dw, window.height() + dh)
                gaps.append(worst_gap_ms(app, 1.0))
            overall += gaps
            print(f"{tab:<16}{' '.join(f'{g:5.0f}' for g in gaps):<46}{statistics.median(gaps):8.0f}{max(gaps):7.0f}")
    finally:
        window.close()
    print(
        f"all tabs: median {statistics.median(overall):.0f} ms, max {max(overall):.0f} ms "
        f"(limit {LIMIT_MS:.0f} ms; one run, timings move ~2x between runs on a shared machine)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
