"""Every tab of the window, declared once: ``TABS`` (the central view tabs, in the order shown)
and ``DOCK_TABS`` (the timing dock's tabs after its "Timing" page).

A ``TabSpec`` says what the window needs to build and show a tab: its id (``AppState.view.tab``),
title and tooltip, a factory for its view, a factory for its presenter (called with the window's
``Assembly`` and the view; ``None`` when the window binds the view itself), the mode kinds it
serves ("toy", "pretrained"), the model kinds it serves (a pretrained model's family: "encoder",
"decoder", "encoder-decoder", "vision"; ``None`` = all), and ``unavailable(state)``: an ``EmptyState`` while
the tab does not apply to the model or mode on screen (the sentence saying why and the action that
makes it apply), or ``None``; ``channels`` lists its background jobs' channels (``jobs/channels.py``). The window then shows that empty state (``window/empty_state.py``) in
place of the view; no view greys its own form for it.

The window (``main_window``) builds every tab from here, shows each only in the modes and model
kinds it serves, and reaches a view by ``tab_widget(id)``, a presenter by ``tab_presenter(id)``;
presenters that need another tab (Generate pins in Compare) go through ``ui.tab_widget(id)``.
Adding a tab: a folder ``app/tabs/<name>/`` with its view and presenter, and one entry below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from attndesk.app.widgets.named import named
from attndesk.jobs.executor import Channel
from attndesk.session.state import HEATMAPS_TAB, PACKAGED, STEP_THROUGH_TAB, AppState
from attndesk.session.state import TOY as TOY_MODE

from ..jobs.channels import (
    ATTRIBUTION,
    CHECKPOINTS,
    CIRCUIT,
    CIRCUIT_HEAD,
    CIRCUIT_TERMS,
    COMPARE,
    CORPUS,
    CORPUS_QUERY,
    DERIVED,
    FLOW,
    GENERATE,
    GRID,
    IMAGE_MAP,
    IMAGE_OPEN,
    IMAGE_OVERLAYS,
    IMAGE_SAMPLES,
    IMPLEMENTATIONS,
    KVLAB,
    LOGIT_LENS,
    ONLINE,
    ONLINE_STEP,
    PATCHING,
    POSITIONS,
    PRETRAINED_STAGES,
    ROLLOUT,
    STAGES,
    STATISTICS,
    TEACHING,
    TRAIN,
)
from ..modes.pretrained.mode import GRID_TAB
from .attribution.presenter import ATTRIBUTION_TAB, AttributionTab
from .attribution.view import AttributionView
from .circuit.presenter import CIRCUIT_TAB, CircuitTab
from .circuit.view import CircuitView
from .compare.presenter import CompareTab
from .compare.view import CompareView
from .corpus import CorpusView
from .corpus.presenter import CORPUS_TAB, CorpusTab
from .generate.presenter import COMPARE_TAB, GENERATE_TAB, GenerationTab, generation_off
from .generate.view import GenerateView
from .headstats.presenter import HeadStatsTab
from .headstats.view import HeadStatsView
from .heatmaps.view import HeatmapPanel
from .image.presenter import IMAGE_TAB, ImageTab
from .image.view import ImageView
from .implementation.presenter import ImplementationTab
from .implementation.view import ImplementationPanel
from .interp import family_reason, image_reason, next_token_reason
from .kvlab.presenter import KVLAB_TAB, KVLabTab
from .kvlab.view import KVLabView
from .logit_lens.presenter import LOGIT_LENS_TAB, LogitLensTab
from .logit_lens.view import LogitLensView
from .online_softmax.presenter import ONLINE_SOFTMAX_TAB, TOY_ONLY, OnlineSoftmaxTab
from .online_softmax.view import OnlineSoftmaxView
from .patching.presenter import PATCHING_TAB, PatchingTab
from .patching.view import PatchingView
from .positions.presenter import PositionsTab
from .positions.view import PositionalView
from .rollout.presenter import TOY_MESSAGE, RolloutTab
from .rollout.view import RolloutView
from .stepthrough.presenter import StepThroughTab
from .stepthrough.view import StepThroughView
from .train import TrainView
from .train.presenter import TRAIN_TAB, train_presenter

if TYPE_CHECKING:  # annotations only
    from ..modes.base import Assembly

TOY, PRETRAINED = "toy", "pretrained"
EVERY_MODE = frozenset({TOY, PRETRAINED})
IMPLEMENTATION_TAB = "implementation"


@dataclass(frozen=True)
class EmptyState:
    """Why a tab does not apply now (one sentence) and the action that makes it apply: the button's
    text and what it does with the window's ``Assembly`` (``""`` / ``None``: no button)."""

    sentence: str
    action: str = ""
    act: Callable[[Assembly], None] | None = None


def to_toy(ui: Assembly) -> None:
    ui.state.mode = TOY_MODE


def to_packaged(ui: Assembly) -> None:
    ui.state.mode = PACKAGED


def open_model_folder(ui: Assembly) -> None:
    ui.menus.find("openModelFolderAction").trigger()


