"""render/layout.py: where heatmaps, titles, label bands and group headers go, without a painter."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attndesk.render.layout import FigureText, GridSpec, Rect, band_outline, choose_figure_layout, label_step, pack_grid


def boxes(layout) -> list[tuple[str, Rect]]:
    """Every rectangle a grid draws: maps, titles, the label bands shown, group headers."""
    out = []
    for i in range(layout.spec.n):
        out += [(f"map {i}", layout.map_rect(i)), (f"title {i}", layout.title_rect(i))]
        if layout.x_labelled(i):
            out.append((f"key labels {i}", layout.x_label_rect(i)))
        if layout.y_labelled(i):
            out.append((f"query labels {i}", layout.y_label_rect(i)))
    out += [(f"group {g} row {members[0]}", box) for g, members, box in layout.groups()]
    return out


def overlaps(layout) -> list[str]:
    found = boxes(layout)
    return [f"{a} {ra} / {b} {rb}" for (a, ra), (b, rb) in itertools.combinations(found, 2) if ra.intersects(rb)]


@given(
    n=st.integers(1, 20),
    width=st.integers(300, 2400),
    height=st.integers(250, 1600),
    cells=st.integers(3, 300),
    group=st.sampled_from([1, 2, 4]),
)
@settings(max_examples=150, deadline=None)
def test_nothing_overlaps_and_everything_stays_inside(n, width, height, cells, group):
    group = group if n % group == 0 else 1
    spec = GridSpec(
        n=n,
        cells_y=cells,
        cells_x=cells,
        left_band=60,
        bottom_band=70,
        title_h=18,
        gap_x=12,
        gap_y=10,
        group=group,
        group_h=18 if group > 1 else 0.0,
        group_gap=10 if group > 1 else 0.0,
        aspect_limit=1.75,
    )
    area = Rect(4, 4, width, height)
    layout = pack_grid(spec, area)
    if layout is None:
        return  # nothing fits a map (a tiny area): nothing is drawn, nothing overlaps
    assert overlaps(layout) == []
    assert area.contains(layout.bounds(), tol=1e-6), (layout.bounds(), area)
    assert layout.cols * layout.rows >= n and (layout.rows - 1) * layout.cols < n  # no empty row
    if group > 1:  # a K/V group never splits across rows unless it is wider than a row
        assert layout.cols % group == 0 or group % layout.cols == 0


def test_the_row_above_an_incomplete_last_row_is_spaced_for_its_labels():
    # 16 heads in 6 columns (the window's 1400 x 900 case): heads 10 and 11 show key labels
    spec = GridSpec(n=16, cells_y=11, cells_x=11, left_band=50, bottom_band=60, title_h=18, gap_x=12, gap_y=10)
    layout = pack_grid(spec, Rect(0, 0, 1000, 560))
    assert layout.cols == 6 and layout.rows == 3
    assert [i for i in range(16) if layout.x_labelled(i)] == [10, 11, 12, 13, 14, 15]
    below = layout.x_label_rect(10)
    assert below.bottom <= layout.title_rect(12).y  # the third row starts under heads 10/11's labels
    assert overlaps(layout) == []


def test_four_heads_use_the_space_they_have():
    spec = GridSpec(
        n=4, cells_y=11, cells_x=11, left_band=50, bottom_band=60, title_h=18, gap_x=12, gap_y=10, aspect_limit=1.75
    )
    area = Rect(0, 0, 1000, 560)
    layout = pack_grid(spec, area)
    used = sum(layout.map_rect(i).w * layout.map_rect(i).h for i in range(4))
    assert used > 0.55 * area.w * area.h  # square cells alone used about 40 %
    square = pack_grid(GridSpec(**{**spec.__dict__, "aspect_limit": 1.0}), area)
    assert used > 1.3 * sum(square.map_rect(i).w * square.map_rect(i).h for i in range(4))


def test_groups_stay_together_under_their_header():
    spec = GridSpec(
        n=8,
        cells_y=9,
        cells_x=9,
        left_band=40,
        bottom_band=40,
        title_h=18,
        gap_x=12,
        gap_y=10,
        group=4,
        group_h=16,
        group_gap=10,
    )
    layout = pack_grid(spec, Rect(0, 0, 900, 500))
    groups = layout.groups()
    for g, members, header in groups:
        assert all(i // 4 == g for i in members)
        first, last = layout.map_rect(members[0]), layout.map_rect(members[-1])
        assert header.x == first.x and header.right == last.right and header.bottom <= layout.title_rect(members[0]).y
    assert {g for g, _, _ in groups} == {0, 1}
    if layout.cols == 8:  # side by side: the groups are further apart than heads within one
        assert layout.map_rect(4).x - layout.map_rect(3).right > layout.map_rect(1).x - layout.map_rect(0).right


class FakeText:
    """Text measured as 7 px per character and 12 px lines at 9 pt (scaled with the size)."""

    def pt(self, points: float) -> float:
        return points * 96 / 72

    def line(self, tick_pt: float) -> float:
        return 12 * tick_pt / 9

    def widest(self, texts, tick_pt: float) -> float:
        return min(max((len(t) for t in texts), default=0) * 7 * tick_pt / 9, 120)


def test_figure_layout_shows_every_label_when_there_is_room_and_a_subset_otherwise():
    few = [f"tok{i}" for i in range(8)]
    text = FigureText(few, few, 0, 0, 1, title_h=20, axis_h=12)
    lay = choose_figure_layout(text, FakeText(), Rect(0, 0, 1200, 900), (4, 8, 8))
    assert (lay.x_step, lay.y_step) == (1, 1) and lay.tick_pt == 9.0
    assert overlaps(lay.grid) == []
    many = [f"token{i}" for i in range(600)]
    crowded = choose_figure_layout(
        FigureText(many, many, 0, 0, 1, 20, 12), FakeText(), Rect(0, 0, 800, 600), (1, 600, 600)
    )
    assert crowded.x_step > 1 and crowded.y_step > 1 and crowded.rotated
    # neighbouring shown labels are at least a line apart
    assert crowded.grid.cell_h * crowded.y_step >= FakeText().line(crowded.tick_pt)
    tiny = choose_figure_layout(FigureText(many, many, 0, 0, 1, 20, 12), FakeText(), Rect(0, 0, 16, 16), (3, 600, 600))
    assert overlaps(tiny.grid) == []  # a 16 px export still lays out, one map under another


def test_label_step_never_lets_labels_touch():
    for count, cell, line in [(100, 3.0, 12.0), (2048, 0.2, 13.0), (10, 30.0, 12.0), (7, 11.5, 12.0)]:
        step = label_step(count, cell, line)
        assert (step == 1 and cell >= line * 0.92) or step * cell >= line


@pytest.mark.parametrize(
    "rows, cols, window, causal",
    [
        (10, 10, 3, True),
        (10, 10, 3, False),
        (6, 9, 2, False),
        (12, 12, 20, False),
        (8, 8, 1, True),
        (3000, 2500, 7, False),
        (5, 40, 30, False),
    ],
)
def test_band_outline_follows_the_window_edges(rows, cols, window, causal):
    lines = band_outline(rows, cols, window, causal=causal)
    edges = {}
    for line in lines:
        for (x0, y0), (x1, y1) in itertools.pairwise(line):
            assert x0 == x1 or y0 == y1  # a staircase: vertical and horizontal steps only
            if x0 == x1:  # a vertical step spans one query row at key boundary x0
                edges.setdefault(int(y0), set()).add(x0)
    for i in range(rows):
        expect = set()
        if 0 < i - window + 1 < cols:
            expect.add(float(i - window + 1))  # keys left of here are out of reach
        if not causal and 0 < i + window < cols:
            expect.add(float(i + window))  # and keys from here on
        assert edges.get(i, set()) == expect, (i, edges.get(i), expect)
    assert not math.isnan(sum(x for line in lines for x, _ in line))
