"""The random-action soak of the real window (tests/soak), and tests of the soak harness itself.

``test_soak_in_the_suite`` (``make test-perf``) and ``test_soak_short`` (marker ``soak``, ``make
soak-short``, the next seed) run the soak for 40 s in a child process and assert the reliability criteria: no exception, no GUI-thread stall of 100 ms of work
or more, no thread left after close, memory bounded and back near its baseline after a large
input, and a known input drawn exactly. The other tests check the harness: it finds the window's
controls by their Qt types, and a seed replays the same actions.
"""

from __future__ import annotations

import contextlib
import os

import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from attndesk.app.tabs.registry import TABS
from tests.conftest import TIMEOUT_MS
from tests.soak import checks
from tests.soak.controls import discover, menu_actions
from tests.soak.driver import Soak, SoakOptions
from tests.soak.report import STALL_CPU_S, failures, format_action, is_stall, replay_command, stall_limit
from tests.soak.sandbox import Sandbox

TINY_TRAIN = {"task": "previous-token", "layers": 1, "heads": 2, "embed_dim": 16, "seq_len": 12, "batch_size": 8}

SOAK_SECONDS = float(os.environ.get("ATTNDESK_SOAK_SECONDS", "40"))
SOAK_SEED = int(os.environ.get("ATTNDESK_SOAK_SEED", "20240917"))


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """An in-process soak's files, HOME and working folder all under tmp_path."""
    box = Sandbox.create(str(tmp_path))
    monkeypatch.setenv("HOME", str(box.home))
    monkeypatch.chdir(box.cwd)
    yield box
    box.cleanup()


def make_window():
    from attndesk.app.window.main_window import MainWindow

    return MainWindow()


def test_discovery_finds_the_windows_controls_by_type(qtbot, sandbox):
    soak = Soak(SoakOptions(seed=0, seconds=0), sandbox, make_window, excluded=contextlib.nullcontext)
    soak.open_window()
    try:
        # a fresh window shows a placeholder until there is text: open the known session first
        expected = checks.expected_weights(str(sandbox.pool / "session-known.json"))
        assert checks.open_session(soak, str(sandbox.pool / "session-known.json"))
        # the known-input check reads the drawn heatmaps without any window API
        assert checks.wait_until(lambda: checks.match_heads(soak.main, expected)[0] == expected.shape[0], 30)
        found = discover(soak.main)
        counts = found.counts()
        # the rebuilt window: the view tabs and the timing tabs, the parameters panel, the heatmap
        # toolbar, the token table, the heatmap canvas
        assert counts["tabs"] >= 2 and counts["combo"] >= 5 and counts["spin"] >= 5, counts
        assert counts["check"] >= 3 and counts["button"] >= 2 and counts["text"] >= 1, counts
        assert counts["graphics"] >= 1 and counts["table"] >= 1, counts
        for name in ("viewTabs", "statusLabel", "tokenInput", "modeCombo", "headsSpin", "heatmapView", "timingTabs"):
            assert isinstance(found.names.get(name), QWidget), name
        titles = [title for title, _ in menu_actions(soak.main)]
        for wanted in (
            "Open session",
            "Save session",
            "Open text",
            "Open model folder",
            "Export",
            "Recompute",
            "Reset layout",
        ):
            assert any(wanted.lower() in t.lower() for t in titles), (wanted, titles)
        assert found.drop_targets, "the window accepts dropped text files"
        # hidden controls are not offered: the key-text editor shows only with cross-attention
        assert all(c.widget.isVisible() for c in found.controls)
        assert "keyInput" not in found.names
        # every view tab is reachable, and each shows controls of its own once selected
        tabs = found.names["viewTabs"]
        titles = [tabs.tabText(i) for i in range(tabs.count()) if tabs.isTabVisible(i)]
        assert titles == [t.title for t in TABS if t.serves("toy", None)]  # the registry's, for the toy mode
        with_controls = {t.title for t in TABS if t.serves("toy", None) and t.id != "rollout"}
        for i in range(tabs.count()):  # (Rollout only explains itself in the toy mode)
            if tabs.tabText(i) in with_controls:
                tabs.setCurrentIndex(i)
                page = tabs.widget(i)

                def inside(page=page):
                    return [c for c in discover(soak.main).controls if page.isAncestorOf(c.widget)]

                # a page's plots are revealed one per event-loop turn (widgets/pacing.py)
                assert checks.wait_until(lambda: bool(inside()), 10), f"no control found in the {tabs.tabText(i)!r} tab"
    finally:
        soak.files.uninstall()
        dispose(soak.main)


