"""The checks after the random phase: a known input is computed and drawn exactly, and after a
large input resident memory comes back near its baseline once the input is small again.

Both go through the window as a user would (File > Open session with a session file from the
pool) and read what is drawn from the pyqtgraph ImageItems on screen, so they need no window API.
"""

from __future__ import annotations

import ctypes
import gc
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import shiboken6
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QGraphicsView, QProgressBar, QTabBar

from attndesk.app.tabs.registry import spec
from attndesk.jobs.executor import executor
from attndesk.session.state import HEATMAPS_TAB

from . import gestures as g
from .controls import discover, menu_actions
from .report import MEMORY_ALLOWANCE_MIB

QUIET_CPU = 0.06  # process CPU seconds per second below which the app counts as idle


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_ms: int = 50) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        g.pump(step_ms)


def busy_reasons(root) -> list[str]:
    """What makes ``root`` busy though it may use no CPU (a worker waiting on the disk): each
    channel of the one executor with a job queued or at work (a paused training run waits for its
    user: no work), and each progress bar shown without a fraction (what a
    user reads as "still working"). A bar with a fraction at rest is not work: the corpus tab's
    stays in view between passes (counting it made every wait on that tab run to its limit)."""
    if root is None:
        return []
    reasons = [f"job {name}" for name in executor().working()]
    reasons += [
        f"progress bar {bar.objectName() or type(bar.parent()).__name__} without a fraction"
        for bar in root.findChildren(QProgressBar)
        if bar.isVisible() and bar.minimum() == bar.maximum()
    ]
    return reasons


def busy(root) -> bool:
    """Whether ``root`` has work under way (``busy_reasons``)."""
    return bool(busy_reasons(root))


_OWN_CPU: list[Callable[[], float]] = []  # the soak's own monitors' CPU seconds so far, when counted


def count_own_cpu(own_cpu: Callable[[], float]) -> None:
    """What ``settle`` leaves out of the process's CPU: the soak's own monitors' seconds so far
    (its heartbeat ticks every few ms in the GUI thread; the memory thread samples every 20 ms)."""
    _OWN_CPU[:] = [own_cpu]


def own_cpu() -> float:
    return _OWN_CPU[0]() if _OWN_CPU else 0.0


def app_cpu() -> float:
    """The process's CPU seconds (every thread) less the soak's own."""
    return sum(psutil.Process().cpu_times()[:2]) - own_cpu()