SWITCH_TO_TOY = ("Switch to the toy model", to_toy)
OPEN_PACKAGED = ("Open the packaged MiniLM", to_packaged)
OPEN_MODEL = ("Open a model folder…", open_model_folder)


def empty(sentence: str | None, action: tuple[str, Callable[[Assembly], None]] | None = None) -> EmptyState | None:
    """``EmptyState(sentence, *action)``, or None when there is no sentence (the tab applies)."""
    if sentence is None:
        return None
    return EmptyState(sentence) if action is None else EmptyState(sentence, *action)


@dataclass(frozen=True)
class TabSpec:
    """One tab (see the module docstring)."""

    id: str
    title: str
    tooltip: str
    view: Callable[[], QWidget]
    presenter: Callable[[Assembly, QWidget], QObject] | None = None
    modes: frozenset[str] = EVERY_MODE
    model_kinds: frozenset[str] | None = None
    unavailable: Callable[[AppState], EmptyState | None] | None = None
    reveal: str = ""  # a presenter signal that brings the tab to the front when emitted
    scroll: bool = False  # a large form: it scrolls inside its page rather than set the window's minimum size
    channels: tuple[Channel, ...] = ()  # its background jobs' channels (declared in jobs/channels.py)

    def serves(self, mode_kind: str, model_kind: str | None) -> bool:
        """Whether the tab is shown for this mode kind and (pretrained) model family."""
        if mode_kind not in self.modes:
            return False
        return self.model_kinds is None or mode_kind != PRETRAINED or model_kind in self.model_kinds


def _presenter(cls) -> Callable[[Assembly, QWidget], QObject]:
    """The usual presenter: ``cls(state, compute, view, parent=view)`` (it lives as long as its view)."""
    return lambda ui, view: cls(ui.state, ui.compute, view, view)


def _generation(ui: Assembly, view: QWidget) -> QObject:
    # the registry builds views by type (TabSpec.view); these two are the generation and Compare tabs' views
    return GenerationTab(
        ui.state,
        ui.compute,
        ui.status,
        cast(GenerateView, view),
        lambda: cast(CompareView, ui.tab_widget(COMPARE_TAB)),
        parent=view,
    )


def _interp(cls) -> Callable[[Assembly, QWidget], QObject]:
    """An interpretability presenter (``app/tabs/interp.py``): it also reports to the status line."""
    return lambda ui, view: cls(ui.state, ui.compute, ui.status, view, parent=view)


def _next_token(cls) -> Callable[[AppState], EmptyState | None]:
    """A next-token tab is off for an encoder-only model or a checkpoint without its LM head."""
    return lambda state: (
        empty(next_token_reason(state.mode, cls.WHAT), OPEN_MODEL) if state.mode.kind == PRETRAINED else None
    )


def _text_only(what: str) -> Callable[[AppState], EmptyState | None]:
    """A tab that reads text (any text model) is off for an image model; its button opens the packaged MiniLM."""
    return lambda state: empty(image_reason(state.mode, what), OPEN_PACKAGED)


def _corpus(ui: Assembly, view: QWidget) -> QObject:
    return CorpusTab(ui.state, ui.compute, ui.status, ui.menus, cast(CorpusView, view), parent=view)


def _train(ui: Assembly, view: QWidget) -> QObject:
    return train_presenter(ui, cast(TrainView, view))


def _grid_page() -> QWidget:
    """The All layers page: the pretrained mode fills it at install (``ui.tab_widget(GRID_TAB)``)."""
    return named(QWidget(), "pretrainedGridTab")


