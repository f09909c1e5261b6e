"""Figures of attention heatmaps painted with QPainter: for the window, exports and the CLI.

- ``figure``: ``HeatmapFigure`` (what to draw) and ``figure_from_map`` (the figure of an AttentionMap).
- ``layout``: where things go, pure geometry shared with the window's heatmap panel.
- ``paint`` / ``cells`` / ``colorbar``: the QPainter drawing; ``export``: PNG/SVG/PDF/NPY/CSV files.
- ``gui``: the QApplication a renderer needs, and display detection.
- ``colormaps``: the colour lookup shared with the window.
- ``page``, ``page_overview``, ``page_corpus``: self-contained ``.html`` pages of a run, of a run too
  large for an exact page, and of a corpus store.
- ``bundle``: a run, its session, weights and figures as one reproducible ``.zip``.
- ``heads_grid``, ``training``, ``overlays``, ``kvcache``: figures of the corpus pass, of a training
  run (curves, animations), of maps blended over an image, and of KV-cache runs; ``chart``: what
  their line charts share (the page and title, the value grid, the x labels, a series).
- ``circuit``: figures of an edge circuit (the graph and its faithfulness curve); ``page_circuit``:
  its interactive page.

pyqtgraph's exporters are never used (its SVGExporter crashes on Qt >= 6.11).
"""

from __future__ import annotations

from .export import ExportError, default_filename, export_figure, export_weights, write
from .figure import HeatmapFigure, figure_from_map, suggested_size
from .gui import display_problem, ensure_gui_app, has_display
from .paint import FigureGeometry, paint_figure

__all__ = [
    "ExportError",
    "FigureGeometry",
    "HeatmapFigure",
    "default_filename",
    "display_problem",
    "ensure_gui_app",
    "export_figure",
    "export_weights",
    "figure_from_map",
    "has_display",
    "paint_figure",
    "suggested_size",
    "write",
]
