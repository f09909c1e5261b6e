"""The Export dialog's "Interactive page (.html)": the page of the map on screen, or why not."""

from __future__ import annotations

import numpy as np

from attndesk.app.window.export_dialog import ExportDialog, perform_export
from attndesk.render.page import decode_array, decode_mask, read_page_data
from tests.render.page_helpers import softmax_map


def test_dialog_writes_the_page_of_the_map_on_screen(qtbot, tmp_path):
    amap = softmax_map(3, 7, seed=2)
    dialog = ExportDialog(amap, target="all", colormap="magma", shared_scale=False)
    qtbot.addWidget(dialog)
    dialog.set_format("html")
    assert dialog.pathEdit.text().endswith(".html") and dialog.exportButton.isEnabled()
    dialog.set_path(tmp_path / "page.html")
    path = dialog.export()
    doc = read_page_data(path)
    assert doc["view"] == {"colormap": "magma", "shared_scale": False, "log_scale": False}
    assert np.abs(decode_array(doc["weights"]) - amap.weights).max() <= 1e-3
    np.testing.assert_array_equal(decode_mask(doc["mask"]), amap.mask)
    region = perform_export(amap, "all", "html", tmp_path / "region.html", region=((2, 5), (0, 3)))
    part = read_page_data(region)
    assert part["queries"] == amap.queries[2:5] and part["first_query"] == 2
    assert np.abs(decode_array(part["weights"]) - amap.weights[:, 2:5, 0:3]).max() <= 1e-3


def test_dialog_says_when_the_run_is_too_large_for_a_page(qtbot, tmp_path):
    dialog = ExportDialog(softmax_map(8, 500, causal=False), target="all")
    qtbot.addWidget(dialog)
    dialog.set_format("html")
    assert not dialog.exportButton.isEnabled()
    assert "what fits" in dialog.errorLabel.text()
    dialog.set_format("png")
    assert dialog.exportButton.isEnabled()
