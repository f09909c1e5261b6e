"""How fast the window shows a parameter change (``make bench-ui``): E=256, 8 heads, float32.

The real window (Qt offscreen, 1400 x 900) is driven like a user: the seed spin box steps by one,
and the time runs from that change to the window's ``resultDisplayed`` signal (every heatmap of
the new result drawn). Two cases are measured side by side, interleaved so both see the same
machine load: 128 and 512 tokens. For each the table gives the median, the interquartile range
and the spread (min-max) of the change-to-display time, beside the median time the core itself
took for the run (the result's own "total"), so what the window adds is visible.

Then the same for a drag: ``--drag`` steps the seed every 16 ms (a held arrow key or a dragged
slider) for a second and reports how many intermediate results were shown and the time from the
last step to its result.

Targets: median <= 50 ms at 128 tokens and <= 100 ms at 512 tokens, on a quiet machine.
"""

from __future__ import annotations

import argparse
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

EMBED, HEADS = 256, 8
LENGTHS = (128, 512)
TARGETS_MS = {128: 50.0, 512: 100.0}


def text_of(length: int) -> str:
    """``length`` word tokens (the toy tokenizer splits on words; no padding, no [UNK] noise)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(length))


class Driver:
    """The real window and a way to wait for its next displayed result."""

    def __init__(self) -> None:
        from PySide6.QtWidgets import QApplication, QPlainTextEdit, QSpinBox

        os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-bench")
        self.app = QApplication.instance() or QApplication([])
        from attndesk.app.main_window import MainWindow

        self.window = MainWindow(restore=False)
        self.window.resize(1400, 900)
        self.window.show()
        self.seed = self.window.findChild(QSpinBox, "seedSpin")
        self.embed = self.window.findChild(QSpinBox, "embedDimSpin")
        self.heads = self.window.findChild(QSpinBox, "headsSpin")
        self.text = self.window.findChild(QPlainTextEdit, "tokenInput")
        self.shown: list[tuple[float, object]] = []
        self.window.resultDisplayed.connect(lambda r: self.shown.append((time.perf_counter(), r)))
        self.wait_for(1)

    def wait_for(self, count: int, timeout_s: float = 60.0) -> None:
        """Run the real event loop (idle in C++, as in the app: a Python polling loop would take
        the GIL from the worker) until ``count`` results were shown."""
        deadline = time.perf_counter() + timeout_s
        while len(self.shown) < count:
            if time.perf_counter() > deadline:
                raise TimeoutError("the window showed no result in time")
            self._run_loop(int(max(1, (deadline - time.perf_counter()) * 1000)), until_shown=True)

    def _run_loop(self, ms: int, until_shown: bool = False) -> None:
        from tests.heartbeat import run_event_loop

        run_event_loop(ms, self.window.resultDisplayed if until_shown else None)

    def settle(self, seconds: float = 0.3) -> None:
        """Let late work (a reflow, a slice) finish so it does not count against the next change."""
        self._run_loop(int(seconds * 1000))

    def set_case(self, length: int) -> None:
        before = len(self.shown)
        self.embed.setValue(EMBED)
        self.heads.setValue(HEADS)
        self.text.setPlainText(text_of(length))
        self.wait_for(before + 1)
        self.settle()
        while len(core_tokens(self.shown[-1][1])) != length:  # a debounce may still deliver the case
            self.wait_for(len(self.shown) + 1)
            self.settle()

    def one_change(self) -> tuple[float, float]:
        """Step the seed; (ms from the change to the display, ms the core took)."""
        before = len(self.shown)
        start = time.perf_counter()
        self.seed.setValue((self.seed.value() + 1) % 1000)
        self.wait_for(before + 1)
        at, shown = self.shown[-1]
        self.settle(0.15)
        return (at - start) * 1e3, core_seconds(shown) * 1e3

    def drag(self, seconds: float = 1.0, step_ms: float = 16.0) -> tuple[int, int, float]:
        """Step the seed every ``step_ms`` for ``seconds``: (steps, results shown, ms from the last
        step to its result)."""
        from PySide6.QtCore import QTimer

        before = len(self.shown)
        stamps: list[float] = []

        def step() -> None:
            self.seed.setValue((self.seed.value() + 1) % 1000)
            stamps.append(time.perf_counter())

        timer = QTimer(interval=int(step_ms))
        timer.timeout.connect(step)
        timer.start()
        self._run_loop(int(seconds * 1000))
        timer.stop()
        target = self.seed.value()
        deadline = time.perf_counter() + 30
        while core_seed(self.shown[-1][1]) != target and time.perf_counter() < deadline:
            self._run_loop(50)
        return len(stamps), len(self.shown) - before, (self.shown[-1][0] - stamps[-1]) * 1e3

    def close(self) -> None:
        self.window.close()
        self.window.deleteLater()
        self.app.processEvents()


def _result_of(shown):
    """The toy AttentionResult behind what ``resultDisplayed`` carried (old and new windows)."""
    toy = getattr(shown, "toy", None)
    return toy.result if toy is not None else shown


def core_tokens(shown) -> list[str]:
    return list(_result_of(shown).tokens)


def core_seconds(shown) -> float:
    return float(_result_of(shown).total_seconds)


def core_seed(shown) -> int:
    return int(_result_of(shown).config.seed)


def spread(values: list[float]) -> tuple[float, float, float, float]:
    """(median, interquartile range, min, max)."""
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return statistics.median(values), q[2] - q[0], min(values), max(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="changes per case (default %(default)s)")
    parser.add_argument("--drag", action="store_true", help="also step the seed every 16 ms for a second")
    args = parser.parse_args(argv)
    driver = Driver()
    latency = {n: [] for n in LENGTHS}
    compute = {n: [] for n in LENGTHS}
    try:
        for _ in range(args.repeats):
            for n in LENGTHS:  # interleaved: both cases see the same machine load
                driver.set_case(n)
                for _ in range(2):
                    ms, core_ms = driver.one_change()
                    latency[n].append(ms)
                    compute[n].append(core_ms)
        drags = {}
        if args.drag:
            for n in LENGTHS:
                driver.set_case(n)
                drags[n] = driver.drag()
    finally:
        driver.close()
    print(
        f"change -> resultDisplayed, E={EMBED}, {HEADS} heads, float32; {2 * args.repeats} changes per case, "
        "interleaved; Qt offscreen 1400x900"
    )
    print("| tokens | median (ms) | IQR (ms) | min-max (ms) | core run, median (ms) | target (ms) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in LENGTHS:
        med, iqr, lo, hi = spread(latency[n])
        core = statistics.median(compute[n])
        print(f"| {n} | {med:.0f} | {iqr:.0f} | {lo:.0f}-{hi:.0f} | {core:.1f} | {TARGETS_MS[n]:.0f} |")
    for n, (steps, results, last_ms) in drags.items():
        print(
            f"drag at {n} tokens: {steps} seed steps in 1 s, {results} results shown, "
            f"last step shown after {last_ms:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
