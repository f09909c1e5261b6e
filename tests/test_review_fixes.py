"""Regressions found in the final review, each through the real window (offscreen)."""

from __future__ import annotations

import gc
import random

import pytest
from PySide6.QtCore import QCoreApplication, QEvent

from app_helpers import fresh_settings, shown_window  # noqa: F401  (autouse fixture)

TIMEOUT_MS = 30000
MiB = 2**20
WORDS = "the cat sat on a mat because it was tired and then the dog ran far away".split()


@pytest.fixture
def window(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    yield w
    w.close()
    w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()


def test_f5_starts_a_held_long_run(qtbot, window):
    # QAction.triggered carries checked=False: it must not reach compute_now as explicit=False
    rng = random.Random(0)
    window.state.set_config(memory_budget=16 * MiB)
    window.tokensPanel.tokenInput.setPlainText(" ".join(rng.choice(WORDS) for _ in range(200_000)))
    qtbot.waitUntil(lambda: window.longMode.held_plan() is not None, timeout=TIMEOUT_MS)
    assert not window.compute.is_busy()
    with qtbot.waitSignal(window.compute.progressed, timeout=TIMEOUT_MS, check_params_cb=lambda f, m: "block" in m):
        window.recomputeAction.trigger()
    assert window.longMode.held_plan() is None
    window.compute.cancel()
    qtbot.waitUntil(lambda: not window.compute.runner.is_busy(), timeout=TIMEOUT_MS)


def test_pretrained_statistics_caption_counts_the_tokens_they_cover(qtbot, window):
    # statistics are over every token of the run ([CLS]/[SEP] included) even when the heatmaps hide them
    from attndesk.app.state import PACKAGED

    w = window
    with qtbot.waitSignal(w.resultDisplayed, timeout=60000, check_params_cb=lambda r: r.layers is not None):
        w.state.update({"text": "The cat sat on the mat.", "cross": False})
        w.parametersPanel.modeCombo.setCurrentIndex(w.parametersPanel.mode_index(PACKAGED))
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.pretrained.controls.hide_special_check.setChecked(True)
    run = w.pretrained.run()
    n = len(run.tokens)
    assert w.displayed_result().length == n - 2  # [CLS] and [SEP] hidden
    tabs = w.teaching
    with qtbot.waitSignal(tabs.headStats.shownStats, timeout=60000):
        w.viewTabs.setCurrentWidget(tabs.headStatsView)
    assert f"{n} queries × {n} keys" in tabs.headStatsView.infoLabel.text()


def test_a_finished_runs_plan_notice_has_no_time_estimate():
    # the core's FLOP-only estimate said "under a second" next to "done in 9.6 s" for a 13k-token run
    from attndesk.core import AttentionConfig, run_attention
    from attndesk.core.pipeline import plan_text

    config = AttentionConfig(memory_budget=3 * 2**20)
    text = " ".join(["the cat sat on the mat and the dog barked at it"] * 25)
    plan = plan_text(config, text)
    assert plan.kind == "pyramid" and plan.seconds is not None
    assert "(under a second)" in plan.describe()  # before a run the estimate is part of the line
    result = run_attention(config, text)
    assert result.notices[0] == plan.describe(eta=False)
    assert "under a second" not in result.notices[0] and "(about" not in result.notices[0]


def test_a_heatmap_panel_deleted_mid_build_stops_building(qtbot):
    # the incremental build's timer must die with the panel, not add cells to a deleted layout
    from attndesk.app.sources.long_source import source_for_map
    from attndesk.app.panels.heatmaps import HeatmapPanel
    from attndesk.core import AttentionConfig, run_attention

    result = run_attention(AttentionConfig(embed_dim=64, num_heads=32, mask="none"), "the cat sat on the mat")
    panel = HeatmapPanel()
    panel.resize(1200, 800)
    panel.show()
    panel.set_source(source_for_map(result.attention_map()))
    qtbot.wait(5)  # the first slice or two
    assert panel.is_building()
    panel.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    qtbot.wait(300)  # pytest-qt fails the test on any exception raised in the event loop meanwhile


def test_step_through_hides_its_strip_without_intermediates(qtbot):
    # e.g. pretrained mode: empty axes titled with the toy run's shapes and d_k were confusing
    from attndesk.app.views.stepthrough import StepThroughView
    from attndesk.core import AttentionConfig, run_attention

    view = StepThroughView()
    qtbot.addWidget(view)
    view.show()
    config = AttentionConfig(embed_dim=16, num_heads=2)
    view.set_result(run_attention(config, "the cat sat", keep_intermediates=True))
    assert view.scroll.isVisible() and view.headSpin.isEnabled()
    view.set_result(run_attention(config, "the cat sat"))  # no intermediates
    assert not view.scroll.isVisible() and not view.arithmeticLabel.isVisible()
    assert not view.headSpin.isEnabled()
    assert "intermediates" in view.infoLabel.text()
    view.set_result(run_attention(config, "the cat sat", keep_intermediates=True))
    assert view.scroll.isVisible() and view.arithmeticLabel.isVisible()


def test_render_out_that_is_a_file_says_so(tmp_path, capsys):
    from attndesk.cli import main

    target = tmp_path / "notes.txt"
    target.write_text("keep me", encoding="utf-8")
    assert main(["render", "--text", "the cat sat", "--out", str(target)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file, not a folder" in err[0] and "Traceback" not in err[0]
    assert target.read_text(encoding="utf-8") == "keep me"


def test_a_pretrained_sessions_head_view_survives_the_toy_head_count():
    # the config of a pretrained session holds the toy settings (4 heads): head 9 of the model's 12 was lost
    import json

    from attndesk.app.session import parse_session, session_json
    from attndesk.app.state import PACKAGED, AppState

    saved = AppState(text="the cat", mode=PACKAGED)
    saved.view.target = 9
    saved.pretrained.layer = 3
    assert parse_session(json.dumps(session_json(saved))).state.view.target == 9
    toy = AppState(text="the cat")  # 4 heads: no head 9
    toy.view.target = 9
    assert parse_session(json.dumps(session_json(toy))).state.view.target == "all"
    old = {"format": "attndesk-session", "version": 1, "text": "the cat", "config": {}, "view": 9,
           "mode": "Pretrained: all-MiniLM-L6-v2",
           "pretrained": {"folder": None, "layer": 3, "hide_special": False, "all_layers": False, "ablate": []}}
    assert parse_session(json.dumps(old)).state.view.target == 9
