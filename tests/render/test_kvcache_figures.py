"""The KV-cache figures: the raster's colours on a hand-made mask, and PNGs written atomically."""

from __future__ import annotations

import numpy as np

from attndesk.render.kvcache import EVICTED, FUTURE, KEPT, keep_image, write_curves, write_keep_raster


def test_keep_image_colours_kept_evicted_and_future():
    keep = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1]], bool)
    image = keep_image(keep)
    assert tuple(image[0, 0]) == KEPT and tuple(image[1, 0]) == EVICTED and tuple(image[0, 2]) == FUTURE
    assert tuple(image[2, 1]) == EVICTED and tuple(image[2, 2]) == KEPT


def test_figures_are_pngs(qapp, tmp_path):
    keep = np.tril(np.ones((10, 10), bool))
    raster = write_keep_raster([("a", keep), ("b", keep)], tmp_path / "r.png", title="t")
    curves = write_curves(
        {"x": ([1, 2, 3], [0.1, np.nan, 0.3])}, tmp_path / "c.png", title="t", x_label="b", y_label="kl"
    )
    for path in (raster, curves):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.png", "r.png"]


def test_a_band_is_shaded_in_its_line_colour(qapp, tmp_path):
    import imageio.v3 as iio

    line = {"a": ([1, 2, 3], [0.2, 0.5, 0.8])}
    band = {"a": ([1, 2, 3], [0.1, 0.3, 0.6], [0.4, 0.7, 0.9])}
    plain = iio.imread(write_curves(line, tmp_path / "p.png", title="t", x_label="b", y_label="v"))[..., :3]
    shaded = iio.imread(write_curves(line, tmp_path / "s.png", title="t", x_label="b", y_label="v", bands=band))
    # the first colour (#1f77b4) at alpha 50/255 over white
    tint = np.array([255 - (255 - c) * 50 / 255 for c in (0x1F, 0x77, 0xB4)])

    def tinted(image: np.ndarray) -> int:
        return int((np.abs(image[..., :3].astype(float) - tint).max(-1) <= 2).sum())

    assert tinted(plain) < 200 and tinted(shaded) > 100 * tinted(plain) + 10_000  # the plain: anti-aliased edges
