"""Exports: exact sizes, parseable vector files, exact numbers, and no partial files on failure."""

from __future__ import annotations

import csv
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage

from attndesk.core import AttentionConfig, run_attention
from attndesk.render import colormaps
from attndesk.render.export import ExportError, default_filename, export_figure, export_weights
from attndesk.render.figure import HeatmapFigure, figure_from_map


def figure_from_result(result, *args, **kw):
    return figure_from_map(result.attention_map(), *args, **kw)


TRICKY = [",", '"', "a,b", '""', 'say "hi"', "line\nbreak", " pad ", "=1+1", "caf\u00e9", "[PAD]"]


@pytest.fixture(scope="module")
def result():
    return run_attention(AttentionConfig(embed_dim=16, num_heads=2, mask="causal"), "the cat sat on the mat .")


def test_png_has_the_asked_size_dpi_and_the_heatmap(qapp, tmp_path, result):
    figure = figure_from_result(result, 1)
    figure.annotate = False
    path = export_figure(figure, tmp_path / "head.png", size=(640, 480), dpi=150)
    assert path == tmp_path / "head.png"
    image = QImage(str(path))
    assert (image.width(), image.height()) == (640, 480)
    assert round(image.dotsPerMeterX() * 0.0254) == 150
    # the brightest weight's colour (top of the colormap) is on the image, as is the mask colour
    top = QColor(*[int(v) for v in colormaps.lookup_table("viridis")[-1]]).rgb()
    mask = QColor(*colormaps.mask_rgb("viridis")).rgb()
    pixels = {image.pixel(x, y) for x in range(0, 640, 2) for y in range(0, 480, 2)}
    assert top in pixels and mask in pixels
    assert os.listdir(tmp_path) == ["head.png"]  # no temp file left behind


def test_svg_parses_and_has_the_tokens_as_text(qapp, tmp_path, result):
    path = export_figure(figure_from_result(result, "all"), tmp_path / "all.svg", size=(1000, 700))
    root = ET.parse(path).getroot()
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for token in set(result.tokens):
        assert token in texts
    assert root.get("viewBox") == "0 0 1000 700"


def test_pdf_is_a_real_pdf(qapp, tmp_path, result):
    path = export_figure(figure_from_result(result, "mean"), tmp_path / "mean.pdf", size=(800, 600), dpi=96)
    data = path.read_bytes()
    assert data.startswith(b"%PDF") and data.rstrip().endswith(b"%%EOF")
    assert len(data) > 5000
    assert b"/FontFile" in data or b"/Font" in data  # labels are text with a font, not only pixels


def test_npy_round_trips_exactly(tmp_path):
    weights = np.random.default_rng(0).random((3, 5, 7), dtype=np.float32)
    path = export_weights(weights, [], [], tmp_path / "w.npy")
    loaded = np.load(path)
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, weights)


