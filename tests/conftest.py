"""Shared test setup: Qt offscreen before any QApplication exists, no leaked threads, the one
``TIMEOUT_MS`` and the ``window`` fixture (a shown MainWindow with its first result drawn).

The tests mirror the package: ``tests/attention``, ``tests/runs``, ``tests/render``, ``tests/cli`` and ``tests/app/...``,
a file named after the module it tests. ``app_helpers``, ``views_helpers`` and ``pretrained_models``
are imported by their plain names (this folder is put on ``sys.path`` here)."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# QSettings and the app's data folder (the corpus tab's stores) of this process live in a private
# folder: never the user's, never another test run's or another xdist worker's.
_CONFIG_HOME = tempfile.mkdtemp(prefix="attndesk-test-config-")
atexit.register(shutil.rmtree, _CONFIG_HOME, ignore_errors=True)
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME
os.environ["XDG_DATA_HOME"] = os.path.join(_CONFIG_HOME, "data")
os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-tests")
# transformers' save_pretrained draws a progress bar on stderr when a fixture writes a tiny model
# inside a test: it would land in the output a CLI test reads as the command's own.
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402 - after the environment the settings read is set

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
for _path in (ROOT, TESTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from attndesk import set_torch_environment  # noqa: E402

set_torch_environment()  # as the window and the command do, before any test loads torch

# The longest any test waits for one signal or condition: a bound for a loaded 2-core machine,
# never a speed check (those measure their own times).
TIMEOUT_MS = 120_000


def _torch_threads() -> int | None:
    """The intra-op threads of this test process: ``ATTNDESK_TEST_THREADS`` where it is set (``make
    test-isa`` runs the numerics-sensitive tests on 1 and 2), else in one of n xdist workers its
    share of the cores (n workers with every core each would wait for each other), else torch's own."""
    forced = os.environ.get("ATTNDESK_TEST_THREADS")
    if forced:
        return int(forced)
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, cores // int(workers))
    return None


@pytest.fixture(scope="session", autouse=True)
def torch_threads() -> int:
    """torch's thread count for the session (``_torch_threads``); a test that needs another sets and restores it."""
    import torch

    threads = _torch_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def pytest_collection_modifyitems(config, items) -> None:
    """The modules holding a ``slow`` test run first, each kept whole (its module fixtures built
    once) and in their order. Under pytest-xdist each worker starts on its half of the collection
    and one that runs out takes half of the other's queue: a long test near the end keeps one
    worker busy while the other has nothing left, and two of Ray's tests there wait for each
    other's cluster. First, they overlap the rest of the collection instead."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


def pytest_collection_finish(session) -> None:
    """What collection imported (torch, Qt, transformers, attndesk, the test modules: ~480k objects)
    lives as long as the worker: it is frozen out of the collector, as the window and the CLI
    freeze theirs at start (``freeze_long_lived``). Every full collection walked it: 0.4 s each on
    a 2-core AMD EPYC, and ``dispose`` runs one for each of about 230 windows."""
    from attndesk.system.process import freeze_long_lived

    freeze_long_lived()


@pytest.fixture(autouse=True)
def reference_cpu_clock(request, monkeypatch) -> None:
    """A perf test reads the GUI thread's CPU (``time.thread_time``) in the seconds of the machine its
    bounds were set on: this processor's reading over its slowness measured as the test starts
    (``tests/speed.py``; 1 on a processor as fast or faster), printed with a failure. Only this
    process's reads: the soak's child reports in its own seconds, and the soak's verdict scales its
    bound instead."""
    if request.node.get_closest_marker("perf") is None:
        return
    from tests.speed import slowness

    pace = slowness()
    request.node.add_report_section("setup", "pace", f"GUI-thread CPU read over this processor's slowness {pace:.2f}")
    if pace > 1.0:
        real = time.thread_time
        monkeypatch.setattr(time, "thread_time", lambda: real() / pace)


def _running_qthreads() -> list:
    worker = sys.modules.get("attndesk.app.jobs.worker")
    if worker is None or not hasattr(worker, "running_threads"):
        return []
    return list(worker.running_threads())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Python's cyclic garbage collector is paused while a test runs and runs between tests.

    A shown window that only a reference cycle keeps alive is deleted, C++ object and all, by
    whichever collection finds it; one that starts inside Qt's painting (a Python paint method
    allocates) deletes the view being painted and crashes the process (measured: a window with two
    plots, freed by a collection inside processEvents, segfaults in QGraphicsView::paintEvent).
    Between tests no event is being processed. The perf tier's tests (resident set, soak) keep the
    collector's own timing."""
    if item.get_closest_marker("perf") or item.get_closest_marker("soak"):
        return (yield)
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()
        gc.collect(1)  # the young generations now; the old one as Python's thresholds say


