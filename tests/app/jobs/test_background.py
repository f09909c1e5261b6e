"""A widget's one-off job (``Background``) on the one executor: only the newest job answers, in the
GUI thread, a job still queued is replaced without running, an expected error goes to ``failed``,
and once it has answered no worker thread is left (its lane is open only while it has a job)."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread

from attndesk.app.jobs.background import Background
from attndesk.app.jobs.worker import running_threads
from attndesk.jobs.executor import Channel
from tests.conftest import TIMEOUT_MS

FILES = Channel("test-files", takes_turn=False)


def test_the_newest_job_answers_in_the_gui_thread_and_no_worker_stays(qtbot, qapp):
    owner = QObject()
    background = Background(owner, FILES)
    started, release, ran, answers, threads = threading.Event(), threading.Event(), [], [], []

    def held():
        ran.append("first")
        started.set()
        release.wait(TIMEOUT_MS / 1000)
        return "first"

    def answer(result):
        threads.append(QThread.currentThread())
        answers.append(result)

    background.start(held, done=answer, failed=answers.append)
    assert started.wait(TIMEOUT_MS / 1000)
    background.start(lambda: ran.append("second") or "second", done=answer, failed=answers.append)
    background.start(lambda: ran.append("third") or "third", done=answer, failed=answers.append)
    assert background.is_busy()
    release.set()
    qtbot.waitUntil(lambda: not background.is_busy(), timeout=TIMEOUT_MS)
    assert ran == ["first", "third"] and answers == ["third"]  # "second" was replaced while queued
    assert threads == [qapp.thread()]
    qtbot.waitUntil(lambda: running_threads() == [], timeout=TIMEOUT_MS)


def test_an_expected_error_goes_to_failed(qtbot, qapp):
    owner = QObject()
    background = Background(owner, FILES)
    failures = []

    def refuse():
        raise OSError("disk full")

    background.start(refuse, done=failures.append, failed=failures.append, expected=(OSError,))
    qtbot.waitUntil(lambda: not background.is_busy(), timeout=TIMEOUT_MS)
    assert [str(f) for f in failures] == ["disk full"]
