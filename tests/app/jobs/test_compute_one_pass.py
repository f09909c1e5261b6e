"""One parameter edit in the real window does each piece of work once: the config is checked
once, the text tokenized once, the memory checked once, each panel redrawn once and the heatmap
source built once (the request carries what it worked out to the job, the plan carries its
tokens and its memory check to the run)."""

from __future__ import annotations

from collections import Counter
from functools import wraps

import numpy as np
from app_helpers import fresh_settings  # noqa: F401  (autouse fixture)

from attndesk.app.sources import heatmap_source, long_source
from attndesk.runs import pipeline, plan
from attndesk.runs.config import AttentionConfig
from attndesk.runs.tokenizer import WordTokenizer
from tests.conftest import TIMEOUT_MS


def _count(monkeypatch, calls: Counter, owner, name: str, label: str | None = None) -> None:
    original = getattr(owner, name)

    @wraps(original)
    def counted(*args, **kwargs):
        calls[label or name] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


def _instrument(monkeypatch, w) -> Counter:
    calls: Counter = Counter()
    _count(monkeypatch, calls, AttentionConfig, "_check_fields", "validate")
    _count(monkeypatch, calls, WordTokenizer, "encode")
    # the run's memory check, wherever it is called from
    for module in (plan, pipeline):
        if hasattr(module, "check_memory"):
            _count(monkeypatch, calls, module, "check_memory")
    for cls in (heatmap_source.ExactSource, heatmap_source.BiasSource, long_source.PyramidHeatmapSource):
        _count(monkeypatch, calls, cls, "__init__", "heatmap source")
    _count(monkeypatch, calls, w.tokensPanel, "show_result", "tokens panel")
    _count(monkeypatch, calls, w.timingPanel, "show_result", "timing panel")
    _count(monkeypatch, calls, w.heatmapPanel, "set_source", "heatmap panel")
    _count(monkeypatch, calls, w.heatmapPanel, "_draw_all", "heatmap draw")
    w.tokensPanel.queryModel.modelReset.connect(lambda: calls.update(["token table reset"]))
    w.compute.progressed.connect(lambda *_a: calls.update(["progress report"]))
    return calls


def _edit(qtbot, w, spin_value) -> list:
    displayed: list = []
    w.resultDisplayed.connect(displayed.append)
    drawn = w.parametersPanel.refreshes
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        spin_value()
    qtbot.wait(300)  # anything late (a second presentation, a re-run) would land here
    w.resultDisplayed.disconnect(displayed.append)
    return [len(displayed), w.parametersPanel.refreshes - drawn]


def test_one_edit_validates_tokenizes_checks_memory_and_draws_each_panel_once(qtbot, monkeypatch, window):
    w = window
    calls = _instrument(monkeypatch, w)
    results, panel_draws = _edit(qtbot, w, lambda: w.parametersPanel.seedSpin.setValue(w.state.config.seed + 1))
    assert (results, panel_draws) == (1, 1)
    assert dict(calls) == {
        "validate": 1,
        "encode": 1,
        "check_memory": 1,
        "heatmap source": 1,
        "tokens panel": 1,
        "timing panel": 1,
        "heatmap panel": 1,
        "heatmap draw": 1,
    }
    # the tokens did not change: their table is not reset (a text edit resets it once, below), and
    # a run of a few milliseconds reports no stages to the GUI thread
    # and what is drawn is the new seed's run, the one the core computes for it
    shown = w.compute.shown()
    expected = pipeline.run_attention(w.state.config, w.state.text)
    np.testing.assert_allclose(shown.map.weights, expected.weights, rtol=1e-5, atol=1e-6)
    assert shown.toy.result.config.seed == w.state.config.seed
    calls.clear()
    _edit(qtbot, w, lambda: setattr(w.state, "text", "the dog ran"))
    assert calls["token table reset"] == 1 and calls["encode"] == 1 and calls["tokens panel"] == 1
    assert w.tokensPanel.queryModel.rowCount() == 3


def test_cross_attention_tokenizes_each_text_once(qtbot, monkeypatch, window):
    w = window
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.cross = True
    calls = _instrument(monkeypatch, w)
    _edit(qtbot, w, lambda: w.parametersPanel.seedSpin.setValue(w.state.config.seed + 1))
    assert calls["encode"] == 2 and calls["check_memory"] == 1 and calls["validate"] == 1
    shown = w.compute.shown()
    assert shown.keys is not None and shown.keys.tokens == WordTokenizer(w.state.config.vocab_size).split(
        w.state.key_text
    )


def test_only_a_long_or_memory_bounded_run_reports_its_stages():
    from attndesk.runs.plan import plan_run
    from attndesk.session.plans import reports_progress

    config = AttentionConfig(embed_dim=256, num_heads=8)
    assert not reports_progress(plan_run(config, 128))
    assert reports_progress(plan_run(config, 4096))  # ~0.7 s at the per-cell floor
    assert reports_progress(plan_run(config.replace(memory_budget=2**20), 128))  # blocked