def test_file_dialogs_are_answered_from_the_pool_static_and_not(qtbot, sandbox):
    """The static getters return pool paths while installed (and are restored after); a
    QFileDialog instance opened with open() is answered by the Answerer like any dialog."""
    import random

    from PySide6.QtWidgets import QFileDialog

    from tests.soak.actions import Hands
    from tests.soak.dialogs import Answerer, FileDialogs

    notes: list[str] = []
    rng = random.Random(3)
    files = FileDialogs(sandbox, lambda: rng, notes.append)
    original = QFileDialog.getOpenFileName
    files.install()
    try:
        answers = {QFileDialog.getOpenFileName(None, "Open session", "", "sessions (*.json)")[0] for _ in range(40)}
        saved, _ = QFileDialog.getSaveFileName(None, "Export", "", "PNG (*.png)")
        folder = QFileDialog.getExistingDirectory(None, "Open model folder")
        files.force(str(sandbox.pool / "small.txt"))
        assert QFileDialog.getOpenFileName(None, "x")[0] == str(sandbox.pool / "small.txt")
    finally:
        files.uninstall()
    assert QFileDialog.getOpenFileName is original
    assert answers <= {c.path for c in sandbox.open_choices("Open session", "sessions (*.json)")} | {""}
    assert any(a.endswith(".json") for a in answers) and len(answers) > 5
    assert saved == "" or saved.startswith((str(sandbox.root), "/proc/self/attndesk-soak"))  # never elsewhere
    assert folder in {c.path for c in sandbox.dir_choices("")}
    assert len(notes) == 43 and all(n.startswith("file dialog") for n in notes)

    dialog = QFileDialog(None, "Open text")
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog)
    chosen = []
    dialog.fileSelected.connect(chosen.append)
    dialog.open()
    answerer = Answerer(Hands(sandbox), files, notes.append)
    assert answerer.pending(None) is dialog
    files.force(str(sandbox.pool / "medium.txt"))
    assert "accept" in answerer.act(dialog, random.Random(0))
    assert not dialog.isVisible() and chosen == [str(sandbox.pool / "medium.txt")]


def _replay(
    sandbox, seed: int, steps: int, *, settle: bool = True, script: list[dict] | None = None, full: bool = False
):
    options = SoakOptions(seed=seed, seconds=600, settle=settle, max_actions=steps, snapshot_state=False, replay=script)
    soak = Soak(options, sandbox, make_window, excluded=contextlib.nullcontext)
    try:
        soak.open_window()
        soak.run_random()
        checks.dismiss_dialogs(soak.main)
    finally:
        soak.files.uninstall()
        dispose(soak.main)
    if full:
        return soak.actions
    return [(a["kind"], a["target"], a["detail"], tuple(a.get("notes", ()))) for a in soak.actions]


# perf: before each step the replay waits for the process's CPU to go quiet (a clock and CPU times)
@pytest.mark.perf
@pytest.mark.slow  # ~25 s: three windows, each step waits until the app is idle
@pytest.mark.qt_no_exception_capture  # the soak counts the app's exceptions; here only the actions matter
def test_a_seed_replays_the_same_actions(qtbot, sandbox, tmp_path, monkeypatch):
    first = _replay(sandbox, seed=5, steps=10)
    from attndesk.app.window.main_window import app_settings

    settings = app_settings()
    settings.clear()  # the second window must not restore the first one's session
    settings.sync()
    (tmp_path / "again").mkdir()
    again = Sandbox.create(str(tmp_path / "again"))
    monkeypatch.setenv("HOME", str(again.home))
    second = _replay(again, seed=5, steps=10)
    settings.clear()
    settings.sync()
    other = _replay(again, seed=6, steps=4)
    again.cleanup()
    assert len([a for a in first if a[0] != "window"]) >= 8
    # file answers name sandbox-relative paths, so two sandboxes log the same text
    assert first == second, "\n".join(f"{a}\n{b}\n" for a, b in zip(first, second))
    assert other[:5] != first[:5]


@pytest.mark.perf  # the replay waits for quiet CPU at each step, as above
@pytest.mark.slow  # ~15 s: two windows, the replay waits until the app is idle at each step
@pytest.mark.qt_no_exception_capture
def test_a_report_replays_its_actions_at_another_pace(qtbot, sandbox, tmp_path, monkeypatch):
    """Recorded fast (no waiting for the window), replayed waiting for it: the same targets, the
    same file answers, in the same order."""
    from attndesk.app.window.main_window import app_settings

    recorded = _replay(sandbox, seed=9, steps=10, settle=False, full=True)
    app_settings().clear()
    (tmp_path / "again").mkdir()
    again = Sandbox.create(str(tmp_path / "again"))
    monkeypatch.setenv("HOME", str(again.home))
    replayed = _replay(again, seed=9, steps=10**6, settle=True, script=recorded, full=True)
    again.cleanup()

    def key(actions):
        return [(a["kind"], a["target"], tuple(a.get("answers", ()))) for a in actions if "step" in a]

    assert len(key(recorded)) >= 8
    assert key(replayed) == key(recorded), "\n".join(
        map(str, [a for a in recorded if "step" in a] + ["--"] + [a for a in replayed if "step" in a])
    )


