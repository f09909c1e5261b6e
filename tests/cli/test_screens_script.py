"""The picture review (scripts/screens.py, ``make screens``): its checks on plain records, the same
checks on real widgets, and, in the perf tier, the review of the toy window."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PIL import Image
from PySide6.QtWidgets import QLabel, QScrollArea, QWidget

from attndesk.app.widgets.plot_axes import without_si_prefix
from scripts.screen_checks import (
    Axis,
    Box,
    Status,
    Widget,
    clipped,
    hidden_tabs,
    missing_tokens,
    review,
    si_prefixed,
    sideways,
    stale_status,
)
from scripts.screens import SIZES, contact_sheet, read_window, render

TOKENS = ["the", "Ġcat", "Ġsat", "Ġon", "Ġthe", "Ġmat"]


def test_a_child_past_its_parents_edge_is_named_once_with_its_parent():
    widgets = [
        Widget("window", Box(0, 0, 800, 600), -1),
        Widget("strip", Box(10, 10, 300, 20), 0),
        Widget("chip", Box(280, 10, 60, 20), 1),  # 30 px past the strip's right edge
        Widget("chipText", Box(285, 12, 50, 16), 2),  # cut with its chip: not named again
        Widget("fits", Box(20, 10, 60, 20), 1),
    ]
    problems = clipped("attribution", widgets)
    assert [(p.tab, p.widget) for p in problems] == [("attribution", "chip")]
    assert "strip" in problems[0].what and "50% hidden" in problems[0].what


def test_a_widget_inside_a_scroll_area_is_never_cut_and_the_visible_area_narrows_down_the_tree():
    widgets = [
        Widget("window", Box(0, 0, 400, 300), -1),
        Widget("page", Box(0, 0, 400, 300), 0),
        Widget("rows", Box(0, 400, 100, 100), 1, scrolled=True),  # scrolled out of view: fine
        Widget("form", Box(0, 0, 400, 280), 1),
        Widget("scroller", Box(0, 0, 400, 600), 0, scrolled=True),
        Widget("hint", Box(0, 290, 100, 20), 4, scrolled=True),
    ]
    assert clipped("t", widgets) == []
    cut = [*widgets[:4], Widget("below", Box(0, 270, 100, 20), 3)]  # past the form's bottom at y=280
    assert [p.widget for p in clipped("t", cut)] == ["below"]


def test_scroll_arrows_on_the_tab_bar_and_a_page_scrolling_sideways_are_named():
    window = Widget("window", Box(0, 0, 1280, 800), -1)
    bar = Widget("qt_tabwidget_tabbar", Box(340, 20, 934, 24), 0)
    arrows = [
        Widget(name, Box(1230 + 20 * i, 20, 20, 24), 1)
        for i, name in enumerate(("ScrollLeftButton", "ScrollRightButton"))
    ]
    assert [
        (p.widget, "hidden behind its arrows" in p.what) for p in hidden_tabs("heatmaps", [window, bar, *arrows])
    ] == [("qt_tabwidget_tabbar", True)]
    assert hidden_tabs("heatmaps", [window, bar]) == []
    page = Widget("corpusViewScroll", Box(340, 44, 934, 500), 0)
    hbar = Widget("qt_scrollarea_hcontainer", Box(340, 530, 934, 14), 1)
    assert [p.widget for p in sideways("corpus", [window, page, hbar])] == ["corpusViewScroll"]
    table = Widget("corpusTable", Box(340, 44, 400, 300), 0)  # a table scrolling sideways inside the page is fine
    assert (
        sideways("corpus", [window, page, table, Widget("qt_scrollarea_hcontainer", Box(340, 330, 400, 14), 2)]) == []
    )


def test_a_tab_that_lists_most_tokens_must_list_all_of_them():
    shown = [Widget("w", Box(0, 0, 100, 100), -1)]
    chips = [
        Widget(f"chip{i}", Box(i * 10, 0, 10, 10), 0, texts=(t.replace("Ġ", "␣"),)) for i, t in enumerate(TOKENS[:4])
    ]
    problems = missing_tokens("attribution", TOKENS, shown + chips)
    assert len(problems) == 1 and "not on screen: ['mat']" in problems[0].what and "chip0" in problems[0].widget
    assert (
        missing_tokens("attribution", TOKENS, shown + chips + [Widget("m", Box(0, 0, 5, 5), 0, texts=("mat",))]) == []
    )
    # a chip with no visible area does not name its token
    hidden = [Widget("m", Box(200, 0, 5, 5), 0, texts=("mat",))]
    assert missing_tokens("attribution", TOKENS, shown + chips + hidden)
    # a tab naming one token in passing does not list them
    assert missing_tokens("heatmaps", TOKENS, shown + chips[:1]) == []


def test_si_prefix_on_a_unitless_axis_and_a_message_from_another_tab_are_named():
    axes = [Axis("corpusGrid left axis", "layer (x0.001)", "", 1000.0), Axis("loss", "time (ms)", "s", 0.001)]
    assert [p.widget for p in si_prefixed("corpus", axes)] == ["corpusGrid left axis"]
    assert stale_status("train", Status("1 tokens generated", "generate"))[0].what.endswith("generate tab")
    assert stale_status("generate", Status("1 tokens generated", "generate")) == []
    assert stale_status("train", Status("done in 1 ms", "")) == []


def test_the_checks_read_real_widgets(qtbot):
    window = QWidget(objectName="window")
    window.resize(400, 300)
    strip = QWidget(window, objectName="strip")
    strip.setGeometry(0, 0, 200, 30)
    QLabel("drink", strip, objectName="lastChip").setGeometry(180, 0, 60, 30)
    scroll = QScrollArea(window, objectName="scroller")
    scroll.setGeometry(0, 40, 200, 100)
    inner = QWidget(objectName="long")
    inner.resize(180, 600)
    QLabel("to", inner, objectName="farChip").setGeometry(0, 500, 60, 30)
    scroll.setWidget(inner)
    plots = []
    for name, x, fixed in (("counts", 0, False), ("fixed", 200, True)):
        plot = pg.PlotWidget(window)
        plot.setObjectName(name)
        plot.setGeometry(x, 150, 200, 150)
        if fixed:
            without_si_prefix(plot.getPlotItem())
        plot.setLabel("left", "heads")
        plot.plot([0, 1, 2], [0.0, 0.0005, 0.001])
        plots.append(plot)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    for plot in plots:
        plot.getPlotItem().vb.autoRange()
    widgets, axes = read_window(window)
    problems = review("t", widgets, axes, Status("ready"), [])
    assert [p.widget for p in problems] == ["lastChip", "counts left axis"]  # not "fixed", not the scrolled chip
    assert "(x0.001)" in next(a.label for a in axes if a.name == "counts left axis")
    assert {"drink", "to"} <= {t for w in widgets for t in w.texts}


@pytest.mark.perf
def test_the_review_of_the_toy_window_pictures_every_tab_with_nothing_cut_or_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the corpus pass's store
    shots = render(tmp_path / "screens", sizes=SIZES[:1], windows=("toy",), log=lambda _line: None)
    tabs = {shot.tab for shot in shots}
    assert {"heatmaps", "step-through", "compare", "corpus", "train"} <= tabs
    assert {(shot.tab, shot.state) for shot in shots} >= {("compare", "empty"), ("compare", "after")}
    for shot in shots:
        with Image.open(shot.path) as image:
            assert image.size == SIZES[0], shot.caption
        wrong = [p for p in shot.problems if any(w in p.what for w in ("is cut by", "tokens", "on screen instead"))]
        assert not wrong, shot.caption
    sheet = contact_sheet(shots, tmp_path / "sheet.png")
    with Image.open(sheet) as image:
        assert image.width > 6 * 300 and image.height > 2 * 200
