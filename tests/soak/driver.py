"""The soak loop: a seeded random sequence of user actions on the real window.

Each step ``i`` draws from its own generator, ``Random(f"{seed}/{i}")``, so a step that finds a
different window (a result arrived earlier) does not shift the choices of the steps after it.
A single-shot timer runs the steps inside the event loop; it is re-armed before each action, so
when an action opens a modal dialog or a menu with ``exec()`` the next step runs inside that
nested loop and answers it, as the user would.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import QEventLoop, QSize, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMainWindow, QWidget

from . import checks
from . import gestures as g
from .actions import Hands
from .controls import Control, discover, menu_actions
from .dialogs import Answerer, FileDialogs
from .sandbox import Sandbox, choose

K = Qt.Key
CATEGORIES = {"control": 48, "graphics": 12, "key": 9, "menu": 7, "wait": 3, "context": 3, "resize": 3, "drop": 2}
CONTROL_KINDS = {"button": 12, "check": 8, "combo": 14, "spin": 14, "tabs": 14, "text": 12, "table": 6,
                 "line": 3, "slider": 3, "splitter": 2}
KEYS = [(K.Key_Escape, g.NONE, 4), (K.Key_F5, g.NONE, 4), (K.Key_E, g.CTRL, 3), (K.Key_S, g.CTRL, 1),
        (K.Key_O, g.CTRL, 1), (K.Key_O, g.CTRL | g.SHIFT, 1), (K.Key_Tab, g.NONE, 2), (K.Key_Tab, g.SHIFT, 1),
        (K.Key_Return, g.NONE, 1), (K.Key_Space, g.NONE, 1), (K.Key_Down, g.NONE, 1), (K.Key_Up, g.NONE, 1),
        (K.Key_PageDown, g.NONE, 1), (K.Key_Delete, g.NONE, 1), (K.Key_Z, g.CTRL, 1), (K.Key_A, g.CTRL, 1)]


@dataclass
class SoakOptions:
    seed: int
    seconds: float
    settle: bool = False  # wait until the app is idle before each step (the replay test)
    max_actions: int | None = None
    stream: str | None = None  # a JSON line per action, flushed (survives a crash)
    snapshot_state: bool = True


class Soak:
    """Drives ``make_window()``'s window; ``run_random()`` then ``final_checks()``."""

    def __init__(self, options: SoakOptions, sandbox: Sandbox, make_window: Callable[[], QWidget],
                 excluded=None) -> None:
        self.options, self.sandbox, self.make_window = options, sandbox, make_window
        self.t0 = time.perf_counter()
        self.actions: list[dict] = []
        self.current = -1
        self.main: QWidget | None = None
        self.hands = Hands(sandbox)
        self.files = FileDialogs(sandbox, lambda: self._dialog_rng(), self._note)
        self.answerer = Answerer(self.hands, self.files, self._note)
        self.excluded = excluded  # the stall monitor's context manager (soak time is not app time)
        self.seen: dict[str, set[str]] = {}  # kind -> control paths ever discovered
        self.touched: set[str] = set()
        self.statuses: dict[str, int] = {}  # status-bar text -> first action
        self.restarts = 0
        self.open_times: list[tuple[float, float]] = []  # (wall, GUI-thread CPU) s to build and show the window
        self.leaks: list[str] = []  # threads still running after the window closed mid-run
        self._step = 0
        self._depth = 0
        self._dialog_draws = 0
        self._deadline = 0.0
        self._loop: QEventLoop | None = None
        self._stream = open(options.stream, "a", encoding="utf-8") if options.stream else None
        self._timer = QTimer(singleShot=True)
        self._timer.timeout.connect(self._tick)

    # -- the window ---------------------------------------------------------------------------------
    def open_window(self) -> None:
        self.files.install()
        self.log_action("window", "window", "open")
        wall, cpu = time.perf_counter(), time.thread_time()
        with self.excluded():  # building the window precedes its event loop (a user starts the app once)
            self.main = self.make_window()
            self.main.resize(1400, 900)
            self.main.show()
        self.open_times.append((round(time.perf_counter() - wall, 3), round(time.thread_time() - cpu, 3)))
        self.main.activateWindow()
        QTest.qWaitForWindowExposed(self.main, 5000)
        checks.settle(30, root=self.main)

    def close_window(self) -> None:
        if self.main is None:
            return
        self.main.close()
        self.main.deleteLater()
        QApplication.sendPostedEvents(None, 52)  # QEvent.DeferredDelete
        QTest.qWait(50)
        self.main = None

    # -- logging ------------------------------------------------------------------------------------
    def now(self) -> float:
        return round(time.perf_counter() - self.t0, 3)

    def log_action(self, kind: str, target: str, detail: str = "") -> int:
        record = {"i": len(self.actions), "t": self.now(), "kind": kind, "target": target, "detail": detail,
                  "depth": self._depth - 1 if self._depth else 0}
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

    def _note(self, text: str) -> None:
        """A sub-event of the current action (a file dialog's answer)."""
        if self.actions:
            record = self.actions[self.current]
            record.setdefault("notes", []).append(text)

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
            value = {"tabs": lambda: w.tabText(w.currentIndex()), "combo": lambda: w.currentText(),
                     "spin": lambda: w.text(), "check": lambda: w.isChecked(),
                     "text": lambda: len(w.toPlainText())}.get(c.kind)
            if value is not None:
                state[name] = value()
        state["status"] = self.status_text()[:200]
        return state

    def status_text(self) -> str:
        bar = self.main.statusBar() if isinstance(self.main, QMainWindow) else None
        if bar is None:
            return ""
        from PySide6.QtWidgets import QLabel

        texts = [l.text() for l in bar.findChildren(QLabel) if l.isVisible() and l.text()]
        return " | ".join(texts) or bar.currentMessage()

    # -- the random phase --------------------------------------------------------------------------
    def run_random(self) -> None:
        self._deadline = time.perf_counter() + self.options.seconds
        self._loop = QEventLoop()
        self._timer.start(0)
        self._loop.exec()
        self._timer.stop()

    def _done(self) -> bool:
        if self.options.max_actions is not None and self._step >= self.options.max_actions:
            return True
        return time.perf_counter() >= self._deadline

    def _tick(self) -> None:
        if self._depth == 0 and self._done():
            self._loop.quit()
            return
        if self.options.settle and self._depth == 0:
            checks.settle(20.0, window_s=0.6, root=self.main)  # the replay test: each step starts idle
        rng = random.Random(f"{self.options.seed}/{self._step}")
        self._step += 1
        self._timer.start(self._pause(rng))  # before acting: a modal exec() below still gets steps
        self._depth += 1
        try:
            self._act(rng)
        finally:
            self._depth -= 1

    def _pause(self, rng: random.Random) -> int:
        if self.options.settle:
            return 10
        band = rng.choices([(0, 50), (50, 300), (300, 1000)], weights=[3, 5, 2])[0]
        return rng.randint(*band)

    def _act(self, rng: random.Random) -> None:
        with self.excluded():
            plan = self._choose(rng)
        if plan is None:
            return
        kind, target, run = plan
        with self.excluded():
            index = self.log_action(kind, target)
        try:
            detail = run()
        except RuntimeError as exc:  # the widget went away between discovery and the action
            detail = f"(gone: {exc})"
        with self.excluded():
            self._finish(index, detail)
            self._watch_status()

    def _watch_status(self) -> None:
        if self.main is not None and len(self.statuses) < 1000:
            text = self.status_text()[:300]
            self.statuses.setdefault(text, self.current)

    def _choose(self, rng: random.Random):
        """(kind, target, callable) for this step, or None (nothing to do in a nested loop)."""
        pending = self.answerer.pending(self.main)
        if pending is not None:
            name = pending.objectName() or type(pending).__name__
            return "dialog", f"{name} {pending.windowTitle()!r}", lambda: self.answerer.act(pending, rng)
        if self._depth > 1:
            return None  # a nested loop with nothing to answer (the app waits for something itself)
        if self.main is None or not self.main.isVisible():
            return "restart", "window", self._restart
        category = rng.choices(list(CATEGORIES), weights=list(CATEGORIES.values()))[0]
        return getattr(self, "_plan_" + category)(rng)

    # -- categories --------------------------------------------------------------------------------
    def _discover(self):
        found = discover(self.main)
        for c in found.controls:
            self.seen.setdefault(c.kind, set()).add(c.path)
        return found

    def _pick(self, rng: random.Random, controls: list[Control]) -> Control:
        fresh = [c for c in controls if c.path not in self.touched]
        control = rng.choice(fresh if fresh and rng.random() < 0.6 else controls)
        self.touched.add(control.path)
        return control

    def _plan_control(self, rng: random.Random, kinds: dict[str, int] = CONTROL_KINDS):
        usable = [c for c in self._discover().controls if c.usable()]
        present = {k: w for k, w in kinds.items() if any(c.kind == k for c in usable)}
        if not present:
            return self._plan_wait(rng)
        kind = rng.choices(list(present), weights=list(present.values()))[0]
        control = self._pick(rng, [c for c in usable if c.kind == kind])
        return kind, control.path, lambda: self.hands.operate(control, rng)

    def _plan_graphics(self, rng: random.Random):
        return self._plan_control(rng, {"graphics": 1})

    def _plan_menu(self, rng: random.Random):
        actions = [(p, a) for p, a in menu_actions(self.main) if a.isEnabled() and a.isVisible()]
        if not actions:
            return self._plan_wait(rng)
        weights = [0.05 if any(w in p.lower() for w in ("quit", "exit")) else 1.0 for p, _ in actions]
        path, action = rng.choices(actions, weights=weights)[0]
        self.touched.add("menu:" + path)
        self.seen.setdefault("menu", set()).update("menu:" + p for p, _ in actions)
        return "menu", path, lambda: (action.trigger(), "trigger")[1]

    def _plan_key(self, rng: random.Random):
        code, mods, _ = rng.choices(KEYS, weights=[w for *_, w in KEYS])[0]
        focus = QApplication.focusWidget()
        target = focus if focus is not None and focus.window() is self.main else self.main
        name = f"{'Ctrl+' if mods & g.CTRL else ''}{'Shift+' if mods & g.SHIFT else ''}{code.name[4:]}"
        label = target.objectName() or type(target).__name__
        return "key", label, lambda: (g.key(target, code, mods), name)[1]

    def _plan_wait(self, rng: random.Random):
        ms = rng.randint(500, 2500)
        return "wait", "", lambda: (self._timer.start(ms), f"{ms} ms")[1]

    def _plan_context(self, rng: random.Random):
        usable = [c for c in self._discover().controls if c.usable()]
        widget = rng.choice([c.widget for c in usable] + [self.main]) if usable else self.main
        where = g.surface(widget)
        p = g.random_point(rng, where)
        label = widget.objectName() or type(widget).__name__
        return "context", label, lambda: (g.context_menu(where, p), f"at ({p.x()}, {p.y()})")[1]

    def _plan_resize(self, rng: random.Random):
        size = QSize(rng.randint(480, 2200), rng.randint(360, 1400))
        return "resize", "window", lambda: (self.main.resize(size), f"{size.width()}x{size.height()}")[1]

    def _plan_drop(self, rng: random.Random):
        targets = [c for c in self._discover().drop_targets if c.usable()]
        if not targets:
            return self._plan_wait(rng)
        target = rng.choice(targets)
        picks = [choose(rng, self.sandbox.open_choices("drop", "text")) for _ in range(rng.choice([1, 1, 1, 2]))]
        paths = [p.path for p in picks if p.path]
        labels = ", ".join(p.label for p in picks if p.path)

        def run() -> str:
            accepted = g.drop_files(target.widget, paths, g.center(target.widget)) if paths else False
            return f"drop {labels or 'nothing'} ({'accepted' if accepted else 'refused'})"

        return "drop", target.path, run

    def _restart(self) -> str:
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
