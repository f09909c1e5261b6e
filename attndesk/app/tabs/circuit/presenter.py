"""The Circuit tab: edge scores, a circuit's faithfulness beside random edge sets, and a head's
score decomposition, for a trained toy preset (toy mode) or the pretrained decoder or
encoder-decoder on (``attndesk.interp``: ``edge_scores``, ``faithfulness_curve``,
``score_terms``).

Everything runs off the GUI thread as side jobs with progress and cancel (the Score edges bar,
Esc): one job scores every edge with the chosen method, with exact patching too when the method
is an estimate (a clicked edge shows its exact effect), and computes the faithfulness curve at
every circuit size the slider offers, so a slider move reads a cached row. A decomposition is a
job of its own channel. Toy inputs are token ids separated by spaces.
"""

from __future__ import annotations

from functools import lru_cache, partial
from pathlib import Path
from typing import cast

import numpy as np
import torch
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from attndesk.errors import ConfigError
from attndesk.interp import (
    composition_scores,
    edge_scores,
    faithfulness_curve,
    ov_copying_scores,
    qk_positional,
    score_terms,
)
from attndesk.interp.circuits import default_sizes
from attndesk.interp.composition import MODES
from attndesk.interp.edges import prepare
from attndesk.jobs import JobContext
from attndesk.jobs.executor import Channel
from attndesk.models import load_pretrained, run_pretrained
from attndesk.render.export import atomic_write, render_bytes
from attndesk.session.state import HEATMAPS_TAB, AppState, Part
from attndesk.session.status import StatusModel
from attndesk.train.presets import list_presets, load_preset

from ...jobs.channels import CIRCUIT, CIRCUIT_HEAD, CIRCUIT_TERMS
from ...jobs.compute import ComputeController
from ..interp import InterpPresenter, family_reason, parse_token
from .view import CircuitShown, CircuitView

CIRCUIT_TAB = "circuit"
LIVE_SIZES = 200  # every circuit size up to this many edges; above, the curve's geometric sizes
TOY_EXAMPLE = ("3 7 2 9 5 3 7 2 9", "3 7 2 9 6 3 7 2 9", "5", "6")
PRETRAINED_EXAMPLE = (
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
    " Mary",
    " John",
)


@lru_cache(maxsize=2)
def _preset(name: str):
    return load_preset(name)


def load_source(source: tuple[str, str | None], ctx: JobContext):
    """("preset", name) -> the trained run; ("pretrained", path) -> the loaded model (cached)."""
    kind, where = source
    if kind == "preset":
        assert where is not None
        return _preset(where)
    return load_pretrained(where, ctx=ctx.scaled(0.0, 0.0))


def _inputs(toy: bool, clean: str, corrupt: str, answer: str, wrong: str | None):
    """The fields as the core takes them: token id lists and ids (toy) or texts and tokens."""
    if not toy:
        return clean, corrupt, parse_token(answer), None if wrong is None else parse_token(wrong)

    def ids(text: str, what: str) -> list[int]:
        try:
            return [int(t) for t in text.split()]
        except ValueError:
            raise ConfigError(f"the {what} input of a trained toy model is token ids separated by spaces") from None

    def one(text: str, what: str) -> int:
        parts = ids(text, what)
        if len(parts) != 1:
            raise ConfigError(f"the {what} token is one token id")
        return parts[0]

    return (
        ids(clean, "clean"),
        ids(corrupt, "corrupt"),
        one(answer, "answer"),
        None if wrong is None else one(wrong, "wrong"),
    )


def circuit_job(source, clean, corrupt, answer, wrong, metric: str, method: str, budget: int, *, ctx: JobContext):
    """Worker: the edge table of ``method`` (and the exact one), then the faithfulness curve."""
    model = load_source(source, ctx)
    toy = source[0] == "preset"
    clean, corrupt, answer, wrong = _inputs(toy, clean, corrupt, answer, wrong)
    estimate = method != "exact"
    stop = 0.45 if estimate else 0.6
    setup = prepare(model, clean, corrupt, answer, wrong, metric, target=None, memory_budget=budget)
    table = edge_scores(
        model,
        clean,
        corrupt,
        answer,
        wrong,
        method=method,
        metric=metric,
        memory_budget=budget,
        setup=setup,
        ctx=ctx.scaled(0.0, 0.3 if estimate else stop, f"{method}: "),
    )
    exact = table
    if estimate:
        exact = edge_scores(
            model,
            clean,
            corrupt,
            answer,
            wrong,
            method="exact",
            metric=metric,
            memory_budget=budget,
            setup=setup,
            ctx=ctx.scaled(0.3, stop, "exact: "),
        )
    total = len(table)
    sizes = list(range(total + 1)) if total <= LIVE_SIZES else default_sizes(total)
    curve = faithfulness_curve(
        model,
        table,
        clean,
        corrupt,
        answer,
        wrong,
        metric=metric,
        sizes=sizes,
        memory_budget=budget,
        setup=setup,
        ctx=ctx.scaled(stop, 1.0, "faithfulness: "),
    )
    label = source[1] if toy else Path(str(source[1] or "model")).name
    return CircuitShown(table, exact, curve, method, metric, str(label), toy)


