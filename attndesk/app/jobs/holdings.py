"""The window's memory ledger (``attndesk.session.ledger``) wired to the window: its budget follows
the state's, what it lets go is said on the status line, release callbacks run in the GUI thread
(they touch widgets; a job may make room from its worker thread), and the holdings the compute
controller keeps itself are registered here: the run on screen (protected, never let go while
drawn), the run being computed (its plan's peak) and the model caches (the toy models and the
loaded checkpoints, sized by their parameters and buffers). A much smaller run replacing a large
one hands the freed heap back to the system (``trim_heap``, a chore off the GUI thread).

The views register their own holdings (a pinned A, a teaching pair, B − A, derived heatmaps)
through ``ComputeController.ledger``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Qt, QTimer, Signal

from attndesk.jobs.executor import Channel
from attndesk.runs.pipeline import cached_models, forget_models
from attndesk.runs.plan import RunPlan
from attndesk.session.ledger import Holding, MemoryLedger, arrays_of
from attndesk.session.results import Shown
from attndesk.session.state import AppState
from attndesk.session.status import StatusModel
from attndesk.system.process import trim_heap

from .channels import MEMORY, MODELS

LET_GO = " · let go of "
RUN_DEPTH = 5  # Shown -> layers -> result -> intermediates -> stage -> array
TRIM_DELAY_MS = 1500


class GuiPost(QObject):
    """``post(fn)``: run ``fn`` in this object's (the GUI) thread at its next event-loop turn."""

    _posted = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._posted.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def post(self, fn: Callable[[], None]) -> None:
        self._posted.emit(fn)

    def _run(self, fn: Callable[[], None]) -> None:
        fn()


def model_parts(module: Any) -> list[Any]:
    """The tensors a model keeps: its parameters and buffers."""
    return [*module.parameters(), *module.buffers()]


class WindowLedger(QObject):
    """One ``MemoryLedger`` per window (``ledger``), with the run on screen and the model caches."""

    def __init__(
        self,
        state: AppState,
        status: StatusModel,
        chore: Callable[[Channel, Callable[[], object]], None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._status = status
        self._chore = chore  # runs a job off the GUI thread (a cache's lock may be held by a load)
        self._poster = GuiPost(self)
        self.ledger = MemoryLedger(state.config.budget_bytes, say=self._say, post=self._poster.post)
        self._run: Holding | None = None
        self._models: dict[int, Holding] = {}  # id(model) -> its holding
        self._doomed: list[Callable[[], None]] = []
        state.events.config.connect(lambda config: self.ledger.set_budget(config.budget_bytes))
        self._cells = 0  # the size of the run on screen
        # once the views let go of a large result (they do when the next one is drawn), the C heap
        # keeps its freed pages: malloc_trim returns them
        self._trim_timer = QTimer(self, singleShot=True, interval=TRIM_DELAY_MS)
        self._trim_timer.timeout.connect(lambda: self._chore(MEMORY, trim_heap))

    def shutdown(self) -> None:
        self._trim_timer.stop()

    def reserve_plan(self, plan: object) -> None:
        """The run being computed announced its plan: its working memory counts against the one
        budget while it computes; the least recently used copies the tabs keep make room for it
        (what is on screen stays)."""
        if isinstance(plan, RunPlan):
            self.ledger.reserve(plan.peak_bytes, f"the run being computed ({plan.size_text})", strict=False)

    def hold_run(self, shown: Shown) -> None:
        """The run on screen (or its new view) replaces the last one: held, protected and never
        let go while drawn; older holdings make room for it. The model caches are brought up to date."""
        cells = int(np.size(shown.map.weights))
        if shown.new_run and cells * 4 < self._cells:
            self._trim_timer.start()  # a much smaller run replaced a large one: give its memory back
        self._cells = cells
        self.sync_models(shown)
        if self._run is not None:
            self._run.release()
        what = f"the run on screen ({shown.length:,} tokens)"
        self._run = self.ledger.hold("window", what, arrays_of(shown, RUN_DEPTH), None, protected=True, strict=False)

    def sync_models(self, shown: Shown | None = None) -> None:
        """Hold every cached model not held yet, forget the holdings of models no longer cached.
        The model the run on screen came from (the newest of its cache) is in use: protected and
        never let go (dropping it would only load it again for the next run); the others may go."""
        caches = [("toy model", cached_models(), forget_models, lambda m: m)]
        loader = sys.modules.get("attndesk.models.loader")
        if loader is not None:  # never imported: no checkpoint loaded
            caches.append(("model", loader.loaded_models(), loader.forget_models, lambda m: m.model))
        using = "model" if shown is not None and shown.layers is not None else "toy model"
        alive: set[int] = set()
        for kind, models, forget, module_of in caches:
            for model in models:
                alive.add(id(model))
                in_use = kind == using and model is models[-1]
                held = self._models.get(id(model))
                if held is not None and held.alive and held.protected == in_use:
                    continue
                if held is not None:
                    held.release()
                self._models[id(model)] = self._hold_model(kind, model, module_of(model), forget, in_use)
        for key in [k for k in self._models if k not in alive]:
            self._models.pop(key).release()

    def _hold_model(self, kind: str, model: Any, module: Any, forget: Callable, in_use: bool) -> Holding:
        count = sum(p.numel() for p in module.parameters())
        name = getattr(model, "name", f"of {count:,} parameters")
        label = f"the {kind} {name} ({'in use' if in_use else 'cached'})"
        release = None if in_use else (lambda why, m=model, f=forget: self._forget_later(lambda: f([m])))
        return self.ledger.hold("models", label, model_parts(module), release, protected=in_use, strict=False)

    def _forget_later(self, fn: Callable[[], None]) -> None:
        """Forget a model in a job: a cache's lock may be held by a load for seconds. The doomed
        wait in a list, since a newer job of the channel replaces a queued one."""
        self._doomed.append(fn)
        self._chore(MODELS, self._forget_doomed)

    def _forget_doomed(self) -> None:
        while self._doomed:
            self._doomed.pop(0)()

    def _say(self, line: str) -> None:
        status = self._status
        if status.busy or status.error or not status.message:
            status.say(line)
        else:  # beside the line of the run just drawn (in place of an older such line)
            status.say(f"{status.message.split(LET_GO)[0]}{LET_GO}{line.removeprefix('let go of ')}")


__all__ = ["GuiPost", "WindowLedger", "model_parts"]