TABS: tuple[TabSpec, ...] = (
    TabSpec(HEATMAPS_TAB, "Heatmaps", "every head's attention weights", HeatmapPanel, channels=(DERIVED,)),
    TabSpec(
        IMAGE_TAB,
        "Image",
        "vision models: the input image, each head's attention from a query over it, maps across layers",
        ImageView,
        _interp(ImageTab),
        modes=frozenset({PRETRAINED}),
        model_kinds=frozenset({"vision"}),
        scroll=True,
        channels=(IMAGE_OPEN, IMAGE_SAMPLES, IMAGE_OVERLAYS, IMAGE_MAP),
    ),
    TabSpec(
        STEP_THROUGH_TAB,
        "Step-through",
        "one head's computation, stage by stage",
        StepThroughView,
        _presenter(StepThroughTab),
        unavailable=_text_only("the step-through"),
        channels=(STAGES, PRETRAINED_STAGES),
    ),
    TabSpec(
        "positions",
        "Positions",
        "the sinusoidal positional encoding, and RoPE's score by relative offset",
        PositionalView,
        _presenter(PositionsTab),
        channels=(POSITIONS,),
    ),
    TabSpec(
        "head-stats",
        "Head stats",
        "entropy, distance and where each head looks",
        HeadStatsView,
        _presenter(HeadStatsTab),
        channels=(STATISTICS,),
    ),
    TabSpec(
        COMPARE_TAB,
        "Compare",
        "pin a result, change anything, see B − A",
        CompareView,
        _presenter(CompareTab),
        channels=(COMPARE, TEACHING),
    ),
    TabSpec(
        "rollout",
        "Rollout",
        "pretrained mode: rollout and attention flow across layers, follow a token",
        RolloutView,
        _presenter(RolloutTab),
        unavailable=lambda state: empty(TOY_MESSAGE if state.mode.kind == TOY else None, OPEN_PACKAGED),
        channels=(ROLLOUT, FLOW),
    ),
    TabSpec(
        ONLINE_SOFTMAX_TAB,
        "Online softmax",
        "one head's softmax block by block, as FlashAttention computes it",
        OnlineSoftmaxView,
        _presenter(OnlineSoftmaxTab),
        unavailable=lambda state: empty(TOY_ONLY if state.mode.kind == PRETRAINED else None, SWITCH_TO_TOY),
        channels=(ONLINE, ONLINE_STEP),
    ),
    TabSpec(
        CORPUS_TAB,
        "Corpus",
        "every head over many texts (a vision model: a folder of images): metrics, roles, top texts "
        "and the query/key atlas (a pretrained model; the packaged MiniLM in toy mode)",
        CorpusView,
        _corpus,
        scroll=True,
        channels=(CORPUS, CORPUS_QUERY),
    ),
    TabSpec(
        TRAIN_TAB,
        "Train",
        "train a small decoder on a toy task and watch its heads form, live",
        TrainView,
        _train,
        reveal="opened",
        scroll=True,
        channels=(TRAIN, CHECKPOINTS),
    ),
    TabSpec(
        KVLAB_TAB,
        "KV cache",
        "decoders and the trained toys: what each KV-cache eviction policy keeps, head by head, and what it "
        "costs against the budget (the oracle beside it); sink and retrieval heads",
        KVLabView,
        _presenter(KVLabTab),
        model_kinds=frozenset({"decoder"}),
        scroll=True,
        channels=(KVLAB,),
    ),
    TabSpec(
        GRID_TAB,
        "All layers",
        "pretrained mode: every layer x head; click one to open it",
        _grid_page,
        modes=frozenset({PRETRAINED}),
        channels=(GRID,),
    ),
    TabSpec(
        GENERATE_TAB,
        "Generate",
        "decoders: generate token by token, see each step's attention row and next-token probabilities",
        GenerateView,
        _generation,
        modes=frozenset({PRETRAINED}),
        unavailable=lambda state: empty(generation_off(state.mode), OPEN_MODEL),
        channels=(GENERATE,),
    ),
    TabSpec(
        PATCHING_TAB,
        "Patching",
        "decoders: activation patching of every head and of the residual stream, "
        "from a clean prompt into a corrupted one",
        PatchingView,
        _interp(PatchingTab),
        modes=frozenset({PRETRAINED}),
        unavailable=_next_token(PatchingTab),
        scroll=True,
        channels=(PATCHING,),
    ),
    TabSpec(
        ATTRIBUTION_TAB,
        "Attribution",
        "decoders: which input tokens raise a target token's logit "
        "(integrated gradients, gradient × input, attention × gradient)",
        AttributionView,
        _interp(AttributionTab),
        modes=frozenset({PRETRAINED}),
        unavailable=_next_token(AttributionTab),
        channels=(ATTRIBUTION,),
    ),
    TabSpec(
        LOGIT_LENS_TAB,
        "Logit lens",
        "decoders: each layer's residual stream through the unembedding: top token and its probability per position",
        LogitLensView,
        _interp(LogitLensTab),
        modes=frozenset({PRETRAINED}),
        unavailable=_next_token(LogitLensTab),
        channels=(LOGIT_LENS,),
    ),
    TabSpec(
        CIRCUIT_TAB,
        "Circuit",
        "which edges carry a behaviour (trained presets, decoders, encoder-decoders): edge scores, "
        "faithfulness beside random edges, and why a head attends where it does",
        CircuitView,
        _interp(CircuitTab),
        model_kinds=frozenset({"decoder", "encoder-decoder"}),
        unavailable=lambda state: (
            empty(family_reason(state.mode, CircuitTab.WHAT), OPEN_MODEL) if state.mode.kind == PRETRAINED else None
        ),
        scroll=True,
        channels=(CIRCUIT, CIRCUIT_TERMS, CIRCUIT_HEAD),
    ),
)

DOCK_TABS: tuple[TabSpec, ...] = (
    TabSpec(
        IMPLEMENTATION_TAB,
        "attndesk vs PyTorch",
        "the same attention through attndesk, "
        "F.scaled_dot_product_attention and nn.MultiheadAttention: timings and max differences",
        ImplementationPanel,
        _presenter(ImplementationTab),
        reveal="started",
        channels=(IMPLEMENTATIONS,),
    ),
)


def spec(tab_id: str) -> TabSpec:
    """The spec of a tab (view or dock tab); KeyError names an unknown id."""
    for tab in TABS + DOCK_TABS:
        if tab.id == tab_id:
            return tab
    raise KeyError(f"no tab {tab_id!r}")


__all__ = [
    "DOCK_TABS",
    "EVERY_MODE",
    "IMPLEMENTATION_TAB",
    "PRETRAINED",
    "TABS",
    "TOY",
    "EmptyState",
    "TabSpec",
    "empty",
    "spec",
]
