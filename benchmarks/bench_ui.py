"""How fast the window shows a parameter change, and how long a tab switch holds the GUI thread
(``make bench-ui``).

A parameter change, E=256, 8 heads, float32: the real window (Qt offscreen, 1400 x 900) is driven like a user: the seed spin box steps by one,
and the time runs from that change to the window's ``resultDisplayed`` signal (every heatmap of
the new result drawn). Two cases are measured side by side, interleaved so both see the same
machine load: 128 and 512 tokens. For each the table gives the median, the interquartile range
and the spread (min-max) of the change-to-display time, beside the median time the core itself
took for the run (the result's own "total"), so what the window adds is visible, and the GUI
thread's own CPU time (``time.thread_time``) from the change to the display: what the window's
thread did, which a loaded machine's descheduling does not inflate.

The window draws the weights of the seeds beside the one on screen while it idles, so a seed
stepped by one finds its model drawn; a seed jumped by 37 (``JUMP``) draws its weights during the
change, and its median is given too, as is the median of a change that keeps the weights (the
scaling by sqrt(d_k) toggled).

Then the same for a drag: ``--drag`` steps the seed every 16 ms (a held arrow key or a dragged
slider) for a second and reports how many intermediate results were shown and the time from the
last step to its result.

A tab switch (``--tabs``), 1,500 tokens x 16 heads (E=256, no mask): each tab the toy mode shows
is entered from the Heatmaps tab three times; a 5 ms heartbeat measures the most GUI-thread CPU
between two beats from the switch until 2.5 s later (the tab's result drawn, its slices done), and
the GUI thread's CPU over the whole switch.

Targets: median <= 30 ms at 128 tokens and <= 60 ms at 512 tokens, on a quiet machine; no tab
switch holds the GUI thread 100 ms.
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
TARGETS_MS = {128: 30.0, 512: 60.0}
JUMP, JUMPS = 37, 6  # a seed change the window did not see coming: not the next or the previous seed
TAB_TOKENS, TAB_HEADS = 1500, 16
TAB_LIMIT_MS = 100.0
TAB_TRIES = 3


def text_of(length: int) -> str:
    """``length`` word tokens (the toy tokenizer splits on words; no padding, no [UNK] noise)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(length))


