"""The tab registry (app/tabs/registry.py) is what the window shows: every tab of ``TABS`` in
order with its title and tooltip, only in the modes and model kinds it serves, the dock's tabs
after "Timing"; a tab whose spec says it is unavailable shows the reason instead of its view."""

from __future__ import annotations

import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build
from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QFileDialog, QLabel, QStackedWidget, QToolButton

from attndesk.app.tabs import registry
from attndesk.app.tabs.registry import DOCK_TABS, EVERY_MODE, TABS, EmptyState, TabSpec
from attndesk.app.window.main_window import MainWindow
from attndesk.session.state import PACKAGED, TOY
from tests.conftest import TIMEOUT_MS

TOY_TABS = [
    "Heatmaps",
    "Step-through",
    "Positions",
    "Head stats",
    "Compare",
    "Rollout",
    "Online softmax",
    "Corpus",
    "Train",
    "KV cache",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    return {name: build(name, root / name) for name in ("bert", "llama")}


@pytest.fixture
def window(qtbot):
    w = MainWindow(restore=False)
    yield w
    qtbot.waitUntil(lambda: not w.compute.is_busy(), timeout=TIMEOUT_MS)  # a model load ends before the window goes
    dispose(w)


def expected(mode_kind: str, model_kind: str | None) -> list[tuple[str, str]]:
    return [(t.id, t.title) for t in registry.TABS if t.serves(mode_kind, model_kind)]


def test_the_registry_declares_each_tab_once_and_every_page_is_a_registry_tab(window):
    ids = [t.id for t in TABS + DOCK_TABS]
    assert len(ids) == len(set(ids)) and all(t.title and t.tooltip for t in TABS + DOCK_TABS)
    tabs = window.viewTabs
    assert [tabs.widget(i) for i in range(tabs.count())] == [window.tab_page(t.id) for t in TABS]
    assert [tabs.tabText(i) for i in range(tabs.count())] == [t.title for t in TABS]
    assert [tabs.tabToolTip(i) for i in range(tabs.count())] == [t.tooltip for t in TABS]
    dock = window.timingTabs
    assert [dock.tabText(i) for i in range(dock.count())] == ["Timing"] + [t.title for t in DOCK_TABS]
    assert [dock.widget(i) for i in range(1, dock.count())] == [window.tab_widget(t.id) for t in DOCK_TABS]
    for tab in TABS + DOCK_TABS:  # each presenter is bound to its own view
        if tab.presenter is not None:
            presenter = window.tab_presenter(tab.id)
            assert getattr(presenter, "view", window.tab_widget(tab.id)) is window.tab_widget(tab.id), tab.id
    assert window.heatmapPanel is window.tab_widget("heatmaps")


def test_the_window_shows_exactly_the_registrys_tabs_per_mode(qtbot, window, folders):
    assert window.shown_tabs() == expected("toy", None)
    assert [title for _id, title in window.shown_tabs()] == [*TOY_TABS, "Circuit"]  # on the trained presets
    assert window.pretrained.open_folder(folders["bert"])
    assert window.shown_tabs() == expected("pretrained", "encoder")
    assert [title for _id, title in window.shown_tabs()] == [t for t in TOY_TABS if t != "KV cache"] + [
        "All layers",
        "Generate",
        "Patching",
        "Attribution",
        "Logit lens",
    ]  # no Circuit: an encoder has no logits to trace
    assert window.pretrained.open_folder(folders["llama"])
    assert window.shown_tabs() == expected("pretrained", "decoder")
    assert window.shown_tabs()[-1] == ("circuit", "Circuit")
    window.state.view.tab = "all-layers"
    assert window.viewTabs.currentWidget() is window.tab_page("all-layers")
    window.state.mode = TOY  # a tab the mode does not serve closes: the heatmaps come back
    assert window.shown_tabs() == expected("toy", None) and window.state.view.tab == "heatmaps"
    assert window.viewTabs.currentWidget() is window.heatmapPanel


def test_a_tab_serves_its_model_kinds_and_says_why_it_is_off(qtbot, folders, monkeypatch):
    made = []

    class Presenter(QObject):
        def __init__(self, ui, view):
            super().__init__(view)
            self.view, self.state = view, ui.state
            made.append(self)

    reason = "open a decoder: this tab reads a causal model"
    off_state = EmptyState(reason)
    extra = TabSpec(
        "extra-test",
        "Extra",
        "a decoder-only test tab",
        lambda: QLabel("extra content"),
        Presenter,
        modes=EVERY_MODE,
        model_kinds=frozenset({"decoder"}),
        unavailable=lambda state: None if state.mode.kind == "pretrained" else off_state,
    )
    monkeypatch.setattr(registry, "TABS", TABS + (extra,))
    w = MainWindow(restore=False)
    try:
        view, page = w.tab_widget("extra-test"), w.tab_page("extra-test")
        assert made and made[0].view is view and w.tab_presenter("extra-test") is made[0]
        assert isinstance(page, QStackedWidget) and w.shown_tabs()[-1] == ("extra-test", "Extra")
        off = page.currentWidget()  # the toy mode: the empty state, not the view
        assert off is w.empty_state("extra-test") and off.sentence() == reason and off.action() == ""
        assert w.pretrained.open_folder(folders["bert"])  # an encoder: not served, hidden
        assert ("extra-test", "Extra") not in w.shown_tabs()
        assert w.pretrained.open_folder(folders["llama"])  # a decoder: shown, with its view
        assert w.shown_tabs() == expected("pretrained", "decoder") and page.currentWidget() is view
        w.state.mode = TOY
        assert page.currentWidget() is off and off.sentence() == reason
        qtbot.waitUntil(lambda: not w.compute.is_busy(), timeout=TIMEOUT_MS)
    finally:
        dispose(w)


def test_a_tab_that_does_not_apply_shows_its_sentence_and_the_action_that_makes_it_apply(
    qtbot, window, folders, monkeypatch
):
    w = window
    w.show()
    rollout = w.empty_state("rollout")  # the toy model: one layer, nothing to trace
    w.state.view.tab = "rollout"
    assert w.tab_page("rollout").currentWidget() is rollout
    qtbot.waitUntil(rollout.button.isVisible, timeout=TIMEOUT_MS)
    assert "single attention layer" in rollout.sentence()
    label = rollout.label  # the whole sentence is on screen: wrapped, never cut to one line
    assert label.width() <= w.viewTabs.width() and label.height() >= label.heightForWidth(label.width())
    assert w.empty_state("heatmaps") is None  # a tab that always applies has no empty state

    # an encoder: the next-token tabs' button opens a model folder (the dialog answers the decoder)
    assert w.pretrained.open_folder(folders["bert"])
    w.state.view.tab = "patching"
    patching = w.empty_state("patching")
    assert w.tab_page("patching").currentWidget() is patching and "encoder-only" in patching.sentence()
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folders["llama"]))
    qtbot.mouseClick(patching.button, Qt.MouseButton.LeftButton)
    assert w.state.mode.path == str(folders["llama"])
    assert w.tab_page("patching").currentIndex() == 0  # its view (in its scroll area)

    # a real model: the online-softmax walk's button goes back to the toy model
    w.state.view.tab = "online-softmax"
    walk = w.empty_state("online-softmax")
    assert w.tab_page("online-softmax").currentWidget() is walk and walk.action() == "Switch to the toy model"
    assert not w.tab_widget("online-softmax").isVisible()  # no greyed form behind the sentence
    qtbot.mouseClick(walk.button, Qt.MouseButton.LeftButton)
    assert w.state.mode == TOY and w.tab_page("online-softmax").currentWidget() is w.tab_widget("online-softmax")

    # and the rollout's button opens the packaged model
    w.state.view.tab = "rollout"
    qtbot.mouseClick(rollout.button, Qt.MouseButton.LeftButton)
    assert w.state.mode == PACKAGED and w.tab_page("rollout").currentWidget() is w.tab_widget("rollout")