def test_csv_round_trips_with_tricky_labels(tmp_path):
    rng = np.random.default_rng(1)
    scales = 1e-3 ** rng.integers(0, 3, (len(TRICKY), 1))  # rows of ~1, ~1e-3 and ~1e-6
    matrix = (rng.random((len(TRICKY), len(TRICKY))) * scales).astype(np.float32)
    matrix[0, 0] = np.float32(1 / 3)
    path = export_weights(matrix, TRICKY, TRICKY[::-1], tmp_path / "w.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][1:] == TRICKY[::-1]
    assert [r[0] for r in rows[1:]] == TRICKY
    values = np.array([[np.float32(v) for v in r[1:]] for r in rows[1:]], dtype=np.float32)
    np.testing.assert_array_equal(values, matrix)  # every float32 bit survives the text


def test_csv_needs_one_matrix_with_matching_labels(tmp_path):
    with pytest.raises(ExportError, match="one"):
        export_weights(np.zeros((2, 2, 2), np.float32), ["a", "b"], ["a", "b"], tmp_path / "w.csv")
    with pytest.raises(ExportError, match="labels"):
        export_weights(np.zeros((2, 2), np.float32), ["a"], ["a", "b"], tmp_path / "w.csv")
    assert list(tmp_path.iterdir()) == []


def test_failures_leave_no_file_and_say_why(qapp, tmp_path, result):
    figure = figure_from_result(result, 0)
    with pytest.raises(ExportError, match="does not exist"):
        export_figure(figure, tmp_path / "missing" / "x.png")
    with pytest.raises(ExportError, match="unknown format"):
        export_figure(figure, tmp_path / "x.bmp")
    with pytest.raises(ExportError, match="unknown format"):
        export_weights(np.zeros((2, 2)), ["a", "b"], ["a", "b"], tmp_path / "x.txt")
    with pytest.raises(ExportError, match="out of range"):
        export_figure(figure, tmp_path / "x.png", size=(0, 100))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can write into read-only folders")
def test_read_only_folder_is_refused(qapp, tmp_path, result):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(ExportError, match="cannot write"):
            export_figure(figure_from_result(result, 0), folder / "x.png", size=(300, 200))
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_a_failing_rename_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    target = tmp_path / "w.npy"
    target.write_bytes(b"previous export")

    def broken_replace(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(ExportError, match="Permission denied"):
        export_weights(np.ones((2, 2), np.float32), ["a", "b"], ["a", "b"], target)
    assert target.read_bytes() == b"previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["w.npy"]


def test_written_files_have_ordinary_permissions(tmp_path):
    from attndesk.files.atomic import current_umask as _umask

    path = export_weights(np.ones((2, 2), np.float32), ["a", "b"], ["a", "b"], tmp_path / "w.csv")
    # like any newly created file (the temp file alone would be private, 0600)
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_default_filename_names_head_and_settings(result):
    assert default_filename(result.attention_map(), 1, "png") == "attn_head1_h2_e16_causal_scaled_seed0.png"
    assert default_filename(result.attention_map(), "mean", ".csv") == "attn_mean_h2_e16_causal_scaled_seed0.csv"
    other = run_attention(
        AttentionConfig(
            embed_dim=8, num_heads=4, mask="padding+causal", scaled=False, position="none", seed=7, dtype="float64"
        ),
        "a b",
    )
    assert (
        default_filename(other.attention_map(), "all", "pdf")
        == "attn_all_h4_e8_padding-causal_unscaled_nopos_seed7_float64.pdf"
    )
    with pytest.raises(ValueError):
        default_filename(result.attention_map(), 5, "png")


def test_export_of_a_hand_made_figure_with_default_size(qapp, tmp_path):
    figure = HeatmapFigure(np.eye(3, dtype=np.float32)[None], ["identity"], list("abc"), list("abc"))
    path = export_figure(figure, tmp_path / "eye.png")
    image = QImage(str(path))
    assert image.width() > 500 and image.height() > 500
    assert Path(path).stat().st_size > 1000


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_unwritable_folder_is_refused_even_for_root(qapp, result):
    # nobody, root included, can create files in /proc
    with pytest.raises(ExportError, match="cannot write"):
        export_figure(figure_from_result(result, 0), "/proc/attndesk-export.png", size=(300, 200))
    assert not Path("/proc/attndesk-export.png").exists()


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ExportError, match="not a folder"):
        export_weights(np.ones((1, 1)), ["a"], ["a"], blocker / "w.npy")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_file_name_too_long_is_a_message_not_an_oserror(tmp_path):
    """Found by the soak: an export named 300 characters raised OSError (ENAMETOOLONG) from the
    target checks (pathlib's is_dir passes that errno through) instead of an ExportError."""
    from attndesk.render.export import atomic_write

    with pytest.raises(ExportError, match=r"cannot write .*too long"):
        atomic_write(tmp_path / ("n" * 300 + ".png"), b"data")
    assert list(tmp_path.iterdir()) == []