class Driver:
    """The real window and a way to wait for its next displayed result."""

    def __init__(self) -> None:
        from PySide6.QtWidgets import QApplication, QCheckBox, QPlainTextEdit, QSpinBox

        os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-bench")
        self.app = QApplication.instance() or QApplication([])
        from attndesk.app.window.main_window import MainWindow

        self.window = MainWindow(restore=False)
        self.window.resize(1400, 900)
        self.window.show()
        self.seed = self.window.findChild(QSpinBox, "seedSpin")
        self.embed = self.window.findChild(QSpinBox, "embedDimSpin")
        self.heads = self.window.findChild(QSpinBox, "headsSpin")
        self.text = self.window.findChild(QPlainTextEdit, "tokenInput")
        self.scale = self.window.findChild(QCheckBox, "scaleCheck")
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

    def one_change(self, step: int = 1, toggle_scale: bool = False) -> tuple[float, float, float]:
        """Step the seed by ``step`` (or toggle the scaling, which keeps the weights); (ms from the
        change to the display, ms the core took, ms of GUI-thread CPU from the change to the display)."""
        before = len(self.shown)
        start, cpu = time.perf_counter(), time.thread_time()
        if toggle_scale:
            self.scale.toggle()
        else:
            self.seed.setValue((self.seed.value() + step) % 1000)
        self.wait_for(before + 1)
        cpu = time.thread_time() - cpu
        at, shown = self.shown[-1]
        self.settle(0.15)
        return (at - start) * 1e3, core_seconds(shown) * 1e3, cpu * 1e3

    def tab_switches(self, tries: int = TAB_TRIES) -> dict[str, tuple[list[float], list[float]]]:
        """Every toy tab but the Heatmaps, entered ``tries`` times at 1,500 tokens x 16 heads:
        tab -> (worst GUI-thread CPU gap per switch, GUI-thread CPU per switch), in ms."""
        from tests.heartbeat import Heartbeat

        before = len(self.shown)
        self.window.state.update(
            {
                "config": self.window.state.config.replace(embed_dim=EMBED, num_heads=TAB_HEADS, mask="none"),
                "text": text_of(TAB_TOKENS),
            }
        )
        self.wait_for(before + 1)
        while len(core_tokens(self.shown[-1][1])) != TAB_TOKENS:
            self.wait_for(len(self.shown) + 1)
        self.settle(1.0)
        figures: dict[str, tuple[list[float], list[float]]] = {}
        for tab, _title in self.window.shown_tabs():
            if tab == "heatmaps":
                continue
            gaps, totals = figures.setdefault(tab, ([], []))
            for _ in range(tries):
                self.window.state.view.tab = "heatmaps"
                self.settle(1.0)
                cpu = time.thread_time()
                with Heartbeat(clock=time.thread_time) as beat:
                    self.window.state.view.tab = tab
                    self._run_loop(2500)
                totals.append((time.thread_time() - cpu) * 1e3)
                gaps.append(beat.worst * 1e3)
        self.window.state.view.tab = "heatmaps"
        return figures

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
    parser.add_argument(
        "--tabs", action="store_true", help=f"also switch to every tab at {TAB_TOKENS:,} tokens x {TAB_HEADS} heads"
    )
    args = parser.parse_args(argv)
    driver = Driver()
    latency: dict[int, list[float]] = {n: [] for n in LENGTHS}
    compute: dict[int, list[float]] = {n: [] for n in LENGTHS}
    gui_cpu: dict[int, list[float]] = {n: [] for n in LENGTHS}
    tabs: dict[str, tuple[list[float], list[float]]] = {}
    try:
        for _ in range(args.repeats):
            for n in LENGTHS:  # interleaved: both cases see the same machine load
                driver.set_case(n)
                for _ in range(2):
                    ms, core_ms, cpu_ms = driver.one_change()
                    latency[n].append(ms)
                    compute[n].append(core_ms)
                    gui_cpu[n].append(cpu_ms)
        jumps: dict[int, list[float]] = {n: [] for n in LENGTHS}
        toggles: dict[int, list[float]] = {n: [] for n in LENGTHS}
        for _ in range(JUMPS):
            for n in LENGTHS:
                driver.set_case(n)
                jumps[n].append(driver.one_change(JUMP)[0])
                toggles[n].append(driver.one_change(toggle_scale=True)[0])
        drags = {}
        if args.drag:
            for n in LENGTHS:
                driver.set_case(n)
                drags[n] = driver.drag()
        if args.tabs:
            tabs = driver.tab_switches()
    finally:
        driver.close()
    print(
        f"change -> resultDisplayed, E={EMBED}, {HEADS} heads, float32; {2 * args.repeats} changes per case, "
        "interleaved; Qt offscreen 1400x900"
    )
    print(
        "| tokens | median (ms) | IQR (ms) | min-max (ms) | core run, median (ms) | GUI-thread CPU, median (ms) "
        "| median / target | target (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in LENGTHS:
        med, iqr, lo, hi = spread(latency[n])
        core, cpu = statistics.median(compute[n]), statistics.median(gui_cpu[n])
        print(
            f"| {n} | {med:.0f} | {iqr:.0f} | {lo:.0f}-{hi:.0f} | {core:.1f} | {cpu:.1f} "
            f"| {med / TARGETS_MS[n]:.2f} | {TARGETS_MS[n]:.0f} |"
        )
    for n in LENGTHS:
        med, iqr, lo, hi = spread(jumps[n])
        print(
            f"seed jumped by {JUMP} at {n} tokens (no neighbour of a seed shown: its weights drawn during the "
            f"change), {JUMPS} changes: median {med:.0f} ms, IQR {iqr:.0f}, {lo:.0f}-{hi:.0f} ms"
        )
    for n in LENGTHS:
        med, iqr, lo, hi = spread(toggles[n])
        print(
            f"scaling toggled at {n} tokens (the weights kept), {JUMPS} changes: median {med:.0f} ms, "
            f"IQR {iqr:.0f}, {lo:.0f}-{hi:.0f} ms"
        )
    for n, (steps, results, last_ms) in drags.items():
        print(
            f"drag at {n} tokens: {steps} seed steps in 1 s, {results} results shown, "
            f"last step shown after {last_ms:.0f} ms"
        )
    if tabs:
        print(
            f"\ntab switch from Heatmaps, {TAB_TOKENS:,} tokens x {TAB_HEADS} heads, E={EMBED}, no mask; "
            f"{TAB_TRIES} switches per tab; GUI-thread CPU (time.thread_time)"
        )
        print("| tab | worst gap per switch (ms) | worst / limit | CPU per switch, median (ms) | limit (ms) |")
        print("|---|---|---:|---:|---:|")
        for tab, (gaps, totals) in tabs.items():
            print(
                f"| {tab} | {', '.join(f'{g:.0f}' for g in gaps)} | {max(gaps) / TAB_LIMIT_MS:.2f} "
                f"| {statistics.median(totals):.0f} | {TAB_LIMIT_MS:.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