def test_every_tab_title_is_whole_on_screen_at_1280_wide(qtbot, window, folders):
    w = window
    w.resize(1280, 800)
    w.show()
    assert w.pretrained.open_folder(folders["llama"])  # a decoder: every tab but the vision models' Image tab
    bar = w.viewTabs.tabBar()
    qtbot.waitUntil(lambda: bar.count() > 0 and bar.isVisible(), timeout=TIMEOUT_MS)
    shown = [i for i in range(bar.count()) if bar.isTabVisible(i)]
    assert len(shown) == len([t for t in TABS if t.serves("pretrained", "decoder")]) == len(TABS) - 1
    for i in shown:  # whole: no title elided, none beyond the bar's right edge
        assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), bar.tabText(i)
        assert bar.tabRect(i).right() <= bar.width(), bar.tabText(i)
    assert not any(b.isVisible() for b in bar.findChildren(QToolButton))  # no scroll arrows
    # the timing dock leaves the tabs most of the height, its bars one line each for a six-layer model's stages
    assert w.timingDock.height() <= 0.2 * w.height() and w.viewTabs.height() >= 0.7 * w.height()
    bars = w.timingPanel.bars
    assert bars.height() / 8 >= QFontMetricsF(bars.font()).height()


TEXT_TABS = {  # tab -> the feature its empty state names, for a vision model
    "step-through": "the step-through",
    "generate": "generation",
    "patching": "activation patching",
    "attribution": "an attribution",
    "logit-lens": "the logit lens",
}


def test_a_vision_model_turns_every_text_tab_into_one_sentence_and_a_button(qtbot, window, vision, folders):
    w = window
    w.show()
    _model, _eager, folder = vision("vit")
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        assert w.pretrained.open_folder(folder)
    shown = dict(w.shown_tabs())
    assert set(TEXT_TABS) <= set(shown) and "image" in shown
    for tab, what in TEXT_TABS.items():
        w.state.view.tab = tab
        off = w.empty_state(tab)
        assert off is not None and w.tab_page(tab).currentWidget() is off, tab
        assert not w.tab_widget(tab).isVisible(), tab  # no form offered behind the sentence
        sentence = off.sentence()
        assert sentence.startswith(f"{folder.name} is an image model and {what}") and "Image tab" in sentence, sentence
        assert "\n" not in sentence and "Error" not in sentence and off.button.isVisible(), tab
    assert w.empty_state("generate").action() == "Open a model folder…"
    for tab in ("heatmaps", "image", "head-stats", "compare", "rollout", "corpus"):  # what does apply to an image
        w.state.view.tab = tab
        assert w.empty_state(tab) is None or w.tab_page(tab).currentIndex() == 0, tab
    # the step-through's button opens a text model, and its view comes back
    w.state.view.tab = "step-through"
    qtbot.mouseClick(w.empty_state("step-through").button, Qt.MouseButton.LeftButton)
    assert w.state.mode == PACKAGED and w.tab_page("step-through").currentWidget() is w.tab_widget("step-through")
    assert w.empty_state("corpus") is None  # the corpus pass applies to text and image models alike
