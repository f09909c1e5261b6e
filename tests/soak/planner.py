"""What the next step does: a category (a control, a heatmap, a key, a menu action, a wait, a
context menu, a resize, a drop), then its target, then how to operate it.

Two generators per step keep runs reproducible: ``step.rng`` picks the category and the target
(it depends on what the window shows), ``step.op`` draws how to operate it (a value, a point, a
key). A replay of a report forces each step's recorded category and target (``step.forced``)
and draws the same operations from the same ``op`` generator, so a window that answers a little
faster or slower still receives the same actions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QApplication

from . import gestures as g
from .controls import KINDS, Control, discover, menu_actions
from .sandbox import choose

K = Qt.Key
CATEGORIES = {"control": 48, "graphics": 12, "key": 9, "menu": 7, "wait": 3, "context": 3, "resize": 3, "drop": 2}
CONTROL_KINDS = {
    "button": 12,
    "check": 8,
    "combo": 14,
    "spin": 14,
    "tabs": 14,
    "text": 12,
    "table": 6,
    "line": 3,
    "slider": 3,
    "splitter": 2,
}
KEYS = [
    (K.Key_Escape, g.NONE, 4),
    (K.Key_F5, g.NONE, 4),
    (K.Key_E, g.CTRL, 3),
    (K.Key_S, g.CTRL, 1),
    (K.Key_O, g.CTRL, 1),
    (K.Key_O, g.CTRL | g.SHIFT, 1),
    (K.Key_Tab, g.NONE, 2),
    (K.Key_Tab, g.SHIFT, 1),
    (K.Key_Return, g.NONE, 1),
    (K.Key_Space, g.NONE, 1),
    (K.Key_Down, g.NONE, 1),
    (K.Key_Up, g.NONE, 1),
    (K.Key_PageDown, g.NONE, 1),
    (K.Key_Delete, g.NONE, 1),
    (K.Key_Z, g.CTRL, 1),
    (K.Key_A, g.CTRL, 1),
]
QUIT_WEIGHT = 0.05  # File > Quit ends the window: rare (the soak then checks its threads and reopens it)


@dataclass
class Step:
    index: int
    rng: random.Random  # category and target
    op: random.Random  # how to operate the target
    forced: dict | None = None  # replay: the recorded action of this step


def category_of(kind: str) -> str:
    return "control" if kind in KINDS and kind != "graphics" else kind


class Planner:
    """Chooses steps for ``soak`` (a driver.Soak: its window, hands, answerer, sandbox, coverage)."""

    def __init__(self, soak) -> None:
        self.soak = soak

    def choose(self, step: Step):
        """(kind, target, callable returning a detail) or None (nothing to do)."""
        soak = self.soak
        pending = soak.answerer.pending(soak.main)
        if pending is not None:
            name = pending.objectName() or type(pending).__name__
            return "dialog", f"{name} {pending.windowTitle()!r}", lambda: soak.answerer.act(pending, step.op)
        if soak.nested():
            return None  # a nested loop with nothing to answer (the app waits for something itself)
        if soak.main is None or not soak.main.isVisible():
            return "restart", "window", soak.restart
        if step.forced is not None:
            category = category_of(step.forced["kind"])
            if category in ("dialog", "restart", "window", "check", "missing"):
                return None  # the recorded dialog or restart is not there now: nothing to force
        else:
            category = step.rng.choices(list(CATEGORIES), weights=list(CATEGORIES.values()))[0]
        return getattr(self, "_plan_" + category)(step)

    # -- targets ----------------------------------------------------------------------------------
    def _discover(self):
        found = discover(self.soak.main)
        for c in found.controls:
            self.soak.seen.setdefault(c.kind, set()).add(c.path)
        return found

    def _pick(self, step: Step, controls: list[Control]) -> Control | None:
        if step.forced is not None:
            return next((c for c in controls if c.path == step.forced["target"]), None)
        fresh = [c for c in controls if c.path not in self.soak.touched]
        control = step.rng.choice(fresh if fresh and step.rng.random() < 0.6 else controls)
        self.soak.touched.add(control.path)
        return control

    @staticmethod
    def _missing(step: Step):
        target = step.forced["target"]
        return "missing", target, lambda: "replay: the recorded target is not on screen now"

    def _plan_control(self, step: Step, kinds: dict[str, int] = CONTROL_KINDS):
        usable = [c for c in self._discover().controls if c.usable()]
        if step.forced is not None:
            kind = step.forced["kind"]
        else:
            present = {k: w for k, w in kinds.items() if any(c.kind == k for c in usable)}
            if not present:
                return self._plan_wait(step)
            kind = step.rng.choices(list(present), weights=list(present.values()))[0]
        control = self._pick(step, [c for c in usable if c.kind == kind])
        if control is None:
            return self._missing(step)
        return kind, control.path, lambda: self.soak.hands.operate(control, step.op)

    def _plan_graphics(self, step: Step):
        return self._plan_control(step, {"graphics": 1})

    def _plan_menu(self, step: Step):
        actions = [(p, a) for p, a in menu_actions(self.soak.main) if a.isEnabled() and a.isVisible()]
        self.soak.seen.setdefault("menu", set()).update("menu:" + p for p, _ in actions)
        if step.forced is not None:
            found = [(p, a) for p, a in actions if p == step.forced["target"]]
            if not found:
                return self._missing(step)
            path, action = found[0]
        elif not actions:
            return self._plan_wait(step)
        else:
            weights = [QUIT_WEIGHT if any(w in p.lower() for w in ("quit", "exit")) else 1.0 for p, _ in actions]
            path, action = step.rng.choices(actions, weights=weights)[0]
        self.soak.touched.add("menu:" + path)
        return "menu", path, lambda: (action.trigger(), "trigger")[1]

    def _plan_key(self, step: Step):
        code, mods, _ = step.op.choices(KEYS, weights=[w for *_, w in KEYS])[0]
        focus = QApplication.focusWidget()
        target = focus if focus is not None and focus.window() is self.soak.main else self.soak.main
        name = f"{'Ctrl+' if mods & g.CTRL else ''}{'Shift+' if mods & g.SHIFT else ''}{code.name[4:]}"
        label = target.objectName() or type(target).__name__
        return "key", label, lambda: (g.key(target, code, mods), name)[1]

    def _plan_wait(self, step: Step):
        ms = step.op.randint(500, 2500)
        return "wait", "", lambda: (self.soak.hold(ms), f"{ms} ms")[1]

    def _plan_context(self, step: Step):
        usable = [c for c in self._discover().controls if c.usable()]
        main = Control("window", self.soak.main, self.soak.main.objectName() or "window")
        if step.forced is not None:
            control = self._pick(step, usable + [main])
            if control is None:
                return self._missing(step)
        else:
            control = step.rng.choice(usable + [main])
        where = g.surface(control.widget)
        p = g.random_point(step.op, where)
        return "context", control.path, lambda: (g.context_menu(where, p), f"at ({p.x()}, {p.y()})")[1]

    def _plan_resize(self, step: Step):
        size = QSize(step.op.randint(480, 2200), step.op.randint(360, 1400))
        return "resize", "window", lambda: (self.soak.main.resize(size), f"{size.width()}x{size.height()}")[1]

    def _plan_drop(self, step: Step):
        targets = [c for c in self._discover().drop_targets if c.usable()]
        target = (
            self._pick(step, targets) if step.forced is not None else (step.rng.choice(targets) if targets else None)
        )
        if target is None:
            return self._missing(step) if step.forced is not None else self._plan_wait(step)
        choices = self.soak.sandbox.open_choices("drop", "text")
        picks = [choose(step.op, choices) for _ in range(step.op.choice([1, 1, 1, 2]))]
        paths = [p.path for p in picks if p.path]
        labels = ", ".join(p.label for p in picks if p.path)

        def run() -> str:
            accepted = g.drop_files(target.widget, paths, g.center(target.widget)) if paths else False
            return f"drop {labels or 'nothing'} ({'accepted' if accepted else 'refused'})"

        return "drop", target.path, run
