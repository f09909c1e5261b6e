"""The soak loop: a seeded random sequence of user actions on the real window.

Each step ``i`` draws from its own generators (``planner.Step``), so a step that finds a different
window (a result arrived earlier) does not shift the choices of the steps after it; a replay of a
report (``SoakOptions.replay``) repeats each step's recorded target and file answers.
A single-shot timer runs the steps inside the event loop; it is re-armed before each action, so
when an action opens a modal dialog or a menu with ``exec()`` the next step runs inside that
nested loop and answers it, as the user would.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QWidget

from . import checks
from . import gestures as g
from .actions import Hands
from .controls import discover
from .dialogs import Answerer, FileDialogs
from .holdings import HighWater
from .planner import Planner, Step
from .sandbox import Sandbox


@dataclass
class SoakOptions:
    seed: int
    seconds: float
    settle: bool = False  # wait until the app is idle before each step (the replay test)
    max_actions: int | None = None
    stream: str | None = None  # a JSON line per action, flushed (survives a crash)
    snapshot_state: bool = True
    replay: list[dict] | None = None  # a report's actions: repeat their steps instead of choosing


class Soak:
    """Drives ``make_window()``'s window; ``run_random()`` then ``final_checks()``."""

    def __init__(
        self, options: SoakOptions, sandbox: Sandbox, make_window: Callable[[], QWidget], excluded=None, paused=None
    ) -> None:
        self.options, self.sandbox, self.make_window = options, sandbox, make_window
        self.t0 = time.perf_counter()
        self.actions: list[dict] = []
        self.current = -1
        self.main: QWidget | None = None
        self.hands = Hands(sandbox)
        self.files = FileDialogs(sandbox, lambda: self._dialog_rng(), self.note, self._answered)
        self.answerer = Answerer(self.hands, self.files, self.note)
        self.excluded = excluded  # the stall monitor's context manager (soak time is not app time)
        self.paused = paused or excluded  # nothing measured at all (startup)
        self.seen: dict[str, set[str]] = {}  # kind -> control paths ever discovered
        self.touched: set[str] = set()
        self.statuses: dict[str, int] = {}  # status-bar text -> first action
        self.restarts = 0
        self.open_times: list[tuple[float, float]] = []  # (wall, GUI-thread CPU) s to build and show the window
        self.leaks: list[str] = []  # threads still running after the window closed mid-run
        self.high_water: HighWater | None = None  # set by the child: what memory peaks are made of
        self.planner = Planner(self)
        self._script = {a["step"]: a for a in options.replay or () if "step" in a}
        self._step = 0
        self._depth = 0
        self._dialog_draws = 0
        self._deadline = 0.0
        self._loop: QEventLoop | None = None
        self._stream = open(options.stream, "a", encoding="utf-8") if options.stream else None  # noqa: SIM115 - open for the whole run, flushed after every record
        self._timer = QTimer(singleShot=True)
        self._timer.timeout.connect(self._tick)

    # -- the window ---------------------------------------------------------------------------------
    def open_window(self) -> None:
        self.files.install()
        self.log_action("window", "window", "open")
        wall, cpu = time.perf_counter(), time.thread_time()
        # startup, reported apart (open_times): building the window, then its first layout and paint
        # (which sizes every tab's plots); a user starts the app once, the random phase comes after
        with self.paused():
            self.main = self.make_window()
            self.main.resize(1400, 900)
            self.main.show()
            self.main.activateWindow()
            QTest.qWaitForWindowExposed(self.main, 5000)
            QApplication.processEvents()
        self.open_times.append((round(time.perf_counter() - wall, 3), round(time.thread_time() - cpu, 3)))
        checks.settle(30, root=self.main)

    def close_window(self) -> None:
        if self.main is None:
            return
        self.main.close()  # the app's own close handling (settings, joining workers) is measured
        self.main.deleteLater()
        with self.paused():  # deleting the widget tree now is the soak's doing: a real quit ends the process
            QApplication.sendPostedEvents(None, 52)  # QEvent.DeferredDelete
        g.pump(50)
        self.main = None

    # -- logging ------------------------------------------------------------------------------------
    def now(self) -> float:
        return round(time.perf_counter() - self.t0, 3)

    def log_action(self, kind: str, target: str, detail: str = "") -> int:
        record = {
            "i": len(self.actions),
            "t": self.now(),
            "kind": kind,
            "target": target,
            "detail": detail,
            "depth": self._depth - 1 if self._depth else 0,
        }
        if self.options.snapshot_state and self.main is not None and self._depth <= 1:
            record["state"] = self.state()
        self.actions.append(record)
        self.current = record["i"]
        self._write(record)
        return record["i"]

    def _write(self, record: dict) -> None:
        """Stream the record (again when it ends: a crash report keeps the last line of each)."""
        if self._stream is not None:
            self._stream.write(json.dumps({k: v for k, v in record.items() if k != "state"}) + "\n")
            self._stream.flush()

    def _finish(self, index: int, detail: str) -> None:
        record = self.actions[index]
        record["detail"] = (record["detail"] + " " + detail).strip() if record["detail"] else detail
        record["ms"] = round((self.now() - record["t"]) * 1e3, 1)
        self._write(record)

    def note(self, text: str) -> None:
        """A sub-event of the current action (a file dialog's answer)."""
        if self.actions:
            record = self.actions[self.current]
            record.setdefault("notes", []).append(text)

    def _answered(self, path: str) -> None:
        """A file dialog's answer, kept with the action so that a replay gives the same one."""
        if self.actions:
            self.actions[self.current].setdefault("answers", []).append(self.sandbox.relative(path))

    def _dialog_rng(self) -> random.Random:
        self._dialog_draws += 1
        return random.Random(f"{self.options.seed}/{self._step}/file/{self._dialog_draws}")

    def state(self) -> dict:
        """What the window showed: current tabs, combo/spin/check values, text sizes, status."""
        state: dict = {}
        for c in discover(self.main).controls:
            name = c.widget.objectName()
            if not name or name.startswith("qt_"):
                name = c.path.rsplit("/", 2)[-2] + "/" + c.path.rsplit("/", 1)[-1] if c.kind == "tabs" else ""
            if not name:
                continue
            w = c.widget
            value = {
                "tabs": lambda w=w: w.tabText(w.currentIndex()),
                "combo": lambda w=w: w.currentText(),
                "spin": lambda w=w: w.text(),
                "check": lambda w=w: w.isChecked(),
                "text": lambda w=w: len(w.toPlainText()),
            }.get(c.kind)
            if value is not None:
                state[name] = value()
        state["status"] = self.status_text()[:200]
        return state

    def status_text(self) -> str:
        bar = self.main.statusBar() if isinstance(self.main, QMainWindow) else None
        if bar is None:
            return ""
        texts = [l.text() for l in bar.findChildren(QLabel) if l.isVisible() and l.text()]
        return " | ".join(texts) or bar.currentMessage()

    # -- the random phase --------------------------------------------------------------------------
    def run_random(self) -> None:
        self._deadline = time.perf_counter() + self.options.seconds
        self._loop = QEventLoop()
        self._timer.start(0)
        self._loop.exec()
        self._timer.stop()

    def nested(self) -> bool:
        """Whether the current step runs inside a modal loop opened by an earlier step."""
        return self._depth > 1

    def hold(self, ms: int) -> None:
        """A wait action: the next step comes in ``ms``."""
        self._timer.start(ms)

    def _done(self) -> bool:
        if self.options.max_actions is not None and self._step >= self.options.max_actions:
            return True
        if self._script and self._step > max(self._script):
            return True  # a replay ends with the report's last step
        return time.perf_counter() >= self._deadline

    def _tick(self) -> None:
        if self._depth == 0 and self._done():
            self._loop.quit()
            return
        if self._depth > 0 and self.answerer.pending(self.main) is None:
            # a nested loop that is not a dialog (an action processing events, e.g. QTest's mouse
            # helpers): no step here, so steps are numbered the same at any pace
            self._timer.start(50)
            return
        if self.options.settle and self._depth == 0:
            checks.settle(20.0, window_s=0.3, root=self.main)  # the replay test: each step starts idle
        i, seed = self._step, self.options.seed
        step = Step(i, random.Random(f"{seed}/{i}"), random.Random(f"{seed}/{i}/op"), self._script.get(i))
        self._step += 1
        self._dialog_draws = 0
        self._timer.start(self._pause(step.op))  # before acting: a modal exec() below still gets steps
        self._depth += 1
        try:
            self._act(step)
        finally:
            self._depth -= 1

    def _pause(self, rng: random.Random) -> int:
        band = rng.choices([(0, 50), (50, 300), (300, 1000)], weights=[3, 5, 2])[0]
        pause = rng.randint(*band)
        return 10 if self.options.settle else pause

    def _act(self, step: Step) -> None:
        with self.excluded():
            try:
                plan = self.planner.choose(step)
            except Exception as exc:
                why = f"(planning failed: {type(exc).__name__}: {exc})"  # exc is unbound after the except block
                plan = ("skip", "", lambda: why)
            if self._script and step.forced is None:
                plan = None  # a replay does only what the report did
        if plan is None:
            return
        kind, target, run = plan
        with self.excluded():
            index = self.log_action(kind, target)
            self.actions[index]["step"] = step.index
            for answer in (step.forced or {}).get("answers", []):
                self.files.force(self.sandbox.absolute(answer))
        try:
            detail = run()
        except RuntimeError as exc:  # the widget went away between discovery and the action
            detail = f"(gone: {exc})"
        with self.excluded():
            self.files.clear_forced()
            self._finish(index, detail)
            self._watch_status()
            if self.high_water is not None:
                self.high_water.check(self.main, self.now(), index)

    def _watch_status(self) -> None:
        if self.main is not None and len(self.statuses) < 1000:
            text = self.status_text()[:300]
            self.statuses.setdefault(text, self.current)

    def restart(self) -> str:
        """The window was closed (File > Quit, its close button): check its threads, open anew."""
        from .monitors import python_threads, running_qthreads

        self.restarts += 1
        self.close_window()
        stopped = checks.wait_until(lambda: not running_qthreads(), 10.0)
        note = ""
        if not stopped:
            note = f"; threads still running 10 s after close: {running_qthreads()}"
            self.leaks.append(f"action {self.current}: {running_qthreads()}")
        self.open_window()
        return f"reopened the window{note} (python threads now: {python_threads(set()) or 'none'})"
