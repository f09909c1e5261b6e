"""Shared test setup: Qt offscreen before any QApplication exists, and no leaked threads."""

from __future__ import annotations

import os
import sys
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-tests")  # keep QSettings away from the user's

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _running_qthreads() -> list:
    worker = sys.modules.get("attndesk.app.worker")
    if worker is None or not hasattr(worker, "running_threads"):
        return []
    return list(worker.running_threads())


@pytest.fixture(autouse=True)
def no_thread_left_running():
    """Fail any test that leaves a Python thread or one of our QThreads running."""
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        leaked = [t for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon]
        qthreads = _running_qthreads()
        if not leaked and not qthreads:
            return
        time.sleep(0.05)
    pytest.fail(f"test left threads running: {leaked or ''} {qthreads or ''}")