def settle(max_s: float, window_s: float = 0.4, root=None) -> bool:
    """Run the event loop until the app (every thread, less the soak's own monitors) used almost
    no CPU for ``window_s`` and ``root`` shows no progress bar (a worker waiting on the disk uses
    no CPU)."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        before = app_cpu()
        g.pump(int(window_s * 1000))
        if app_cpu() - before < QUIET_CPU * window_s and not busy(root):
            return True
    return False


def busy_threads(root, window_s: float = 1.0) -> str:
    """What keeps the process from going quiet, for a note: each thread's CPU over ``window_s``
    of the event loop (by its Python name where it has one; the soak's own share beside it), and
    the active timers under ``root`` (a timer that fires on and on keeps the GUI thread working
    with no job to show for it)."""
    import threading

    proc = psutil.Process()
    names = {t.native_id: t.name for t in threading.enumerate()}
    before = {t.id: t.user_time + t.system_time for t in proc.threads()}
    own = own_cpu()
    g.pump(int(window_s * 1000))
    own = own_cpu() - own
    used = sorted(((t.user_time + t.system_time - before.get(t.id, 0.0), t.id) for t in proc.threads()), reverse=True)
    threads = ", ".join(f"{names.get(tid, f'thread {tid}')} {cpu / window_s:.0%}" for cpu, tid in used[:3] if cpu > 0)
    timers = []
    if root is not None:
        for timer in root.findChildren(QTimer):
            if timer.isActive() and not timer.isSingleShot():
                owner = timer.parent()
                timers.append(f"{type(owner).__name__}.{timer.objectName() or 'timer'} every {timer.interval()} ms")
    return (
        f"CPU by thread: {threads or 'none'} (the soak's own monitors {own / window_s:.0%}); "
        f"repeating timers: {', '.join(timers[:6]) or 'none'}"
    )


def drawn_images(root) -> list[np.ndarray]:
    """The arrays of every visible pyqtgraph ImageItem in ``root``'s visible graphics views."""
    import pyqtgraph as pg

    out = []
    for view in root.findChildren(QGraphicsView):
        if not view.isVisible() or view.scene() is None:
            continue
        for item in view.scene().items():
            if isinstance(item, pg.ImageItem) and item.isVisible() and item.image is not None:
                out.append(np.asarray(item.image))
    return out


HEATMAPS = re.escape(spec(HEATMAPS_TAB).title)  # the heatmaps tab's title, as the tab registry declares it


def show_tab(root, pattern: str) -> bool:
    """Click the first tab whose title matches ``pattern`` (e.g. ``HEATMAPS``)."""
    for control in discover(root).of_kind("tabs"):
        bar: QTabBar = control.widget
        for i in range(bar.count()):
            if re.search(pattern, bar.tabText(i), re.I):
                g.click(bar, bar.tabRect(i).center())
                return True
    return False


def open_session(soak, path: str) -> bool:
    """File > Open session… answered with ``path`` (found by the action's title, not its name):
    through the patched static getters, or a QFileDialog the window opens itself (exec() or open())."""
    for title, action in menu_actions(soak.main):
        if re.search(r"open.*session", title, re.I) and action.isEnabled():
            soak.files.force(path)
            answer = QTimer(interval=100)
            answer.timeout.connect(lambda: _answer_file_dialog(soak))
            answer.start()
            try:
                action.trigger()
                wait_until(lambda: not isinstance(soak.answerer.pending(soak.main), QFileDialog), 5.0)
            finally:
                answer.stop()
                soak.files.clear_forced()
            return True
    return False


def _answer_file_dialog(soak) -> None:
    pending = soak.answerer.pending(soak.main)
    if isinstance(pending, QFileDialog):
        soak.answerer.act(pending, random.Random(0))  # takes the forced path


def expected_weights(session_path: str) -> np.ndarray:
    from attndesk.core import AttentionConfig, run_attention

    data = json.loads(Path(session_path).read_text(encoding="utf-8"))
    return run_attention(AttentionConfig.from_dict(data["config"]), data["text"]).weights


def match_heads(root, expected: np.ndarray, atol: float = 1e-5) -> tuple[int, float]:
    """How many heads of ``expected`` [H, L, Lk] some drawn image equals, and the worst difference
    among the closest images of the same shape."""
    images = [a for a in drawn_images(root) if a.shape == expected.shape[1:]]
    matched, worst = 0, 0.0
    for head in expected:
        diffs = [float(np.max(np.abs(a.astype(np.float64) - head))) for a in images]
        best = min(diffs, default=float("inf"))
        worst = max(worst, best)
        matched += best <= atol
    return matched, worst


def known_input(soak, timeout_s: float = 90.0) -> dict:
    """Open the known session; the drawn heatmaps must equal ``run_attention``'s weights."""
    path = str(soak.sandbox.pool / "session-known.json")
    expected = expected_weights(path)
    soak.log_action("check", "known input", "File > Open session: session-known.json")
    if not open_session(soak, path):
        return {"ok": False, "summary": "no 'Open session' menu action"}
    heads = expected.shape[0]
    state = {"matched": 0, "worst": float("inf")}

    def done() -> bool:
        show_tab(soak.main, HEATMAPS)
        state["matched"], state["worst"] = match_heads(soak.main, expected)
        return state["matched"] == heads

    ok = wait_until(done, timeout_s, step_ms=200)
    api = {}
    displayed = getattr(soak.main, "displayed_result", None)
    if callable(displayed) and displayed() is not None:  # the window's API, if it has it
        shown = displayed()
        amap = getattr(shown, "map", shown)  # a Shown presents an AttentionMap (older windows: a result)
        w = np.asarray(getattr(amap, "weights", np.zeros(0)))
        api["displayed_result_max_diff"] = float(np.max(np.abs(w - expected))) if w.shape == expected.shape else None
    summary = (
        f"{state['matched']} of {heads} heads drawn equal to run_attention (closest max |diff| {state['worst']:.2e})"
    )
    return {"ok": ok, "summary": summary, "heads": heads, "matched": state["matched"], "worst": state["worst"], **api}


def trimmed_rss() -> tuple[float, float]:
    """(RSS, RSS after gc and glibc's malloc_trim) in MiB: freed memory the allocator kept is not
    the app's, but it is what a user sees, so both are reported. (Callers exclude this from the
    stall measure: the collection is the soak's doing.)"""
    gc.collect()
    raw = psutil.Process().memory_info().rss / 2**20
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return round(raw, 1), round(psutil.Process().memory_info().rss / 2**20, 1)


def visit_tabs(soak, settle_s: float = 20.0) -> None:
    """Show every tab of the window once (the teaching views build their caches when shown)."""
    for control in discover(soak.main).of_kind("tabs"):
        bar: QTabBar = control.widget
        for i in range(bar.count()):
            if bar.isTabEnabled(i) and bar.isTabVisible(i) and bar.isVisible():
                soak.log_action("check", control.path, f"tab {bar.tabText(i)!r}")
                bar.setCurrentIndex(i)
                if not settle(settle_s, root=soak.main):
                    reasons = ", ".join(busy_reasons(soak.main)) or busy_threads(soak.main)
                    soak.note(f"not settled in {settle_s:g} s: {reasons}")


def memory_return(soak, start_mib: float | None = None) -> dict:
    """Baseline (small input, every tab seen) -> the large session (every tab seen) -> small again:
    RSS after must be within MEMORY_ALLOWANCE_MIB of the baseline. ``start_mib`` (the RSS when the
    window first showed its result) is reported beside it: what the whole soak left behind."""
    visit_tabs(soak)
    with soak.excluded():
        base = trimmed_rss()
    soak.log_action("check", "memory", "File > Open session: session-large.json")
    open_session(soak, str(soak.sandbox.pool / "session-large.json"))
    settle(120, window_s=1.0, root=soak.main)
    visit_tabs(soak)
    with soak.excluded():
        large = trimmed_rss()
    known = known_input(soak)
    visit_tabs(soak)
    show_tab(soak.main, HEATMAPS)
    settle(20, root=soak.main)
    with soak.excluded():
        after = trimmed_rss()
    grew = after[1] - base[1]
    ok = known["ok"] and grew <= MEMORY_ALLOWANCE_MIB
    summary = (
        f"baseline {base[1]:.0f} MiB (raw {base[0]:.0f}), with the large input {large[0]:.0f} MiB, "
        f"small again {after[1]:.0f} MiB (raw {after[0]:.0f}): {grew:+.0f} MiB, allowance "
        f"{MEMORY_ALLOWANCE_MIB} MiB"
    )
    if start_mib is not None:
        summary += (
            f"; {after[0] - start_mib:+.0f} MiB (raw) since the window first showed a result ({start_mib:.0f} MiB)"
        )
    return {
        "ok": ok,
        "summary": summary,
        "baseline_mib": base,
        "large_mib": large,
        "after_mib": after,
        "growth_mib": round(grew, 1),
        "allowance_mib": MEMORY_ALLOWANCE_MIB,
        "start_mib": start_mib,
        "known_after_large": known,
    }


def dismiss_dialogs(main, rounds: int = 20) -> None:
    """Close every popup and dialog left open (Esc, then close())."""
    for _ in range(rounds):
        target = QApplication.activePopupWidget() or QApplication.activeModalWidget()
        if target is None:
            others = [
                w
                for w in QApplication.topLevelWidgets()
                if w.isVisible() and w is not main and w.isWindow() and not w.parent()
            ]
            if not others:
                return
            target = others[0]
        g.key(target, g.Qt.Key.Key_Escape)
        g.pump(20)
        if shiboken6.isValid(target) and target.isVisible():  # a dialog deleted on close is gone
            target.close()
        g.pump(20)