def terms_job(source, text, part: str, layer: int, head: int, query: int, key: int, budget: int, *, ctx: JobContext):
    model = load_source(source, ctx)
    if source[0] == "preset":
        return score_terms(model, _inputs(True, text, text, "0", None)[0], layer, head, query, key, ctx=ctx)
    return score_terms(model, text, layer, head, query, key, part=part, memory_budget=budget, ctx=ctx)


def head_job(source, text, part: str, layer: int, head: int, *, ctx: JobContext):
    """Worker: (weights [Lq, Lk] of that head on the clean input, its token labels, layer, head,
    its weight-only view: a trained preset's ``weight_view``, None for a pretrained model)."""
    model = load_source(source, ctx)
    if source[0] == "preset":
        ids = _inputs(True, text, text, "0", None)[0]
        weights = model.attention(torch.tensor([ids]))[0, layer, head].numpy()
        labels = [str(i) for i in ids]
        return np.asarray(weights, dtype=np.float64), (labels, labels), layer, head, weight_view(model, layer, head)
    run = run_pretrained(model, text, ctx=ctx)  # an encoder-decoder's decoder reads its start token alone
    source_tokens, target_tokens = list(run.tokens), list(run.target_tokens or [])
    labels_of = {
        "self": (source_tokens, source_tokens),
        "decoder": (target_tokens, target_tokens),
        "cross": (target_tokens, source_tokens),
    }
    try:
        weights_only: dict | str = weight_view(model, layer, head)
    except ConfigError as exc:  # an encoder-decoder, query/key norms, another projection layout
        weights_only = str(exc)
    weights = np.asarray(run.part_weights(part)[layer, head], dtype=np.float64)
    return weights, labels_of[part], layer, head, weights_only


def weight_view(model, layer: int, head: int) -> dict:
    """A head's weight-only numbers: its OV copying score, its positional previous-token score
    (None without a position table) and, per composition kind, the earlier head feeding it most."""
    view: dict = {"copying": float(ov_copying_scores(model)[layer, head])}
    try:
        view["previous"] = float(qk_positional(model)[1][layer, head])
    except ConfigError:
        view["previous"] = None
    for mode in MODES:
        into = composition_scores(model, mode, into=(layer, head))  # [L, H] from every head
        if layer == 0:
            view[mode] = None
            continue
        best = np.unravel_index(int(np.argmax(into)), into.shape)
        view[mode] = (f"L{best[0]}.H{best[1]}", float(into[best]))
    return view


