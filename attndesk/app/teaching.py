"""The teaching tabs: step-through, positions, head statistics, compare, rollout and the online
softmax, plus the timing dock's "attndesk vs PyTorch" tab. This module only builds them: each view
gets its presenter (``app/tabs``), and the window adds the views as tabs."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QTabWidget, QWidget

from .jobs.compute import ComputeController
from .state import STEP_THROUGH_TAB, AppState
from .tabs.compare import CompareTab
from .tabs.headstats import HeadStatsTab
from .tabs.implementation import ImplementationTab
from .tabs.online_softmax import ONLINE_SOFTMAX_TAB, OnlineSoftmaxTab
from .tabs.positions import PositionsTab
from .tabs.rollout import RolloutTab
from .tabs.stepthrough import StepThroughTab
from .views.compare import CompareView
from .views.implementation import ImplementationPanel
from .views.headstats import HeadStatsView
from .views.online_softmax import OnlineSoftmaxView
from .views.positional import PositionalView
from .views.rollout import RolloutView
from .views.stepthrough import StepThroughView

TITLES = {
    STEP_THROUGH_TAB: ("Step-through", "one head's computation, stage by stage"),
    "positions": ("Positions", "the sinusoidal positional encoding, and RoPE's score by relative offset"),
    "head-stats": ("Head stats", "entropy, distance and where each head looks"),
    "compare": ("Compare", "pin a result, change anything, see B − A"),
    "rollout": ("Rollout", "pretrained mode: rollout across layers, follow a token"),
    ONLINE_SOFTMAX_TAB: ("Online softmax", "one head's softmax block by block, as FlashAttention computes it"),
}


class TeachingTabs(QObject):
    """The views and their presenters (``stepThrough``, ``positions``, ``headStats``, ``compare``,
    ``rollout``, ``onlineSoftmax``, ``implementation``)."""

    def __init__(self, state: AppState, compute: ComputeController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stepThroughView = StepThroughView()
        self.positionalView = PositionalView()
        self.headStatsView = HeadStatsView()
        self.compareView = CompareView()
        self.rolloutView = RolloutView()
        self.implementationPanel = ImplementationPanel()
        self.onlineSoftmaxView = OnlineSoftmaxView()
        self.stepThrough = StepThroughTab(state, compute, self.stepThroughView, self)
        self.positions = PositionsTab(state, compute, self.positionalView, self)
        self.headStats = HeadStatsTab(state, compute, self.headStatsView, self)
        self.compare = CompareTab(state, compute, self.compareView, self)
        self.rollout = RolloutTab(state, compute, self.rolloutView, self)
        self.implementation = ImplementationTab(compute, self.implementationPanel, self)
        self.onlineSoftmax = OnlineSoftmaxTab(state, compute, self.onlineSoftmaxView, self)
        self.timingTabs: QTabWidget | None = None

    def tabs(self) -> dict[str, tuple[QWidget, str, str]]:
        """tab id -> (view, title, tooltip), in the order they are shown."""
        views = (self.stepThroughView, self.positionalView, self.headStatsView, self.compareView, self.rolloutView,
                 self.onlineSoftmaxView)
        return {tab_id: (view, *TITLES[tab_id]) for tab_id, view in zip(TITLES, views)}

    def timing_tabs(self, timing_panel: QWidget) -> QTabWidget:
        """The timing dock's content: the timing panel and the implementation comparison."""
        tabs = QTabWidget(objectName="timingTabs")
        tabs.setDocumentMode(True)
        tabs.addTab(timing_panel, "Timing")
        tabs.addTab(self.implementationPanel, "attndesk vs PyTorch")
        tabs.setTabToolTip(1, "the same attention through attndesk, F.scaled_dot_product_attention "
                              "and nn.MultiheadAttention: timings and max differences")
        self.implementation.started.connect(lambda: tabs.setCurrentWidget(self.implementationPanel))
        self.timingTabs = tabs
        return tabs
