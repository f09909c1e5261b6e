"""The KV cache tab in the real window: Run draws each K/V head's kept keys over the decode steps
and the compressed run's weights with the evicted keys hatched, equal to an independent
``simulate`` of the same policy; the policy's options come from its declarations; Sweep draws the
policy's and the oracle's curves; Cancel stops a sweep; bad input is one line."""

from __future__ import annotations

import numpy as np
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt

from attndesk.app.jobs.channels import KVLAB
from attndesk.kvcache import POLICIES, simulate
from attndesk.kvcache.model import kv_model
from attndesk.kvcache.sweep import default_budgets, sweep
from attndesk.train.presets import load_preset
from tests.conftest import TIMEOUT_MS

TAB = "kvcache"


def _open(w):
    w.state.view.tab = TAB
    return w.tab_widget(TAB)


def _pick_policy(view, name: str) -> None:
    view.policyCombo.setCurrentIndex(view.policyCombo.findData(name))


def test_run_draws_what_the_policy_keeps(qtbot, window):
    view = _open(window)
    assert view.modelCombo.currentData() == ("preset", "needle")
    _pick_policy(view, "snapkv")
    fields = [spec.name for spec in POLICIES["snapkv"].option_fields()]
    assert list(view.options) == fields and "window" in fields  # the form follows the declarations
    view.options["window"].setValue(6)
    view.budgetSpin.setValue(6)
    view.decodeSpin.setValue(3)
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.result is not None and not view.bar.is_busy(), timeout=TIMEOUT_MS)
    assert view.layerSpin.maximum() == 2 and view.headSpin.maximum() == 4
    view.layerSpin.setValue(2)  # the pictures of layer 2, no recomputation
    # the reference: the same run outside the window
    run = load_preset("needle")
    probe = run.task.probe().ids[0].tolist()
    ref = simulate(run, probe, "snapkv", 6, prefill=len(probe) - 3, window=6)
    lab = view.result
    np.testing.assert_array_equal(lab.run.keep, ref.keep)
    np.testing.assert_array_equal(lab.run.logits, ref.logits)
    weights = np.stack(kv_model(run).forward(probe, ref.keep).weights)
    layer, steps = 1, np.arange(len(probe) - 3, len(probe))
    raster = view.rasterPlots[0]
    np.testing.assert_array_equal(raster.masked, ~ref.keep[layer, 0][steps])
    assert raster.masked.sum(axis=1).min() >= raster.matrix.shape[1] - 6  # at most the budget kept per step
    # the window draws simulate's passes, the reference is one pass of every row: float32 kernels of
    # other shapes can round the weights otherwise (docs/kvcache-lab.md)
    drawn = view.heatmap.matrix[~view.heatmap.masked]
    np.testing.assert_allclose(drawn, weights[layer, 0][ref.keep[layer, 0]], rtol=0, atol=1e-5)
    assert "retrieval score" in view.scoresLabel.text() and "first-token weight" in view.scoresLabel.text()
    assert [c.k for c in lab.ablation] == [1, 2, 3, 4] and "top-k retrieval heads" in view.scoresLabel.text()
    assert "budget 6" in view.summaryLabel.text()
    view.headSpin.setValue(3)  # another head: its own picture, no recomputation
    drawn = view.heatmap.matrix[~view.heatmap.masked]
    np.testing.assert_allclose(drawn, weights[layer, 2][ref.keep[layer, 2]], rtol=0, atol=1e-5)


def test_sweep_draws_the_policy_and_the_oracle(qtbot, window):
    view = _open(window)
    _pick_policy(view, "streaming")
    view.decodeSpin.setValue(2)
    qtbot.mouseClick(view.sweepButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(view.curves) and not view.bar.is_busy(), timeout=TIMEOUT_MS)
    assert list(view.curves) == ["streaming", "oracle"]
    budgets, kl, accuracy = view.curves["oracle"]
    run = load_preset("needle")
    probe = run.task.probe()
    ids = probe.ids[0].tolist()
    answers = {int(r): ids[int(r) + 1] for r in probe.mask[0].nonzero().flatten() if r >= len(ids) - 2}
    ref = sweep(run, ids, ["oracle"], default_budgets(len(ids) - 2), decode=2, answers=answers)
    assert budgets.tolist() == [r["budget"] for r in ref] and len(budgets) == 10
    np.testing.assert_array_equal(kl, [r["kl_mean"] for r in ref])
    np.testing.assert_array_equal(accuracy, [r["accuracy"] for r in ref])
    assert len(view.klHolder.plot.getPlotItem().listDataItems()) == 2
    assert "swept 20 runs" in view.bar.message.text()