class CircuitTab(InterpPresenter):
    """Binds the ``CircuitView`` to the side jobs (see the module docstring)."""

    tab_id = CIRCUIT_TAB
    CHANNEL = CIRCUIT
    WHAT = "circuit discovery (a logit metric)"

    def __init__(
        self,
        state: AppState,
        compute: ComputeController,
        status: StatusModel,
        view: CircuitView,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(state, compute, status, view, parent)
        self._side_tags: dict[Channel, int] = {}
        # one callable per side channel (the side jobs tell one requester from another by it)
        self._side_busy = {channel: partial(self._side_shown, channel) for channel in (CIRCUIT_TERMS, CIRCUIT_HEAD)}
        self._examples()
        view.decomposeRequested.connect(self.decompose)
        view.headPicked.connect(self.pick_head)
        view.headOpened.connect(self.open_head)
        view.exportPng.clicked.connect(lambda: self._ask_export("png"))
        view.exportSvg.clicked.connect(lambda: self._ask_export("svg"))
        self.update_availability()

    def _examples(self) -> None:
        toy = self.state.mode.kind != "pretrained"
        if toy:
            self.view.set_presets([str(p["name"]) for p in list_presets()])
        else:
            self.view.set_presets(None)
        self.view.set_inputs(*(TOY_EXAMPLE if toy else PRETRAINED_EXAMPLE))

    def _on_mode(self, mode) -> None:
        self._examples()
        super()._on_mode(mode)

    def source(self) -> tuple[str, str | None]:
        if self.state.mode.kind == "pretrained":
            return ("pretrained", self.state.mode.path)
        return ("preset", self.view.preset.currentText() or "induction")

    def unavailable(self) -> str | None:
        if self.state.mode.kind != "pretrained":
            return None  # the trained presets
        return family_reason(self.state.mode, self.WHAT) or super().unavailable()

    def run(self) -> None:
        """Score every edge of the chosen model (a job in flight is superseded)."""
        if self.unavailable() is not None:
            self.update_availability()
            return
        view = self.view
        wrong = view.wrongEdit.text() if view.metric_name() == "logit_diff" else None
        args = (
            self.source(),
            view.cleanEdit.text(),
            view.corruptEdit.text(),
            view.answerEdit.text(),
            wrong,
            view.metric_name(),
            view.method_name(),
            self.state.config.budget_bytes,
        )
        self._submit(self.CHANNEL, circuit_job, args, "scoring every edge", self._done, self._failed)

    def _submit(self, channel: Channel, fn, args: tuple, message: str, done, failed) -> None:
        """The edge job drives the bar (``_tag``, Cancel, Esc); a head's map and a decomposition
        run on channels of their own, each with its own tag, and say where they answer. The side
        jobs clear each tag however its job ends (``busy``)."""
        tag = next(self._tags)
        if channel == self.CHANNEL:
            self._tag = tag
            self.view.bar.set_message(f"{message}… (Esc cancels)")
            busy = self._show_busy
        else:
            self._side_tags[channel] = tag
            busy = self._side_busy[channel]

        def progress(fraction: float, text: str = "", tag: int = tag) -> None:
            self._progressed.emit(tag, float(fraction), str(text))

        self.compute.side.submit(
            channel,
            fn,
            *args,
            progress=progress,
            done=partial(done, tag),
            failed=partial(failed, tag),
            scope=None,
            busy=busy,
        )

    def _side_shown(self, channel: Channel, busy: bool) -> None:
        if not busy:
            self._side_tags[channel] = 0

    def show_result(self, result: CircuitShown) -> None:
        self.view.set_shown(result)

    def side_busy(self) -> bool:
        return any(self._side_tags.values())

    def pick_head(self, layer: int, head: int) -> None:
        """The clicked head's attention on the clean input, for picking a cell (a side job)."""
        args = (self.source(), self.view.cleanEdit.text(), self.view.part, layer, head)
        self._side_tags[CIRCUIT_TERMS] = 0  # a decomposition of the previous head is not shown
        self.view.set_terms("reading the head's attention…")
        self._submit(CIRCUIT_HEAD, head_job, args, "", self._head_done, self._side_failed(CIRCUIT_HEAD))

    def _head_done(self, tag: int, result) -> None:
        if self._side_tags.get(CIRCUIT_HEAD) != tag:
            return
        self.view.set_head_map(*result)

    def decompose(self, layer: int, head: int, query: int, key: int) -> None:
        """The clean input's score of (layer, head, query, key), term by term, as a side job."""
        text, budget = self.view.cleanEdit.text(), self.state.config.budget_bytes
        args = (self.source(), text, self.view.part, layer, head, query, key, budget)
        self.view.set_terms("decomposing…")
        self._submit(CIRCUIT_TERMS, terms_job, args, "", self._terms_done, self._side_failed(CIRCUIT_TERMS))

    def _terms_done(self, tag: int, result) -> None:
        if self._side_tags.get(CIRCUIT_TERMS) != tag:
            return
        self.view.set_terms(result)

    def _side_failed(self, channel: Channel):
        def failed(tag: int, message: str) -> None:
            if self._side_tags.get(channel) != tag:
                return
            self.view.set_terms(message)

        return failed

    def open_head(self, node: str) -> None:
        """A head of a pretrained model in the Heatmaps tab (a preset is not what Heatmaps shows)."""
        layer, head = self.view.layerSpin.value(), self.view.headSpin.value()
        if self.state.mode.kind != "pretrained":
            self.view.edgeLabel.setText(
                f"{node}: the Heatmaps tab shows the toy model of the parameters panel, not this trained preset"
            )
            return
        self.state.pretrained.part = cast(Part, self.view.part)
        self.state.pretrained.layer = int(layer)
        self.state.view.target = int(head)
        self.state.view.tab = HEATMAPS_TAB

    def export_to(self, path: str) -> Path:
        """The graph as a PNG or SVG file (atomically)."""
        data = self.view.export(path, render_bytes)
        return atomic_write(path, data)

    def _ask_export(self, fmt: str) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self.view, "Export the circuit graph", f"circuit.{fmt}", f"{fmt.upper()} (*.{fmt})"
        )
        if path:
            try:
                self.export_to(path)
                self.view.bar.set_message(f"wrote {path}")
            except Exception as exc:
                self.view.bar.set_message(str(exc), error=True)


__all__ = ["CIRCUIT_TAB", "CircuitTab", "circuit_job", "head_job", "terms_job", "weight_view"]