@pytest.fixture
def qtbot(qtbot):
    """pytest-qt's ``qtbot`` whose ``addWidget`` also keeps the widget alive until the test ends
    (pytest-qt holds a weak reference only, so a widget the test no longer names was left to the
    garbage collector) and then deletes it at once, after pytest-qt has closed it."""
    from PySide6.QtCore import QCoreApplication, QEvent

    kept: list = []
    add_widget = qtbot.addWidget

    def keep(widget, *, before_close_func=None):
        kept.append(widget)
        add_widget(widget, before_close_func=before_close_func)

    qtbot.addWidget = keep
    yield qtbot
    for widget in kept:  # closed by pytest-qt already (a pyqtgraph plot fails a second close)
        try:
            widget.deleteLater()
        except RuntimeError:
            pass  # already deleted by its test
    kept.clear()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


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


@pytest.fixture
def window_size() -> tuple[int, int]:
    """The ``window`` fixture's size; a test module that needs another defines its own ``window_size``."""
    return (1300, 850)


@pytest.fixture
def ray_turn():
    """Ray's tests start a local cluster each: one at a time across the xdist workers, by an OS file
    lock that a worker's death releases (two clusters on two shared cores time out). Hold it
    (``with ray_turn:``) around the Ray run only, so a test's other work never makes another wait."""
    from filelock import FileLock

    return FileLock(os.path.join(tempfile.gettempdir(), "attndesk-tests-ray.lock"))


@pytest.fixture
def window(qtbot, window_size):
    """A fresh MainWindow (no restored session), shown at ``window_size``, its first result drawn;
    really deleted afterwards. A test needing a window set up otherwise uses a fixture of its own,
    named for what it holds (``pretrained_window``, ``compare_window``, ...)."""
    from app_helpers import dispose, shown_window  # Qt and the window only for the tests that use it

    w = shown_window(qtbot, window_size, TIMEOUT_MS)
    yield w
    dispose(w)


class EarlierOut:
    """An ``--out`` folder holding an earlier run's files (one a later run would write too)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir()
        (folder / "summary.json").write_bytes(b'{"from": "an earlier run"}\n')
        (folder / "notes.txt").write_bytes(b"mine")
        self.before = self.contents()

    def contents(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.folder.iterdir())}

    def unchanged(self) -> bool:
        """The same names with the same bytes, and nothing else."""
        return self.contents() == self.before


@pytest.fixture
def earlier_out(tmp_path) -> EarlierOut:
    return EarlierOut(tmp_path / "earlier")


@pytest.fixture(scope="session")
def image() -> np.ndarray:
    """A 40 x 52 random RGB picture (the tiny vision models resize it to 32 x 32)."""
    return np.random.default_rng(0).integers(0, 256, (40, 52, 3), dtype=np.uint8)


@pytest.fixture(scope="session")
def vision(tmp_path_factory):
    """vision(name, **changes) -> (loaded model, transformers' eager reference, folder): a tiny
    random vision checkpoint (tests/pretrained_models.py VISION_CONFIGS), built on first use."""
    from pretrained_models import build_vision, eager_vision

    from attndesk.models import clear_cache, load_pretrained
    from attndesk.models.loader import transformers_offline

    transformers_offline()
    root = tmp_path_factory.mktemp("vision")
    built: dict = {}

    def get(name: str, **changes):
        key = (name, tuple(sorted(changes.items())))
        if key not in built:
            folder = build_vision(name, root / f"{name}-{len(built)}", **changes)
            built[key] = (load_pretrained(folder), eager_vision(folder), folder)
        return built[key]

    yield get
    for _, _, folder in built.values():
        clear_cache(folder)
