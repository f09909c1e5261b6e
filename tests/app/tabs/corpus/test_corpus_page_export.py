"""The Corpus tab's File > Export corpus page: disabled until a store is open, then the store's page
written by the "corpus-query" side job, its grid coloured by the tab's metric."""

from __future__ import annotations

from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build
from PySide6.QtWidgets import QFileDialog

from attndesk.app.jobs.channels import CORPUS_QUERY
from attndesk.app.tabs.corpus.presenter import CORPUS_TAB
from attndesk.app.window.main_window import MainWindow
from attndesk.render.page import read_page_data
from tests.conftest import TIMEOUT_MS


def test_the_file_menu_exports_the_open_stores_page(qtbot, tmp_path, monkeypatch):
    data = tmp_path / "texts.txt"
    data.write_text("the cat sat on the mat\none two three one two three\nhello world\n", encoding="utf-8")
    w = MainWindow(restore=False)
    try:
        w.show()
        assert w.pretrained.open_folder(build("bert", tmp_path / "bert"))
        w.state.view.tab = CORPUS_TAB
        tab, view = w.tab_presenter(CORPUS_TAB), w.tab_widget(CORPUS_TAB)
        action = next(a for a in w.menus.actions("file") if a.objectName() == "exportCorpusPageAction")
        assert not action.isEnabled()
        view.sourceEdit.setText(str(data))
        view.storeEdit.setText(str(tmp_path / "store"))
        view.tokensSpin.setValue(16)
        tab.start()  # the pass, then its store opens
        qtbot.waitUntil(lambda: tab.store is not None and action.isEnabled(), timeout=TIMEOUT_MS)
        heads = tab.store.heads
        view.metricCombo.setCurrentText("first")
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(tmp_path / "page"), "")))
        action.trigger()
        page = tmp_path / "page.html"
        qtbot.waitUntil(lambda: page.exists() and not tab.compute.side.is_busy(CORPUS_QUERY), timeout=TIMEOUT_MS)
        doc = read_page_data(page)
        assert doc["corpus"]["metric"] == "first" and [e["text_id"] for e in doc["layers"]] == [0, 0]
        grid = doc["corpus"]["values"]["first"]
        assert [grid[r["layer"]][r["head"]] for r in heads.to_dict("records")] == [float(v) for v in heads["first"]]
        assert view.errorLabel.text() == ""
    finally:
        qtbot.waitUntil(lambda: not w.compute.any_job_running(), timeout=TIMEOUT_MS)
        dispose(w)


def test_the_page_job_leaves_out_what_does_not_fit_and_fails_in_one_line(monkeypatch, tmp_path):
    """Worker side: a text whose attention would not fit is left out, saying so; a path that cannot
    be written is a ConfigError (one line in the tab, no traceback on stderr)."""
    import pytest

    from attndesk.app.tabs.corpus import presenter as corpus_tab
    from attndesk.errors import ConfigError
    from attndesk.render.export import ExportError
    from attndesk.render.page import PageTooLarge

    asked: list[list[int]] = []

    def data(store, texts, metric):
        asked.append(list(texts))
        if texts:
            raise PageTooLarge("the attention of text(s) 0 as float16 needs about 50.7 MB")
        return {"metric": metric}

    monkeypatch.setattr(corpus_tab, "corpus_page_data", data)
    monkeypatch.setattr(corpus_tab, "write_document", lambda doc, path: tmp_path / "p.html")
    line = corpus_tab.write_store_page(None, str(tmp_path / "p.html"), [0], "entropy")
    assert asked == [[0], []]
    assert line.startswith(f"exported {tmp_path / 'p.html'} (without the attention of text(s) 0: the attention")

    def unwritable(doc, path):
        raise ExportError(f"cannot write {path}: the folder does not exist")

    monkeypatch.setattr(corpus_tab, "write_document", unwritable)
    with pytest.raises(ConfigError, match="cannot write"):
        corpus_tab.write_store_page(None, str(tmp_path / "no" / "p.html"), [], "entropy")
