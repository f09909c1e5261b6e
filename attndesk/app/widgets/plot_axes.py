"""Axes of the window's plots that keep their labels as set.

pyqtgraph may scale an axis by an SI prefix ("entropy (×0.001)"); with that on, every change of
the view range re-sets the axis label's rich text (a text document rebuilt per axis, 4 axes per
plot), even for hidden axes. attndesk's labels carry their own units, so the plots turn it off.
"""

from __future__ import annotations

import pyqtgraph as pg

SIDES = ("left", "bottom", "top", "right")


def without_si_prefix(plot: pg.PlotItem) -> pg.PlotItem:
    """Turn off the automatic SI prefix on every axis of ``plot`` (returned, for chaining)."""
    for side in SIDES:
        plot.getAxis(side).enableAutoSIPrefix(False)
    return plot
