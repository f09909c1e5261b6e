"""Shared test setup: Qt offscreen before any QApplication exists, and no leaked threads."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# QSettings of this run live in a private folder: never the user's, never another test run's.
_CONFIG_HOME = tempfile.mkdtemp(prefix="attndesk-test-config-")
atexit.register(shutil.rmtree, _CONFIG_HOME, ignore_errors=True)
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME
os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-tests")

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _running_qthreads() -> list:
    worker = sys.modules.get("attndesk.app.jobs.worker")
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
