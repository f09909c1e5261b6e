"""Teaching views, each a standalone QWidget fed with plain core results (tabs of the main window).

- ``StepThroughView``: one head's computation as a strip of heatmaps (needs intermediates).
- ``PositionalView``: the sinusoidal encoding and its PE . PE^T similarity.
- ``HeadStatsView``: sortable per-head statistics + entropy-vs-distance scatter; ``headSelected(int)``.
- ``CompareView``: pin A, current B, B - A; one-click teaching comparisons.
- ``ImplementationPanel``: attndesk vs torch SDPA vs nn.MultiheadAttention timings and differences.
- ``RolloutView``: pretrained mode: attention rollout across layers and "follow a token".
"""

from __future__ import annotations

__all__ = ["CompareView", "HeadStatsView", "ImplementationPanel", "MatrixPlot", "PositionalView", "RolloutView", "StepThroughView"]


def __getattr__(name: str):
    # Imported on first use: building one view does not pay for the others.
    if name == "StepThroughView":
        from .stepthrough import StepThroughView

        return StepThroughView
    if name == "PositionalView":
        from .positional import PositionalView

        return PositionalView
    if name == "HeadStatsView":
        from .headstats import HeadStatsView

        return HeadStatsView
    if name in ("CompareView", "ImplementationPanel"):
        from . import compare

        return getattr(compare, name)
    if name == "RolloutView":
        from .rollout import RolloutView

        return RolloutView
    if name == "MatrixPlot":
        from .heatmap import MatrixPlot

        return MatrixPlot
    raise AttributeError(f"module 'attndesk.app.views' has no attribute {name!r}")
