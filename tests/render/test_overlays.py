"""The overlay of a patch map on an image: each patch's colour (the heatmaps' colour map) mixed
with its pixels at the opacity, written out pixel by pixel here."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.render.colormaps import lookup_table
from attndesk.render.overlays import blend, head_overlays, map_overlays


def test_blend_is_the_mix_of_each_patch_colour_and_its_pixels():
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (13, 10, 3), dtype=np.uint8)  # 13 x 10 pixels over 3 x 2 patches
    values = np.array([[0.0, 0.5], [1.0, 0.25], [0.75, 2.0]])
    got = blend(image, values, colormap="viridis", vmin=0.0, vmax=1.0, opacity=0.25)
    lut = lookup_table("viridis").astype(np.float64)
    for y in range(13):
        for x in range(10):
            r, c = min(y // 4, 2), min(x // 5, 1)
            colour = lut[int(np.rint(min(values[r, c], 1.0) * (len(lut) - 1)))]
            expected = np.clip(np.rint(0.75 * image[y, x] + 0.25 * colour), 0, 255)
            np.testing.assert_array_equal(got[y, x], expected.astype(np.uint8))
    np.testing.assert_array_equal(blend(image, values, opacity=0.0), image)
    with pytest.raises(ValueError, match="opacity"):
        blend(image, values, opacity=1.5)


def test_figures_share_one_scale_for_heads_and_own_ranges_for_maps():
    image = np.zeros((8, 8, 3), np.uint8)
    heads = np.stack([np.full((2, 2), 0.1), np.full((2, 2), 0.4)])
    figure = head_overlays(image, heads, title="t")
    assert figure.value_range == (0.0, 0.4) and [t for t, _ in figure.panels] == ["head 0", "head 1"]
    maps = map_overlays(image, {"a": np.array([[-1.0, 1.0], [0.0, 0.5]])}, title="m")
    assert maps.value_range is None and maps.panels[1][0] == "a [-1, 1]"


def test_regions_draw_the_partition_in_white():
    image = np.zeros((8, 8, 3), np.uint8)
    regions = np.array([[0, 1], [0, 1]])  # two windows side by side
    got = blend(image, np.zeros((2, 2)), vmax=1.0, opacity=0.0, regions=regions)
    white = np.all(got == 255, axis=-1)
    assert white[:, 3].all() and white.sum() == 8  # the last pixel column of the left window
    across = blend(image, np.zeros((2, 2)), vmax=1.0, opacity=0.0, regions=np.array([[0, 0], [1, 1]]))
    assert np.all(across[3] == 255) and np.all(across[:3] == 0) and np.all(across[4:] == 0)


def test_a_runs_figures_compute_each_layers_maps_once(vision, image, monkeypatch):
    from attndesk.interp import image_maps
    from attndesk.models import run_pretrained
    from attndesk.render import overlays

    run = run_pretrained(vision("vit")[0], image)
    calls = []

    def counting(run, layer, query):
        calls.append(layer)
        return image_maps.head_maps(run, layer, query)

    monkeypatch.setattr(overlays, "head_maps", counting)
    figures = dict(overlays.run_figures(run, 0))
    assert sorted(calls) == list(range(run.num_layers))
    assert list(figures) == [f"heads_layer{n}" for n in range(run.num_layers)] + ["all_heads"]
    for layer in range(run.num_layers):  # each layer's figure is its own maps, on its own scale
        got, want = (
            figures[f"heads_layer{layer}"],
            head_overlays(run.image, image_maps.head_maps(run, layer, 0), title=""),
        )
        assert got.value_range == want.value_range and len(got.panels) == len(want.panels)
        for (name, pixels), (want_name, want_pixels) in zip(got.panels, want.panels):
            assert name == want_name
            np.testing.assert_array_equal(pixels, want_pixels)


def test_a_vision_bundle_paints_each_overlay_figure_once(vision, image, monkeypatch, tmp_path):
    """The bundle's PNGs and its page's pictures are the same bytes, each figure painted once."""
    import base64

    from attndesk.interp.image_maps import default_query
    from attndesk.models import run_pretrained
    from attndesk.render import bundle
    from attndesk.render.overlays import run_figures
    from attndesk.render.page import page_layers, read_page_data
    from attndesk.session.state import AppState

    run = run_pretrained(vision("vit")[0], image)
    painted = []
    real = bundle.render_bytes

    def counting(*args, **kwargs):
        painted.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(bundle, "render_bytes", counting)
    files = bundle.vision_bundle_parts(AppState(), run, None, "viridis")["figures"]
    stems = [stem for stem, _ in run_figures(run, default_query(run))]
    assert painted == ["png"] * len(stems)
    pages = [name for name in files if name.endswith(".html")]
    assert sorted(files) == sorted([f"{stem}.png" for stem in stems] + pages) and len(pages) == 1
    (tmp_path / "page.html").write_bytes(files[pages[0]])
    doc = read_page_data(tmp_path / "page.html")
    assert len(page_layers(doc)) == run.num_layers
    assert [base64.b64decode(f["png"]) for f in doc["image"]["figures"]] == [files[f"{stem}.png"] for stem in stems]


def test_a_vision_page_over_the_limit_is_refused_in_one_line_or_left_out(vision, image, monkeypatch):
    import argparse

    from attndesk.cli.base import CliError
    from attndesk.cli.render_image import page_document
    from attndesk.models import run_pretrained
    from attndesk.render import bundle, page

    run = run_pretrained(vision("vit")[0], image)
    monkeypatch.setattr(page, "MAX_PAGE_BYTES", 70_000)  # the pictures leave too little room for the maps
    pictures = [("one", bytes(6_000))]
    assert bundle.vision_page(run, pictures, None, "viridis", {}) == {}
    args = argparse.Namespace(
        dpi=96, layer=None, page_precision="auto", model="m", image="x.png", colormap="viridis", shared_scale=True
    )
    with pytest.raises(CliError, match=r"^a page of .* \(the image's figures take 0\.0 MB of it\)$"):
        page_document(args, run, [], {})