def test_a_paused_training_run_lets_the_window_settle(qtbot, window):
    """A paused run waits for its user: its job holds the Train tab's runner (closing the window
    ends it) but is no work under way, so the soak's waits end; resumed, it is work again."""
    from attndesk.app.jobs.worker import JobRunner
    from attndesk.app.tabs.train.presenter import TRAIN_TAB

    window.state.view.tab = TRAIN_TAB
    tab = window.tab_presenter(TRAIN_TAB)
    tab.view.set_settings(TINY_TRAIN | {"steps": 100_000})
    assert tab.start()
    qtbot.waitUntil(lambda: len(tab.gathered.steps) >= 2, timeout=TIMEOUT_MS)
    assert "job train" in checks.busy_reasons(window)
    qtbot.mouseClick(tab.view.pauseButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not checks.busy(window), timeout=TIMEOUT_MS)
    (runner,) = [r for r in window.findChildren(JobRunner) if r.objectName() == "attndesk-train"]
    assert runner.is_busy() and tab.phase == "paused"
    qtbot.mouseClick(tab.view.resumeButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: runner.is_working(), timeout=TIMEOUT_MS)
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS):
        qtbot.mouseClick(tab.view.stopButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not runner.is_busy(), timeout=TIMEOUT_MS)


def test_a_stall_is_judged_at_the_pace_the_run_was_sampled_at():
    """The verdict's stall bound is the reference machine's STALL_CPU_S times the slowness the
    supervisor recorded; a report without one (an older report) is judged by STALL_CPU_S."""
    gap = {"source": "gap", "action": 3, "wall": 0.3, "cpu": 1.5 * STALL_CPU_S, "what": "Paint"}
    report = {"stalls": {"gaps": [gap], "events": []}}
    assert stall_limit(report) == STALL_CPU_S
    assert len(failures(report)) == 1 and "limit 100 ms" in failures(report)[0]
    report["pace"] = {"slowness": 1.6, "samples": 9, "stall_limit_s": 1.6 * STALL_CPU_S}
    assert failures(report) == []
    report["pace"] = {"slowness": 1.4, "samples": 9, "stall_limit_s": 1.4 * STALL_CPU_S}
    assert "limit 140 ms" in failures(report)[0]


def _soak(tmp_path, seed: int) -> None:
    """The short soak: every reliability criterion (a stall: STALL_CPU_S of GUI-thread CPU on the
    reference machine, times this processor's slowness sampled while the soak ran: the report's
    ``pace``, set by the supervisor)."""
    from tests.soak.supervise import run

    outcome = run(seed, SOAK_SECONDS, report_path=tmp_path / "soak.json", quiet=True)
    report = outcome.report
    replay = replay_command(seed, SOAK_SECONDS)
    last = "\n".join(format_action(a) for a in report.get("actions", [])[-30:])
    context = f"\nreplay: {replay}\nreport: {outcome.report_path}\nlast actions:\n{last}"
    assert not report.get("crash") and not report.get("aborted"), (
        f"{report.get('crash') or report.get('aborted')}{context}"
    )
    assert report["exceptions"] == [], (
        f"exceptions: {[p['type'] + ': ' + p['message'] for p in report['exceptions']]}{context}"
    )
    pace = report["pace"]
    limit = stall_limit(report)
    stalls = [s for s in report["stalls"]["gaps"] + report["stalls"]["events"] if is_stall(s, limit)]
    assert not stalls, (
        f"{len(stalls)} GUI-thread stalls (>= {limit * 1e3:.0f} ms of work: {STALL_CPU_S * 1e3:.0f} ms x this "
        f"processor's slowness while it ran, {pace['slowness']:.2f}, of {pace['samples']} samples), worst "
        f"{max(stalls, key=lambda s: s['cpu'])}{context}"
    )
    assert not report["threads"]["qthreads_left"] and not report["threads"]["python_left"], (
        f"{report['threads']}{context}"
    )
    assert report["memory"]["peak_mib"] < report["memory"]["limit_mib"], context
    assert report["memory"]["return_check"]["ok"], f"{report['memory']['return_check']['summary']}{context}"
    assert report["known_input"]["ok"], f"{report['known_input']['summary']}{context}"
    assert not report["sandbox_violations"], f"{report['sandbox_violations']}{context}"
    assert failures(report) == [] and report["passed"]


@pytest.mark.perf
@pytest.mark.timeout(1200)
def test_soak_in_the_suite(tmp_path):
    """`make test-perf`'s soak, the reliability criteria in full: 0 exceptions, no gap or event of 100 ms of
    GUI-thread work, 0 threads left, memory under the limit and back after a large input, the
    known input exact, nothing written outside its folder."""
    _soak(tmp_path, SOAK_SEED)


@pytest.mark.perf
@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_soak_short(tmp_path):
    """`make soak-short`: the same criteria with the next seed (other actions, other sizes)."""
    _soak(tmp_path, SOAK_SEED + 1)