def test_bad_input_is_one_line_and_cancel_stops(qtbot, window):
    view = _open(window)
    view.textEdit.setText("1 2 x")
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not view.bar.is_busy(), timeout=TIMEOUT_MS)
    assert "whole numbers" in view.bar.message.text() and view.result is None
    view.textEdit.setText("")
    qtbot.mouseClick(view.sweepButton, Qt.MouseButton.LeftButton)
    assert view.bar.is_busy()
    qtbot.mouseClick(view.bar.cancelButton, Qt.MouseButton.LeftButton)
    assert not view.bar.is_busy() and view.bar.message.text() == "cancelled"
    qtbot.waitUntil(lambda: not window.compute.side.is_busy(KVLAB), timeout=TIMEOUT_MS)
    assert not view.curves
    qtbot.mouseClick(view.bar.runButton, Qt.MouseButton.LeftButton)
    window.compute.cancelRequested.emit()  # Esc
    assert not view.bar.is_busy() and view.bar.message.text() == "cancelled"
    qtbot.waitUntil(lambda: not window.compute.side.is_busy(KVLAB), timeout=TIMEOUT_MS)


def test_the_sweeps_curves_are_the_cores_with_agreement_where_there_is_no_answer(qtbot):
    from attndesk.app.tabs.kvlab.view import KVLabView
    from attndesk.kvcache.sweep import curves

    nan = float("nan")
    table = [
        {"policy": "h2o", "budget": 8, "kl_mean": 0.1, "agree": 0.9, "accuracy": 0.5},
        {"policy": "h2o", "budget": 4, "kl_mean": 0.3, "agree": 0.7, "accuracy": 0.25},
        {"policy": "oracle", "budget": 8, "kl_mean": 0.05, "agree": 0.95, "accuracy": nan},
        {"policy": "oracle", "budget": 4, "kl_mean": 0.2, "agree": 0.8, "accuracy": nan},
    ]
    view = KVLabView()
    qtbot.addWidget(view)
    view.show_sweep(table)
    assert list(view.curves) == ["h2o", "oracle"]
    for name, fallback in (("h2o", "accuracy"), ("oracle", "agree")):
        budgets, kl, accuracy = view.curves[name]
        assert budgets.tolist() == [4.0, 8.0]
        np.testing.assert_array_equal(kl, curves(table, "kl_mean")[name][1])
        np.testing.assert_array_equal(accuracy, curves(table, fallback)[name][1])
    assert len(view.klHolder.plot.getPlotItem().listDataItems()) == 2


def test_a_corpus_sweep_store_opens_as_curves_with_bands(qtbot, window, tmp_path):
    import pyqtgraph as pg
    import torch

    from attndesk.kvcache.corpus_sweep import sweep_corpus

    run = load_preset("needle")
    batch = run.task.sample(3, torch.Generator().manual_seed(5))
    texts = [" ".join(map(str, r.tolist())) for r in batch.ids]
    store = sweep_corpus(texts, tmp_path / "s", trained="needle", policies=["streaming", "oracle"], budgets=[6, 12])
    view = _open(window)
    window.tab_presenter(TAB).open_store(str(tmp_path / "s"))
    qtbot.waitUntil(lambda: bool(view.curves) and not view.bar.is_busy(), timeout=TIMEOUT_MS)
    assert list(view.curves) == ["streaming", "oracle"] and "3 texts" in view.summaryLabel.text()
    for name in ("streaming", "oracle"):
        kl, accuracy = store.curves("kl_mean", "quartiles")[name], store.curves("accuracy", "quartiles")[name]
        budgets, mean_kl, mean_accuracy = view.curves[name]
        assert budgets.tolist() == [6.0, 12.0]
        np.testing.assert_array_equal(mean_kl, kl.mean)
        np.testing.assert_array_equal(mean_accuracy, accuracy.mean)
        _, (low, high), _ = view.bands[name]
        np.testing.assert_array_equal(low, kl.low)
        np.testing.assert_array_equal(high, kl.high)
    fills = [i for i in view.klHolder.plot.getPlotItem().items if isinstance(i, pg.FillBetweenItem)]
    assert len(fills) == 2
    store.close()
    window.tab_presenter(TAB).open_store(str(tmp_path))  # not a store: one line, the curves stay
    qtbot.waitUntil(lambda: not view.bar.is_busy(), timeout=TIMEOUT_MS)
    assert "not an attndesk KV-cache sweep store" in view.bar.message.text() and list(view.curves) == [
        "streaming",
        "oracle",
    ]


def test_every_policys_options_show_their_defaults_and_read_back(qtbot):
    """Each policy's option controls, built from its declarations, read back the declared defaults;
    an option whose None has a meaning (H2O's recent window: half the budget) shows that name."""
    from attndesk.app.tabs.kvlab.view import KVLabView, control_value

    view = KVLabView()
    qtbot.addWidget(view)
    for index, (name, policy) in enumerate(POLICIES.items()):
        view.policyCombo.setCurrentIndex(index)
        for spec in policy.option_fields():
            control = view.options[spec.name]
            assert control_value(control) == spec.default, (name, spec.name)
            if spec.default is None:
                assert spec.none and control.text() == spec.none, (name, spec.name)
    view.policyCombo.setCurrentIndex(list(POLICIES).index("h2o"))
    view.options["recent"].setValue(3)
    assert control_value(view.options["recent"]) == 3
