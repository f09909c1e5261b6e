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
