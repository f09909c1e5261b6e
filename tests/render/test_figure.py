"""The heatmap figure: pixels equal the colormap of the weights, masks are drawn as masks,
labels are text, long matrices stay cheap."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter

from attndesk.core import AttentionConfig, run_attention
from attndesk.render import colormaps
from attndesk.render.cells import block_mean, hatch_segments
from attndesk.render.export import figure_bytes
from attndesk.render.figure import HeatmapFigure, figure_from_map
from attndesk.render.layout import nice_ticks
from attndesk.render.paint import paint_figure


def render_svg_bytes(figure, width, height, dpi):
    return figure_bytes(figure, "svg", (width, height), dpi)


def render_pdf_bytes(figure, width, height, dpi):
    return figure_bytes(figure, "pdf", (width, height), dpi)


def figure_from_result(result, *args, **kw):
    return figure_from_map(result.attention_map(), *args, **kw)


SVG = "{http://www.w3.org/2000/svg}"


def paint_png(figure: HeatmapFigure, width: int = 900, height: int = 700):
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(0xFFFFFFFF)
    painter = QPainter(image)
    geometry = paint_figure(painter, QRectF(0, 0, width, height), figure)
    painter.end()
    return image, geometry


def pixel(image: QImage, x: float, y: float) -> tuple[int, int, int]:
    color = QColor(image.pixel(int(x), int(y)))
    return (color.red(), color.green(), color.blue())


def svg_texts(data: bytes) -> list[str]:
    root = ET.fromstring(data)
    return ["".join(node.itertext()) for node in root.iter(f"{SVG}text")]


@pytest.fixture
def small_figure() -> HeatmapFigure:
    rng = np.random.default_rng(3)
    weights = rng.random((2, 4, 5)).astype(np.float32)  # non-square on purpose
    mask = np.ones((4, 5), dtype=bool)
    mask[0, 3:] = False
    mask[:, 4] = False
    weights[:, ~mask] = 0.0
    return HeatmapFigure(
        matrices=weights,
        titles=["head 0", "head 1"],
        query_labels=["q0", "q1", "q2", "q3"],
        key_labels=["k0", "k1", "k2", "k3", "k4"],
        mask=mask,
        colormap="magma",
        annotate=False,
    )


def test_cell_pixels_are_the_colormap_of_their_weight(qapp, small_figure):
    image, geometry = paint_png(small_figure)
    lo, hi = small_figure.value_range()
    assert lo == 0.0 and hi == pytest.approx(float(small_figure.matrices.max()))
    masked_rgb, hatch_rgb = colormaps.mask_rgb("magma"), colormaps.hatch_rgb("magma")
    for i, rect in enumerate(geometry.maps):
        cw, ch = rect.width() / 5, rect.height() / 4
        assert cw > 20 and ch > 20
        for r in range(4):
            for c in range(5):
                x, y = rect.left() + (c + 0.5) * cw, rect.top() + (r + 0.5) * ch
                if small_figure.mask[r, c]:
                    expected = tuple(
                        int(v) for v in colormaps.map_values(small_figure.matrices[i, r, c], "magma", lo, hi)
                    )
                    assert pixel(image, x, y) == expected, (i, r, c)
                else:
                    # the interior of a masked cell is the mask colour with hatching, nothing else
                    seen = {
                        pixel(image, rect.left() + (c + fx) * cw, rect.top() + (r + fy) * ch)
                        for fx in np.linspace(0.2, 0.8, 7)
                        for fy in np.linspace(0.2, 0.8, 7)
                    }
                    assert seen <= {masked_rgb, hatch_rgb}, (r, c, seen)
                    assert masked_rgb in seen and hatch_rgb in seen
    # a masked cell never looks like a zero weight
    assert tuple(colormaps.map_values(0.0, "magma", lo, hi)) != masked_rgb


def test_per_head_scale_uses_each_heads_range(qapp, small_figure):
    small_figure.shared_scale = False
    small_figure.matrices[1] *= 0.1
    assert small_figure.relative_colorbar
    image, geometry = paint_png(small_figure)
    rect = geometry.maps[1]
    _lo, hi = small_figure.scale_for(1)
    assert hi == pytest.approx(float(small_figure.matrices[1].max()))
    r, c = np.unravel_index(np.argmax(small_figure.matrices[1]), (4, 5))
    x, y = rect.left() + (c + 0.5) * rect.width() / 5, rect.top() + (r + 0.5) * rect.height() / 4
    assert pixel(image, x, y) == tuple(int(v) for v in colormaps.lookup_table("magma")[-1])


def test_grid_reflows_with_the_head_count(qapp):
    def layout(n):
        fig = HeatmapFigure(np.full((n, 3, 3), 0.3, np.float32), [f"h{i}" for i in range(n)], list("abc"), list("abc"))
        _, geometry = paint_png(fig, 1200, 900)
        lefts = sorted({round(r.left()) for r in geometry.maps})
        tops = sorted({round(r.top()) for r in geometry.maps})
        return len(lefts), len(tops), geometry.maps

    assert layout(1)[:2] == (1, 1)
    cols, rows, maps = layout(8)
    assert cols * rows >= 8 and cols > 1 and rows > 1
    # no two heatmaps overlap
    for i, a in enumerate(maps):
        for b in maps[i + 1 :]:
            assert not a.intersects(b)


def test_large_matrix_is_block_averaged_and_stays_fast(qapp):
    length = 1024
    weights = np.zeros((1, length, length), np.float32)
    weights[0, :, : length // 2] = 1.0  # left half bright, right half dark
    fig = HeatmapFigure(
        weights, ["big"], [f"t{i}" for i in range(length)], [f"t{i}" for i in range(length)], annotate=False
    )
    image, geometry = paint_png(fig, 700, 600)
    rect = geometry.maps[0]
    assert rect.width() < length  # really downsampled
    top = colormaps.lookup_table("viridis")
    assert pixel(image, rect.left() + rect.width() * 0.25, rect.center().y()) == tuple(int(v) for v in top[-1])
    assert pixel(image, rect.left() + rect.width() * 0.75, rect.center().y()) == tuple(int(v) for v in top[0])
    # only a readable subset of the 1024 labels is drawn
    assert geometry.label_steps[0] > 1 and geometry.label_steps[1] > 1


def test_block_mean_handles_ragged_tiles_and_masks():
    values = np.arange(35, dtype=np.float32).reshape(5, 7)
    hidden = np.zeros((5, 7), dtype=bool)
    means, tile_hidden = block_mean(values, hidden, 2, 3)  # tiles: rows [0:2] [2:4] [4:5], cols [0:3] [3:6] [6:7]
    assert means.shape == (3, 3) and not tile_hidden.any()
    assert means[0, 0] == values[0:2, 0:3].mean()
    assert means[2, 2] == values[4, 6]  # the short corner tile is the mean of its one cell
    hidden[:, 6] = True
    hidden[4, :] = True
    means, tile_hidden = block_mean(values, hidden, 2, 3)
    assert tile_hidden[:, 2].all() and tile_hidden[2, :].all() and not tile_hidden[:2, :2].any()
    hidden[0, 0] = True  # a partly masked tile averages its attendable cells only
    means, _ = block_mean(values, hidden, 2, 3)
    assert means[0, 0] == pytest.approx(values[0:2, 0:3].sum() / 5)


def test_hatch_lines_stay_inside_and_join_across_rows():
    one = hatch_segments([QRectF(0, 0, 40, 20)], 5.0)
    two = hatch_segments([QRectF(0, 0, 40, 10), QRectF(0, 10, 40, 10)], 5.0)
    assert len(one) == len(two) > 5  # stacked rows give the same strokes, not twice as many
    for line in one:
        for point in (line.p1(), line.p2()):
            assert -1e-6 <= point.x() <= 40 + 1e-6 and -1e-6 <= point.y() <= 20 + 1e-6
        assert line.dx() == pytest.approx(-line.dy())  # 45 degrees


def test_nice_ticks_are_round_and_inside():
    assert nice_ticks(0.0, 1.0) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ticks = nice_ticks(0.0, 0.23)
    assert ticks[0] == 0.0 and ticks[-1] <= 0.23 and len(ticks) >= 4
    sym = nice_ticks(-0.3, 0.3)
    assert 0.0 in sym and min(sym) >= -0.3 and max(sym) <= 0.3


def test_svg_has_token_labels_as_text_and_vector_cells(qapp):
    tokens = ["the", "cat", "<sat>", "a&b", '"q"', ","]
    weights = np.random.default_rng(0).random((1, 6, 6)).astype(np.float32)
    fig = HeatmapFigure(weights, ["head 0"], tokens, tokens, suptitle="tricky tokens")
    data = render_svg_bytes(fig, 800, 700, 96)
    texts = svg_texts(data)
    for token in tokens:
        assert texts.count(token) >= 2  # once on each axis
    assert "tricky tokens" in texts
    root = ET.fromstring(data)
    assert len(list(root.iter(f"{SVG}image"))) == 1  # only the colour bar is an image
    assert len(list(root.iter(f"{SVG}path"))) >= 2


def test_big_matrix_vector_output_embeds_an_image_and_stays_small(qapp):
    length = 2048
    weights = np.random.default_rng(1).random((1, length, length), dtype=np.float32)
    labels = [f"w{i}" for i in range(length)]
    fig = HeatmapFigure(weights, ["head 0"], labels, labels)
    pdf = render_pdf_bytes(fig, 1000, 900, 96)
    assert pdf.startswith(b"%PDF") and len(pdf) < 8 * 2**20
    svg = render_svg_bytes(fig, 1000, 900, 96)
    root = ET.fromstring(svg)
    assert len(list(root.iter(f"{SVG}image"))) == 2  # the matrix and the colour bar
    texts = svg_texts(svg)
    assert 5 < sum(t.startswith("w") for t in texts) < 400  # a readable subset of labels, as text
    assert len(svg) < 8 * 2**20


def test_figure_from_result_matches_the_core(qapp):
    result = run_attention(AttentionConfig(embed_dim=16, num_heads=4, mask="causal"), "the cat sat on the mat")
    every = figure_from_result(result, "all")
    np.testing.assert_array_equal(every.matrices, result.weights)
    assert every.titles == ["H0", "H1", "H2", "H3"]
    assert every.query_labels == result.tokens and every.key_labels == result.keys
    np.testing.assert_array_equal(every.mask, result.mask)
    mean = figure_from_result(result, "mean")
    np.testing.assert_allclose(mean.matrices[0], result.weights.mean(axis=0), rtol=1e-6, atol=1e-7)
    one = figure_from_result(result, 2, colormap="CET-L1", shared_scale=False)
    np.testing.assert_array_equal(one.matrices[0], result.weights[2])
    assert one.colormap == "CET-L1" and "mask: causal" in one.caption
    region = figure_from_result(result, 1, region=((1, 4), (0, 2)))
    np.testing.assert_array_equal(region.matrices[0], result.weights[1, 1:4, 0:2])
    assert region.query_labels == result.tokens[1:4] and region.first_query == 1
    for bad in (4, -1, "max", 1.5):
        with pytest.raises(ValueError):
            figure_from_result(result, bad)
    with pytest.raises(ValueError):
        figure_from_result(result, 0, region=((0, 99), (0, 2)))


def test_diverging_figure_is_centred_at_zero():
    diff = np.array([[[-0.2, 0.1], [0.05, 0.0]]], np.float32)
    fig = HeatmapFigure(diff, ["B - A"], ["a", "b"], ["a", "b"], diverging=True)
    assert fig.value_range() == pytest.approx((-0.2, 0.2))
    assert fig.colormap_name in colormaps.DIVERGING_COLORMAPS
    mid = colormaps.map_values(0.0, fig.colormap_name, -0.2, 0.2)
    assert min(int(v) for v in mid) > 200  # the centre of a diverging map is light


def test_nonfinite_values_draw_as_masked(qapp):
    scores = np.array([[[1.0, -math.inf], [0.5, 2.0]]], np.float32)
    fig = HeatmapFigure(scores, ["masked scores"], ["a", "b"], ["a", "b"], annotate=False)
    assert fig.masked(0).tolist() == [[False, True], [False, False]]
    assert fig.value_range() == (0.0, 2.0)
    image, geometry = paint_png(fig, 500, 400)
    rect = geometry.maps[0]
    seen = pixel(image, rect.left() + rect.width() * 0.75, rect.top() + rect.height() * 0.25)
    assert seen in {colormaps.mask_rgb("viridis"), colormaps.hatch_rgb("viridis")}


def test_figure_rejects_inconsistent_input():
    with pytest.raises(ValueError):
        HeatmapFigure(np.zeros((1, 2, 3)), ["x"], ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError):
        HeatmapFigure(np.zeros((1, 2, 2)), ["x"], ["a", "b"], ["a", "b"], mask=np.ones((3, 3), bool))
    with pytest.raises(ValueError):
        HeatmapFigure(np.zeros((1, 2, 2)), ["x"], ["a", "b"], ["a", "b"], colormap="no-such-map")
    # an overview: 2x2 tiles of 3 tokens still take per-token labels
    tiled = HeatmapFigure(np.zeros((1, 2, 2)), ["x"], list("abc"), list("abcd"), tokens_per_cell=2)
    assert tiled.tokens_per_cell == 2


def test_fixed_vmax_saturates_larger_weights(qapp, small_figure):
    small_figure.vmax = 0.5
    image, geometry = paint_png(small_figure)
    rect = geometry.maps[0]
    top = tuple(int(v) for v in colormaps.lookup_table("magma")[-1])
    r, c = np.unravel_index(np.argmax(np.where(small_figure.mask, small_figure.matrices[0], -1)), (4, 5))
    assert small_figure.matrices[0, r, c] > 0.5
    x, y = rect.left() + (c + 0.5) * rect.width() / 5, rect.top() + (r + 0.5) * rect.height() / 4
    assert pixel(image, x, y) == top
    # the colour bar says that larger values exist: a triangle in the top colour above the bar
    bar = geometry.colorbar
    assert pixel(image, bar.center().x(), bar.top() - bar.width() * 0.3) == top


def _decoder_map():
    from attndesk.attention.types import AttentionMap

    rng = np.random.default_rng(5)
    length, window = 10, 3
    i, j = np.indices((length, length))
    mask = (j <= i) & (i - j < window)
    w = np.where(mask, rng.random((8, length, length)), 0.0)
    w[:, :, 0] += 2.0 * (np.arange(length) < window)
    w = np.where(mask, w, 0.0)
    w /= w.sum(-1, keepdims=True)
    tokens = [f"w{k}" for k in range(length)]
    return AttentionMap(
        queries=tokens,
        keys=tokens,
        weights=w.astype(np.float32),
        mask=mask,
        title="Layer 5",
        summary="a decoder layer",
        kv_heads=2,
        window=window,
        layer_kind="local",
        alibi_slopes=2.0 ** -np.arange(1, 9),
        file_tag="dec",
    )


def test_grouped_heads_sit_side_by_side_under_their_kv_header(qapp):
    m = _decoder_map()
    fig = figure_from_map(m, "all")
    assert fig.group == 4 and fig.group_labels == ["kv 0: q 0\u20133", "kv 1: q 4\u20137"]
    assert fig.titles[5] == "H5 \u00b7 m=1/64" and fig.suptitle == "Layer 5, all 8 heads (local layer, window 3)"
    assert fig.window == 3 and fig.causal
    _, geometry = paint_png(fig, 1400, 900)
    grid = geometry.layout.grid
    assert grid.cols % 4 == 0 or 4 % grid.cols == 0
    for g, members, _header in grid.groups():
        assert {i // 4 for i in members} == {g}
    svg = render_svg_bytes(fig, 1400, 900, 96)
    assert {"kv 0: q 0\u20133", "kv 1: q 4\u20137"} <= set(svg_texts(svg))
    assert figure_from_map(m, 2).group == 1  # one head: no groups


def test_the_window_band_is_outlined_on_its_left_edge(qapp):
    from attndesk.render.cells import BAND_RGB

    fig = figure_from_map(_decoder_map(), 0)
    fig.annotate = False
    image, geometry = paint_png(fig, 800, 800)
    rect = geometry.maps[0]
    cw, ch = rect.width() / 10, rect.height() / 10
    # row 6 sees keys 4..6: the band's left edge is the line x = 4 cells
    x, y = rect.left() + 4 * cw, rect.top() + 6.5 * ch
    near = {pixel(image, x + dx, y) for dx in (-1, 0, 1)}
    assert tuple(BAND_RGB) in near
    assert tuple(BAND_RGB) not in {pixel(image, rect.left() + 5.5 * cw, y)}


def test_log_scale_colours_log10_of_the_weights(qapp):
    m = _decoder_map()
    fig = figure_from_map(m, 0, log_scale=True)
    fig.annotate = False
    assert fig.log_floor == 0.01 and fig.value_label.endswith("(log scale)")  # a tenth of 1/10 keys
    lo, hi = fig.value_range()
    assert lo == pytest.approx(-2.0) and hi == pytest.approx(np.log10(m.weights[0].max()))
    image, geometry = paint_png(fig, 800, 800)
    rect = geometry.maps[0]
    r, c = 7, 6  # an attendable cell
    value = np.log10(max(float(m.weights[0, r, c]), 0.01))
    expected = tuple(int(v) for v in colormaps.map_values(value, "viridis", lo, hi))
    assert (
        pixel(image, rect.left() + (c + 0.5) * rect.width() / 10, rect.top() + (r + 0.5) * rect.height() / 10)
        == expected
    )
    assert {"0.01", "0.1"} <= set(svg_texts(render_svg_bytes(fig, 800, 800, 96)))


def test_alibi_bias_figure_and_a_hidden_first_token(qapp):
    from attndesk.runs import select

    m = _decoder_map()
    bias = figure_from_map(m, "all", show="alibi bias")
    i, j = np.indices((10, 10))
    np.testing.assert_allclose(bias.matrices[1], -0.25 * np.abs(i - j))
    assert bias.mask is None and bias.window is None and bias.value_range() == (pytest.approx(-4.5), 0.0)
    hidden = figure_from_map(select.drop_keys(m, [0], renormalise=True), "mean")
    assert hidden.key_labels == m.keys[1:] and "renormalised" in hidden.caption
