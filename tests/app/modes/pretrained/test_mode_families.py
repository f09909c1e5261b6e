"""The pretrained mode for decoders and encoder-decoders in the real window (offscreen): tiny random
checkpoints of LLaMA (grouped-query), Mistral and Gemma 2 (sliding windows) and T5 from
tests/pretrained_models.py. The heatmaps are run_pretrained's weights for every part; K/V groups,
local/global layers, the causal mask and the sink-aware options are on screen; the target text
reruns the decoder; the local Hugging Face cache is listed; remote code is refused; loading never
opens a socket."""

from __future__ import annotations

import json
import shutil
import socket

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build

from attndesk.app import MainWindow
from attndesk.app.modes.pretrained.mode import GRID_TAB
from attndesk.app.modes.pretrained.parts import NO_CROSS_ROLLOUT
from attndesk.models import clear_cache, load_pretrained, run_pretrained
from attndesk.session.state import TOY
from tests.conftest import TIMEOUT_MS

TEXT = "The cat sat on the mat."
TARGET = "Le chat dort."


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: build(name, root / name) for name in ("llama", "mistral", "gemma2", "t5")}


@pytest.fixture
def text_window(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    w.state.text = TEXT
    yield w
    dispose(w)


def wait_shown(qtbot, w, check):
    qtbot.waitUntil(
        lambda: (s := w.displayed_result()) is not None and s.layers is not None and check(s), timeout=TIMEOUT_MS
    )
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    return w.displayed_result()


def open_model(qtbot, w, folder, **check):
    assert w.pretrained.open_folder(folder), w.status_text()
    return wait_shown(
        qtbot,
        w,
        lambda s: (
            s.mode.path == str(folder.resolve())
            and all(getattr(s, k) == v if k != "part" else s.present_key[2] == v for k, v in check.items())
        ),
    )


def shown_weights(w) -> np.ndarray:
    return np.stack(w.heatmapPanel.displayed_arrays())


def test_gqa_decoder_shows_run_pretraineds_weights_grouped_and_masked(qtbot, text_window, folders):
    w = text_window
    reference = run_pretrained(load_pretrained(folders["llama"]), TEXT)
    shown = open_model(qtbot, w, folders["llama"])
    np.testing.assert_allclose(shown_weights(w), reference.weights[0], atol=1e-6)
    assert shown.map.kv_heads == 2 and w.heatmapPanel.canvas.group_headers() == ["kv 0: q 0–1", "kv 1: q 2–3"]
    assert np.array_equal(shown.map.mask, np.tril(np.ones((reference.length,) * 2, bool)))  # causal
    assert "hatched = masked" in w.heatmapPanel.note.text()
    assert w.pretrained.controls.part_combo.isHidden() and w.pretrained.controls.target_row.isHidden()
    w.pretrained.controls.layer_spin.setValue(1)
    wait_shown(qtbot, w, lambda s: s.layer == 1)
    np.testing.assert_allclose(shown_weights(w), reference.weights[1], atol=1e-6)
    assert "(2 K/V)" in w.pretrained.summary.text()


def test_sink_aware_options_log_colours_and_hidden_first_token(qtbot, text_window, folders):
    w = text_window
    reference = run_pretrained(load_pretrained(folders["llama"]), TEXT)
    open_model(qtbot, w, folders["llama"])
    controls, panel = w.pretrained.controls, w.heatmapPanel
    controls.hide_first_check.click()
    assert w.state.view.hide_first_key
    qtbot.waitUntil(
        lambda: panel.source() is not None and panel.source().key_offset == 1 and not panel.is_building(),
        timeout=TIMEOUT_MS,
    )
    rest = reference.weights[0][:, :, 1:]
    sums = rest.sum(-1, keepdims=True)
    expected = np.divide(rest, sums, out=np.zeros_like(rest), where=sums > 0)  # renormalised over keys 1..
    np.testing.assert_allclose(shown_weights(w), expected, atol=1e-5)
    assert "hidden, renormalised" in panel.layerBadge.text()
    controls.log_check.click()  # log10 of the same weights: the sink no longer hides the rest
    assert w.state.view.log_scale and panel.log_scale() and "log colours" in panel.layerBadge.text()
    logged = shown_weights(w)
    visible = expected > 0.05
    np.testing.assert_allclose(logged[visible], np.log10(expected[visible]), atol=1e-5)
    w.state.view.hide_first_key = False  # the state drives the checkbox back
    assert not controls.hide_first_check.isChecked()


def test_sliding_window_layers_are_marked_local_with_the_band(qtbot, text_window, folders):
    w = text_window
    shown = open_model(qtbot, w, folders["mistral"])
    assert shown.map.layer_kind == "local" and shown.map.window == 3
    assert "local layer" in w.heatmapPanel.layerBadge.text() and "window 3" in w.heatmapPanel.layerBadge.text()
    assert "red line = the window's edge" in w.heatmapPanel.note.text()
    assert w.pretrained.controls.layer_spin.text() == "layer 0 (local, window 3)"
    allowed = shown.map.mask
    i, j = np.indices(allowed.shape)
    assert np.array_equal(allowed, (j <= i) & (i - j < 3))  # causal and within the window
    # Gemma 2 alternates local and global layers: the spin, the badge and the grid say which
    reference = run_pretrained(load_pretrained(folders["gemma2"]), TEXT)
    shown = open_model(qtbot, w, folders["gemma2"])
    assert reference.layer_kinds == ["local", "global"] and shown.map.layer_kind == "local"
    w.pretrained.controls.layer_spin.setValue(1)
    shown = wait_shown(qtbot, w, lambda s: s.layer == 1)
    assert shown.map.layer_kind == "global" and shown.map.window is None
    assert w.pretrained.controls.layer_spin.text() == "layer 1 (global)"
    np.testing.assert_allclose(shown_weights(w), reference.weights[1], atol=1e-6)
    w.pretrained.controls.all_layers_check.click()
    qtbot.waitUntil(lambda: w.pretrained.grid.painting() is not None, timeout=TIMEOUT_MS)
    assert w.pretrained.grid.painting().layer_notes == ["local", ""]
    assert w.pretrained.grid.painting().head_labels == ["H0 · kv0", "H1 · kv0", "H2 · kv1", "H3 · kv1"]


def test_encoder_decoder_parts_and_target_text(qtbot, text_window, folders):
    w = text_window
    model = load_pretrained(folders["t5"])
    open_model(qtbot, w, folders["t5"])
    controls = w.pretrained.controls
    assert controls.part_combo.isVisible() and controls.target_row.isVisible()
    controls.target_edit.setFocus()
    qtbot.keyClicks(controls.target_edit, TARGET)
    assert w.state.target_text == TARGET
    reference = run_pretrained(model, TEXT, target=TARGET)
    shown = wait_shown(qtbot, w, lambda s: s.layers.target_tokens == reference.target_tokens)
    np.testing.assert_allclose(shown_weights(w), reference.weights[0], atol=1e-6)  # the encoder's
    for index, part in ((1, "decoder"), (2, "cross")):
        controls.part_combo.setCurrentIndex(index)
        controls.part_combo.activated.emit(index)
        assert w.state.pretrained.part == part
        shown = wait_shown(qtbot, w, lambda s, p=part: s.present_key[2] == p)
        np.testing.assert_allclose(shown_weights(w), reference.part_weights(part)[0], atol=1e-6)
        assert list(shown.map.queries) == reference.target_tokens
    assert list(shown.map.keys) == reference.tokens and shown.keys.tokens == reference.tokens  # cross: source columns
    assert shown.map.mask is None
    # a longer target: a new run, the cross view has more rows, still run_pretrained's
    longer = TARGET + " Il est fatigué."
    w.state.target_text = longer
    assert controls.target_edit.text() == longer
    reference = run_pretrained(model, TEXT, target=longer)
    shown = wait_shown(
        qtbot, w, lambda s: s.layers.target_tokens == reference.target_tokens and s.present_key[2] == "cross"
    )
    assert shown.map.shape == (len(reference.target_tokens), reference.length)
    np.testing.assert_allclose(shown_weights(w), reference.cross_weights[0], atol=1e-6)
    # the decoder's self-attention is causal over the target
    w.state.pretrained.part = "decoder"
    shown = wait_shown(qtbot, w, lambda s: s.present_key[2] == "decoder")
    t = len(reference.target_tokens)
    assert np.array_equal(shown.map.mask, np.tril(np.ones((t, t), bool)))
    np.testing.assert_allclose(shown_weights(w), reference.decoder_weights[0], atol=1e-6)


def test_rollout_says_why_not_for_cross_attention(qtbot, text_window, folders):
    w = text_window
    open_model(qtbot, w, folders["t5"])
    w.state.update({"target_text": TARGET})
    w.state.pretrained.part = "cross"
    wait_shown(
        qtbot,
        w,
        lambda s: (
            s.present_key[2] == "cross" and s.layers.target_tokens is not None and len(s.layers.target_tokens) > 1
        ),
    )
    w.state.view.tab = "rollout"
    view = w.tab_widget("rollout")
    qtbot.waitUntil(lambda: NO_CROSS_ROLLOUT in view.infoLabel.text() or not view.body.isVisible(), timeout=TIMEOUT_MS)
    assert view.result() is None or NO_CROSS_ROLLOUT in view.infoLabel.text()
    w.state.pretrained.part = "decoder"  # the decoder's self-attention chains: rollout over the target
    run = wait_shown(qtbot, w, lambda s: s.present_key[2] == "decoder").layers
    qtbot.waitUntil(
        lambda: view.result() is not None and view.result().weights is run.decoder_weights, timeout=TIMEOUT_MS
    )
    assert list(view.result().tokens) == run.target_tokens


def test_head_statistics_follow_the_part(qtbot, text_window, folders):
    w = text_window
    open_model(qtbot, w, folders["t5"])
    w.state.target_text = TARGET
    w.state.pretrained.part = "decoder"
    run = wait_shown(qtbot, w, lambda s: s.present_key[2] == "decoder" and len(s.layers.target_tokens) > 1).layers
    with qtbot.waitSignal(w.tab_presenter("head-stats").shownStats, timeout=TIMEOUT_MS):
        w.state.view.tab = "head-stats"
    stats = w.tab_widget("head-stats")._stats
    assert len(stats) == run.decoder_weights.shape[0] * run.decoder_weights.shape[1]
    assert stats[0].rows == len(run.target_tokens)


def _fake_cache(root, llama):
    """A hub cache with one supported model, one that needs remote code, one without a snapshot."""
    snap = root / "models--org--tiny-llama" / "snapshots" / "abc123"
    shutil.copytree(llama, snap)
    (root / "models--org--tiny-llama" / "refs").mkdir()
    (root / "models--org--tiny-llama" / "refs" / "main").write_text("abc123")
    remote = root / "models--org--custom" / "snapshots" / "def456"
    shutil.copytree(llama, remote)
    cfg = json.loads((remote / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (remote / "config.json").write_text(json.dumps(cfg))
    (root / "models--org--empty").mkdir()
    return snap, remote


def test_local_models_lists_the_hub_cache_and_opens_one(qtbot, text_window, folders, tmp_path, monkeypatch):
    w = text_window
    snap, _remote = _fake_cache(tmp_path, folders["llama"])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    dialog = w.pretrained.show_local_models()
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 3, timeout=TIMEOUT_MS)
    rows = {dialog.table.item(r, 0).text(): [dialog.table.item(r, c).text() for c in range(6)] for r in range(3)}
    assert rows["org/tiny-llama"][1] == "LLaMA decoder" and rows["org/tiny-llama"][2] == "LlamaForCausalLM"
    assert rows["org/tiny-llama"][5] == "yes" and rows["org/tiny-llama"][3].endswith("M")
    assert (
        rows["org/custom"][5].startswith("no: org/custom needs its own Python code")
        and "trust_remote_code" in rows["org/custom"][5]
    )  # the repository, not its snapshot's hash
    assert "no snapshot" in rows["org/empty"][5]
    assert str(tmp_path) in dialog.where.text()
    custom = next(r for r in range(3) if dialog.table.item(r, 0).text() == "org/custom")
    assert not dialog.open_row(custom)
    assert "needs its own Python code" in dialog.message.text() and w.state.mode == TOY
    llama = next(r for r in range(3) if dialog.table.item(r, 0).text() == "org/tiny-llama")
    dialog.table.selectRow(llama)
    assert dialog.openButton.isEnabled()
    dialog.openButton.click()
    assert w.state.mode.path == str(snap.resolve()) and not dialog.isVisible()
    label = w.parametersPanel.modeCombo.currentText()
    assert label == "Pretrained: org/tiny-llama"  # the repo id, not the snapshot's hash
    wait_shown(qtbot, w, lambda s: s.mode.path == str(snap.resolve()))


def test_a_remote_code_folder_is_refused_with_a_message(qtbot, text_window, folders, tmp_path):
    w = text_window
    folder = tmp_path / "custom"
    shutil.copytree(folders["llama"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (folder / "config.json").write_text(json.dumps(cfg))
    choices = w.modes.choices()
    assert not w.pretrained.open_folder(folder)
    assert w.state.mode == TOY and w.modes.choices() == choices  # nothing changed
    assert w.status.error and "modeling_custom.py" in w.status_text()
    assert "never runs code shipped with a model" in w.statusLabel.text()


def test_loading_never_opens_a_socket(qtbot, text_window, folders, monkeypatch):
    w = text_window
    attempts = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(None, address))
    clear_cache(folders["mistral"])  # a real load: transformers, the tokenizer, the weights
    said = []
    w.status.events.connect(lambda *_a: said.append(w.status.message))
    shown = open_model(qtbot, w, folders["mistral"])
    assert shown.layers.family == "decoder" and attempts == []
    # every loading stage reached the status line, however quickly the previous one ended
    for stage in (
        "checking the folder",
        "importing transformers",
        "reading the tokenizer",
        "weights",
        "every attention layer runs through attndesk",
    ):
        assert any(stage in line for line in said), (stage, said)


def test_step_through_of_a_rope_decoder_shows_q_and_k_before_and_after_rotary(qtbot, text_window, folders):
    w = text_window
    model = load_pretrained(folders["llama"])
    open_model(qtbot, w, folders["llama"])
    w.pretrained.controls.layer_spin.setValue(1)
    wait_shown(qtbot, w, lambda s: s.layer == 1)
    view = w.tab_widget("step-through")
    view.set_head(3)
    with qtbot.waitSignal(w.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        w.state.view.tab = "step-through"
    reference = run_pretrained(model, TEXT, layer=1).intermediates["self"]
    np.testing.assert_allclose(view.stage_matrix("weights"), reference.weights[3], atol=1e-6)
    np.testing.assert_allclose(view.stage_matrix("weights"), run_pretrained(model, TEXT).weights[1, 3], atol=1e-6)
    np.testing.assert_array_equal(view.stage_matrix("k_raw"), reference.k_raw[1])  # head 3 reads K/V head 1
    q_raw, q = view.stage_matrix("q_raw"), view.stage_matrix("q")
    np.testing.assert_allclose(q[0], q_raw[0], atol=1e-6)  # position 0 is not rotated
    assert not np.allclose(q[1:], q_raw[1:], atol=1e-3)  # the others are
    assert view.plots["q_raw"].isVisibleTo(view) and "RoPE" in view.plots["q"].title.text()
    assert view.infoLabel.text().startswith("L1 H3 of 4 heads")  # the layer's head, named as every tab names it
    cell = view.hover_weight(4, 2)
    assert abs(cell.weight - cell.stored) < 1e-5 and abs(cell.scale - 8**-0.5) < 1e-6
    assert view.hover_weight(2, 4).masked  # causal: a later key


def test_step_through_of_cross_attention_explains_t5s_bias(qtbot, text_window, folders):
    w = text_window
    open_model(qtbot, w, folders["t5"])
    w.state.update({"target_text": TARGET})
    w.state.pretrained.part = "cross"
    wait_shown(qtbot, w, lambda s: s.present_key[2] == "cross" and len(s.layers.target_tokens) > 1)
    view = w.tab_widget("step-through")
    with qtbot.waitSignal(w.tab_presenter("step-through").shownResult, timeout=TIMEOUT_MS):
        w.state.view.tab = "step-through"
    reference = run_pretrained(load_pretrained(folders["t5"]), TEXT, target=TARGET)
    np.testing.assert_allclose(view.stage_matrix("weights"), reference.cross_weights[0, view.head()], atol=1e-6)
    assert view.result().tokens == reference.target_tokens and view.result().keys == reference.tokens
    assert not view.plots["q_raw"].isVisibleTo(view)  # T5 has no rotary embedding
    cell = view.hover_weight(1, 2)
    assert abs(cell.weight - cell.stored) < 1e-5 and cell.scale == pytest.approx(1.0)  # T5 does not scale


def test_grid_and_export_follow_the_part_and_ablation_stays_on_the_encoder(qtbot, text_window, folders, tmp_path):
    w = text_window
    open_model(qtbot, w, folders["t5"])
    w.state.target_text = TARGET
    w.state.pretrained.part = "cross"
    run = wait_shown(qtbot, w, lambda s: s.present_key[2] == "cross" and len(s.layers.target_tokens) > 1).layers
    w.state.view.tab = GRID_TAB
    qtbot.waitUntil(
        lambda: (p := w.pretrained.grid.painting()) is not None and p.weights.shape == run.cross_weights.shape,
        timeout=TIMEOUT_MS,
    )
    np.testing.assert_array_equal(w.pretrained.grid.painting().weights, run.cross_weights)
    assert "cross-attention" in w.pretrained.grid.painting().caption
    saved = np.load(w.pretrained.export_all(tmp_path / "cross.npy"))
    np.testing.assert_array_equal(saved, run.cross_weights)  # [layers, heads, T, L]
    assert w.pretrained.default_name("npy").endswith("_cross.npy")
    w.pretrained.grid.toggle_ablation(0, 1)  # Ctrl+click in the cross grid: refused, said, nothing ablated
    assert w.state.pretrained.ablate == () and w.pretrained.grid.ablated() == []
    assert w.status.error and "encoder's self-attention" in w.status_text()
    w.state.pretrained.part = "self"
    qtbot.waitUntil(lambda: w.pretrained.grid.painting().weights.shape == run.weights.shape, timeout=TIMEOUT_MS)
    w.pretrained.grid.toggle_ablation(0, 1)
    assert w.state.pretrained.ablate == ((0, 1),)
    wait_shown(qtbot, w, lambda s: s.layers.ablate == ((0, 1),))


def test_session_keeps_the_target_text_and_part(qtbot, text_window, folders, tmp_path):
    w = text_window
    open_model(qtbot, w, folders["t5"])
    w.state.target_text = TARGET
    w.state.pretrained.part = "decoder"
    wait_shown(qtbot, w, lambda s: s.present_key[2] == "decoder" and len(s.layers.target_tokens) > 1)
    data = json.loads(w.save_session_to(tmp_path / "t5.json").read_text())
    assert data["target_text"] == TARGET and data["pretrained"]["part"] == "decoder"
    other = MainWindow(restore=False)
    try:
        other.load_session_from(tmp_path / "t5.json")
        shown = wait_shown(qtbot, other, lambda s: s.present_key[2] == "decoder" and len(s.layers.target_tokens) > 1)
        assert other.pretrained.controls.target_edit.text() == TARGET
        assert other.pretrained.controls.part_combo.currentData() == "decoder"
        np.testing.assert_allclose(
            np.stack(other.heatmapPanel.displayed_arrays()), shown.layers.decoder_weights[0], atol=1e-6
        )
    finally:
        qtbot.waitUntil(lambda: not other.compute.is_busy(), timeout=TIMEOUT_MS)
        dispose(other)
