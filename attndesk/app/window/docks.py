"""The window's docks: the input tokens and the model parameters on the left (one above the
other), the timing tabs at the bottom, at their first sizes."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QScrollArea, QWidget

from attndesk.app.widgets.named import named

TIMING_DOCK_PX = 150  # the timing dock's first height, its least: the tabs keep 3/4 of an 800 px window


def _dock(window: QMainWindow, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
    dock = named(QDockWidget(title, window), name)
    dock.setWidget(widget)
    dock.setFeatures(
        QDockWidget.DockWidgetFeature.DockWidgetMovable
        | QDockWidget.DockWidgetFeature.DockWidgetFloatable
        | QDockWidget.DockWidgetFeature.DockWidgetClosable
    )
    window.addDockWidget(area, dock)
    return dock


def build_docks(
    window: QMainWindow, tokens: QWidget, parameters: QWidget, timing: QWidget
) -> tuple[QDockWidget, QDockWidget, QDockWidget]:
    """(tokens, parameters, timing) docks added to ``window``; the parameters scroll vertically."""
    params_scroll = QScrollArea()
    params_scroll.setWidgetResizable(True)
    params_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    params_scroll.setWidget(parameters)
    left, bottom = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.BottomDockWidgetArea
    tokens_dock = _dock(window, "Input tokens", "tokensDock", tokens, left)
    parameters_dock = _dock(window, "Model parameters", "parametersDock", params_scroll, left)
    timing_dock = _dock(window, "Timing", "timingDock", timing, bottom)
    window.splitDockWidget(tokens_dock, parameters_dock, Qt.Orientation.Vertical)
    window.resizeDocks([tokens_dock], [340], Qt.Orientation.Horizontal)
    window.resizeDocks([tokens_dock, parameters_dock], [380, 470], Qt.Orientation.Vertical)
    window.resizeDocks([timing_dock], [TIMING_DOCK_PX], Qt.Orientation.Vertical)
    return tokens_dock, parameters_dock, timing_dock
