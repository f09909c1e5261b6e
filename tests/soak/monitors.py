"""What the soak watches: exceptions, GUI-thread stalls, resident memory, threads left.

Stalls are measured twice, both in wall-clock time and in the GUI thread's own CPU time
(``time.thread_time()``), so that being descheduled on a loaded machine is not counted as work:

- a 5 ms heartbeat timer: the gap between two ticks is how long the event loop did not turn;
- an application event filter sees each event of the GUI thread start: an event's handling time
  is the time until the next event starts (a nested event loop, a modal dialog's, starts events
  of its own, so it is never counted as one long event). A filter and not a ``notify`` override:
  PySide6 sometimes hands a Python ``notify`` a stale wrapper as the receiver (seen after a
  window was deleted and another built), which then could not deliver the event at all.

While a gap grows, the memory thread samples the GUI thread's Python stack, so a stall names the
file and function that held the loop.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import gc
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import psutil
from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, QTimer, QtMsgType, qInstallMessageHandler
from PySide6.QtWidgets import QApplication

RECORD_S = 0.05  # gaps and events at least this long (wall or CPU) are kept in the report
HEARTBEAT_MS = 5
_NOISE = ("This plugin does not support", "QFont::setPointSizeF", "propagateSizeHints")


def now_s(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


@dataclass
class Problem:
    kind: str  # "exception" (sys.excepthook), "thread", "unraisable", "logged-traceback", "qt-critical", "qt-fatal"
    type: str
    message: str
    traceback: str
    action: int
    t: float


class ExceptionMonitor:
    """Installs sys.excepthook, threading.excepthook, sys.unraisablehook and a Qt message handler."""

    def __init__(self, t0: float, action: Callable[[], int], on_fatal: Callable[[], None] | None = None) -> None:
        self.t0, self._action, self._on_fatal = t0, action, on_fatal
        self.problems: list[Problem] = []
        self.warnings: dict[str, list] = {}  # Qt warning text -> [count, first action]
        self._saved: tuple = ()

    def current_action(self) -> int:
        return self._action()

    def install(self) -> None:
        self._saved = (sys.excepthook, threading.excepthook, sys.unraisablehook, sys.stderr)
        sys.stderr = LoggedTracebacks(self)
        sys.excepthook = lambda t, v, tb: self._add("exception", t, v, tb)
        threading.excepthook = lambda a: self._add("thread", a.exc_type, a.exc_value, a.exc_traceback)
        sys.unraisablehook = lambda u: self._add(
            "unraisable", u.exc_type, u.exc_value, u.exc_traceback, note=f"{u.err_msg or ''} {u.object!r}"
        )
        qInstallMessageHandler(self._qt_message)

    def uninstall(self) -> None:
        if self._saved:
            sys.excepthook, threading.excepthook, sys.unraisablehook, sys.stderr = self._saved
            qInstallMessageHandler(None)
            self._saved = ()

    def _add(self, kind: str, exc_type, value, tb, note: str = "") -> None:
        text = "".join(traceback.format_exception(exc_type, value, tb)) if exc_type else note
        problem = Problem(
            kind,
            getattr(exc_type, "__name__", str(exc_type)),
            f"{value}"[:2000] or note,
            text[-8000:],
            self._action(),
            now_s(self.t0),
        )
        self.problems.append(problem)
        print(
            f"[soak] {kind} at action {problem.action}: {problem.type}: {problem.message[:300]}",
            file=sys.__stderr__,
            flush=True,
        )

    def _qt_message(self, mode, context, message: str) -> None:
        if mode in (QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg):
            kind = "qt-fatal" if mode == QtMsgType.QtFatalMsg else "qt-critical"
            where = f"{context.file}:{context.line} {context.function}" if context and context.file else ""
            self.problems.append(Problem(kind, kind, message, where, self._action(), now_s(self.t0)))
            print(f"[soak] {kind}: {message}", file=sys.__stderr__, flush=True)
            if mode == QtMsgType.QtFatalMsg and self._on_fatal is not None:
                self._on_fatal()  # Qt aborts after this handler: save what we have first
        elif mode == QtMsgType.QtWarningMsg and not message.startswith(_NOISE):
            entry = self.warnings.setdefault(message[:300], [0, self._action()])
            entry[0] += 1


class LoggedTracebacks:
    """Tees sys.stderr and keeps each "Traceback (most recent call last):" block written to it:
    an exception the app caught and printed (its worker prints unexpected failures) is a bug the
    user sees only as a terse status line. Each block is added to ``monitor.problems``."""

    def __init__(self, monitor: ExceptionMonitor) -> None:
        self.monitor, self.real = monitor, sys.stderr
        self._block: list[str] | None = None
        self._action = -1

    def write(self, text: str) -> int:
        self.real.write(text)
        if "Traceback (most recent call last):" in text:
            self._close()
            self._block, self._action = [], self.monitor.current_action()
        if self._block is not None:
            self._block.append(text)
            lines = "".join(self._block).rstrip("\n").splitlines()
            if len(lines) > 1 and lines[-1] and not lines[-1][0].isspace() and text.endswith("\n"):
                self._close()  # "SomeError: message" ends the block
        return len(text)

    def _close(self) -> None:
        if self._block:
            text = "".join(self._block)
            lines = text.rstrip().splitlines()
            frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
            after = lines[frames[-1] + 1 :] if frames else lines[1:]
            last = next((line for line in after if line and not line[0].isspace()), lines[-1])
            kind, _, message = last.partition(": ")
            self.monitor.problems.append(
                Problem(
                    "logged-traceback",
                    kind.strip(),
                    message.strip()[:2000],
                    text[-8000:],
                    self._action,
                    now_s(self.monitor.t0),
                )
            )
            print(f"[soak] logged traceback at action {self._action}: {last[:300]}", file=sys.__stderr__, flush=True)
        self._block = None

    def flush(self) -> None:
        self.real.flush()

    def __getattr__(self, name):  # fileno, encoding, isatty...: the real stream's
        return getattr(self.real, name)


@dataclass
class Stall:
    source: str  # "tick": the event loop did not turn; "event": one event's handling
    t: float  # when it began (seconds since the start)
    wall: float
    cpu: float  # GUI-thread CPU time in that interval
    action: int  # the action in progress when it ended (the one that caused it, or the last before)
    what: str = ""  # the event (type -> receiver) that held the loop longest
    events: int = 0  # events delivered during a gap
    stack: list[str] = field(default_factory=list)  # sampled GUI-thread Python stack, innermost last
    blocked: float = 0.0  # a gap's time the GUI thread was neither running nor waiting for a core (a lock, I/O)
    gc: float = 0.0  # of ``cpu``, Python's cyclic garbage collector run in the GUI thread


def _open_schedstat(native_id: int) -> int | None:
    """A descriptor of the thread's /proc schedstat (on-CPU ns, runnable-waiting ns, slices)."""
    try:
        return os.open(f"/proc/self/task/{native_id}/schedstat", os.O_RDONLY)
    except OSError:
        return None


def describe(receiver, event) -> str:
    """ "EventType -> Class(objectName)", read while the receiver is alive (its event is starting)."""
    try:
        kind = event.type().name
        name = receiver.objectName() or _named_ancestor(receiver)
    except (RuntimeError, AttributeError):  # a wrapper PySide6 could not match: say so, touch nothing
        return "?"
    cls = type(receiver).__name__
    return f"{kind} -> {cls}{f'({name})' if name else ''}"


def _named_ancestor(obj, levels: int = 6) -> str:
    """ "in <name>" of the nearest named parent (an unnamed QWidget or QTextDocument says little)."""
    parent = obj.parent() if isinstance(obj, QObject) else None
    for _ in range(levels):
        if parent is None:
            return ""
        if parent.objectName():
            return f"in {parent.objectName()}"
        parent = parent.parent()
    return ""


_FRAME_LINE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def _short(filename: str) -> str:
    for marker in ("/attndesk/", "/site-packages/", "/tests/"):
        if marker in filename:
            rest = filename.split(marker, 1)[1]
            return "attndesk/" + rest if marker == "/attndesk/" else rest
    return filename


def _thread_stack(dump: str, ident: int) -> list[str]:
    """One thread's frames from a faulthandler dump, innermost last, as "file:line function"."""
    lines, inside = [], False
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            inside = int(line.split("0x", 1)[1].split()[0], 16) == ident
            continue
        match = _FRAME_LINE.match(line) if inside else None
        if match and not match.group(1).startswith("<frozen") and match.group(1) != __file__:
            lines.append(f"{_short(match.group(1))}:{match.group(2)} {match.group(3)}")
    return list(reversed(lines))[-30:]


class StallMonitor(QObject):
    """Heartbeat gaps and per-event handling times of the GUI thread (see the module doc)."""

    def __init__(self, t0: float, action: Callable[[], int]) -> None:
        super().__init__()
        self.t0, self._action = t0, action
        self.gui_ident = threading.get_ident()
        self.gui_native = threading.get_native_id()
        self.gaps: list[Stall] = []
        self.events: list[Stall] = []
        self.max_gap = (0.0, 0.0)  # (wall, cpu) of the longest gap by wall
        self.max_gap_cpu = (0.0, 0.0)  # (wall, cpu) of the longest gap by CPU
        self.ticks = 0
        self.tick_cpu = 0.0  # GUI-thread CPU seconds in the heartbeat's own ticks so far
        self.per_event_s = 0.0  # PySide6's cost to call this Python filter, per event (``_calibrate``)
        self._open: tuple | None = None  # the event being handled: start times, action, receiver, type
        self._excl = [0.0, 0.0]  # driver time (wall, cpu) not to be counted as the app's
        self._last = (time.perf_counter(), time.thread_time(), 0.0, 0.0, 0.0, 0.0)
        self._gap_events = 0
        self._gap_costs: collections.Counter = collections.Counter()  # event kind -> CPU s in this gap
        self._gap_kinds: collections.Counter = collections.Counter()  # event kind -> events in this gap
        self._recent: collections.deque = collections.deque(maxlen=64)
        self._samples: list[list[str]] = []
        self._excluding = 0
        self._paused = 0
        self._sched = _open_schedstat(self.gui_native)
        self._gc_started: float | None = None
        self.gc_cpu = 0.0  # GUI-thread CPU seconds in the cyclic garbage collector so far
        self.gc_worst = (0.0, -1)  # (CPU seconds, generation) of the longest collection
        self._dump = tempfile.TemporaryFile()  # noqa: SIM115 - faulthandler writes stack samples here
        self._lock = threading.Lock()
        self._timer = QTimer(self, interval=HEARTBEAT_MS, timerType=Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._last = (time.perf_counter(), time.thread_time(), *self._excl, self._scheduled(), self.gc_cpu)
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    @contextlib.contextmanager
    def excluded(self):
        """Time spent by the soak itself (discovery, logging): not the app's stall."""
        if not self._excluding:
            # the app's event in progress ends here: events the soak's own work sends (walking the
            # widgets, reading the state) are the soak's, and this block is only added to the
            # excluded time at its end (a span closed inside it would count the soak's work so far)
            self._close_open_event()
        w, c = time.perf_counter(), time.thread_time()
        self._excluding += 1
        try:
            yield
        finally:
            self._excluding -= 1
            self._excl[0] += time.perf_counter() - w
            self._excl[1] += time.thread_time() - c

    @contextlib.contextmanager
    def paused(self):
        """Startup: building the window and its first layout and paint (events run inside, which
        ``excluded`` would still count). Nothing is measured; the next gap starts at the end."""
        self._paused += 1
        self._open = None
        try:
            with self.excluded():
                yield
        finally:
            self._paused -= 1
            self._open = None
            self._last = (time.perf_counter(), time.thread_time(), *self._excl, self._scheduled(), self.gc_cpu)
            self._gap_events = 0
            self._gap_costs.clear()
            self._gap_kinds.clear()

    # -- events (the application event filter, GUI thread) ---------------------------------------
    def install(self, app: QApplication) -> None:
        self.per_event_s = self._calibrate(app)
        app.installEventFilter(self)
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        """Time the collector's runs in the GUI thread: a full collection over millions of objects
        is GUI-thread work of its own, inside whatever event happened to allocate. Collections in
        the soak's own work (its ``gc.collect()`` before reading memory) are not the window's."""
        if threading.get_ident() != self.gui_ident or self._excluding:
            return
        if phase == "start":
            self._gc_started = time.thread_time()
        elif self._gc_started is not None:
            spent = time.thread_time() - self._gc_started
            self._gc_started = None
            self.gc_cpu += spent
            if spent > self.gc_worst[0]:
                self.gc_worst = (round(spent, 4), info.get("generation", -1))

    def _calibrate(self, app: QApplication, n: int = 4000) -> float:
        """CPU seconds PySide6 spends per event handing it to this Python filter and back, beyond
        the filter's own body (which it times itself): ~2,000 events in one tab switch made this
        harness overhead a third of a 130 ms 'stall'. Measured as the same events sent with and
        without the filter; the filter then books it per event as the soak's time, not the app's."""
        target = QObject()

        def send() -> float:
            start = time.thread_time()
            for _ in range(n):
                QCoreApplication.sendEvent(target, QEvent(QEvent.Type.User))
            return time.thread_time() - start

        send()  # warm up
        without = min(send() for _ in range(3))
        app.installEventFilter(self)
        inside0 = self._excl[1]
        withf = min(send() for _ in range(3))
        inside = (self._excl[1] - inside0) / 3
        app.removeEventFilter(self)
        self._open = None
        self._gap_events = 0
        self._gap_costs.clear()
        self._gap_kinds.clear()
        return max(0.0, (withf - without - inside) / n)

    def remove(self, app: QApplication) -> None:
        app.removeEventFilter(self)
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def eventFilter(self, receiver, event) -> bool:
        """Close the previous event's span, open this one's; never consumes the event."""
        if self._paused or self._excluding:
            return False  # inside the soak's own work (already excluded as a whole)
        wall, cpu = time.perf_counter(), time.thread_time()
        self._close_open_event()
        self._gap_events += 1
        what = describe(receiver, event)  # now: after its event the receiver may be gone (touching it crashes)
        self._gap_kinds[what] += 1
        # this filter's own time, and PySide6's to call it (calibrated), is the soak's, not the app's
        self._excl[0] += time.perf_counter() - wall + self.per_event_s
        self._excl[1] += time.thread_time() - cpu + self.per_event_s
        self._open = (
            time.perf_counter(),
            time.thread_time(),
            self.ticks,
            self._excl[0],
            self._excl[1],
            self._action(),
            what,
            self.gc_cpu,
        )
        return False

    def _close_open_event(self) -> None:
        if self._open is None:
            return
        start, cpu0, ticks, ex_w, ex_c, action, what, gc0 = self._open
        self._open = None
        if ticks != self.ticks:
            return  # the heartbeat ran since: the span is not one event's
        wall = time.perf_counter() - start - (self._excl[0] - ex_w)
        cpu = time.thread_time() - cpu0 - (self._excl[1] - ex_c)
        self._gap_costs[what] += cpu  # up to the next event, nested ones included: a gap's breakdown
        if wall >= RECORD_S or cpu >= RECORD_S:
            stall = Stall(
                "event",
                round(start - self.t0, 4),
                round(wall, 4),
                round(cpu, 4),
                action,
                what,
                stack=self._take_samples(peek=True),
                gc=round(self.gc_cpu - gc0, 4),
            )
            self.events.append(stall)
            self._recent.append(stall)

    # -- heartbeat --------------------------------------------------------------------------------
    def _tick(self) -> None:
        if self._paused:
            return
        now, cpu, scheduled = time.perf_counter(), time.thread_time(), self._scheduled()
        last_wall, last_cpu, ex_w, ex_c, last_scheduled, last_gc = self._last
        wall = now - last_wall - (self._excl[0] - ex_w)
        work = cpu - last_cpu - (self._excl[1] - ex_c)
        # neither on a core nor waiting for one: a lock, a join, I/O (0 where the kernel has no schedstat)
        blocked = max(0.0, now - last_wall - (scheduled - last_scheduled)) if self._sched is not None else 0.0
        self.ticks += 1
        if wall > self.max_gap[0]:
            self.max_gap = (round(wall, 4), round(work, 4))
        if work > self.max_gap_cpu[1]:
            self.max_gap_cpu = (round(wall, 4), round(work, 4))
        if wall >= RECORD_S or work >= RECORD_S:
            inside = [e for e in self._recent if e.t >= last_wall - self.t0 - 1e-3]
            worst = max(inside, key=lambda e: e.wall, default=None)
            self.gaps.append(
                Stall(
                    "tick",
                    round(last_wall - self.t0, 4),
                    round(wall, 4),
                    round(work, 4),
                    self._action(),
                    worst.what if worst else self._breakdown(),
                    self._gap_events,
                    self._take_samples(),
                    round(blocked, 4),
                    round(self.gc_cpu - last_gc, 4),
                )
            )
        self._gap_events = 0
        self._gap_costs.clear()
        self._gap_kinds.clear()
        self._last = (now, cpu, *self._excl, scheduled, self.gc_cpu)
        self.tick_cpu += time.thread_time() - cpu

    def own_cpu(self) -> float:
        """GUI-thread CPU seconds this monitor and the soak's excluded work have used so far: the
        heartbeat's ticks (every HEARTBEAT_MS), the event filter's bodies and PySide6's calls into it.
        Not the app's: ``checks.settle`` leaves it out (docs/reliability.md)."""
        return self.tick_cpu + self._excl[1]

    def _breakdown(self) -> str:
        """A gap made of many short events: the kinds that took most of its CPU."""
        top = [(what, cpu) for what, cpu in self._gap_costs.most_common(4) if cpu >= 0.005]
        most = "; ".join(f"{what} {cpu * 1e3:.0f} ms" for what, cpu in top)
        if self._gap_events < 300:
            return most
        counts = ", ".join(f"{n} x {what}" for what, n in self._gap_kinds.most_common(4))
        return f"{most}; of {self._gap_events} events: {counts}"

    def _scheduled(self) -> float:
        """Seconds the GUI thread has been on a core or runnable (its kernel schedstat), or 0."""
        if self._sched is None:
            return 0.0
        on_cpu, run_wait, _slices = os.pread(self._sched, 128, 0).split()
        return (int(on_cpu) + int(run_wait)) / 1e9

    def open_gap(self) -> Stall | None:
        """The gap still growing now (the loop has not turned since the last tick), if it is long:
        a run stopped at the memory limit while the GUI thread was stuck reports it this way."""
        wall = time.perf_counter() - self._last[0]
        if wall < RECORD_S:
            return None
        # thread_time() only reads the calling thread: the kernel's count for the GUI thread instead
        times = {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}
        cpu = times.get(self.gui_native, self._last[1]) - self._last[1]
        return Stall(
            "tick (still open when the run stopped)",
            round(self._last[0] - self.t0, 4),
            round(wall, 4),
            round(cpu, 3),
            self._action(),
            "",
            self._gap_events,
            self._take_samples(peek=True),
        )

    # -- stack samples (called from the memory thread) ----------------------------------------------
    def sample(self, min_gap_s: float = 0.06) -> None:
        """If the loop has not turned for ``min_gap_s``, record where the GUI thread is."""
        if time.perf_counter() - self._last[0] < min_gap_s:
            return
        if self._excluding or len(self._samples) >= 200:
            return  # the soak's own work (building the window, discovery) is not sampled
        # faulthandler reads the frames as a crash handler would: safe while the thread runs
        # (materialising another thread's frames through sys._current_frames is not, in 3.11)
        self._dump.seek(0)
        self._dump.truncate()
        faulthandler.dump_traceback(self._dump, all_threads=True)
        self._dump.seek(0)
        stack = _thread_stack(self._dump.read().decode("utf-8", "replace"), self.gui_ident)
        if stack:
            with self._lock:
                self._samples.append(stack)

    def _take_samples(self, peek: bool = False) -> list[str]:
        """Where the GUI thread was while the loop stood still: the innermost attndesk (else any)
        frame of each sample, counted, then the whole stack of the most frequent one."""
        with self._lock:
            samples = list(self._samples)
            if not peek:
                self._samples.clear()
        if not samples:
            return []
        keys = [_innermost(s) for s in samples]
        counts = collections.Counter(keys).most_common(3)
        lines = [f"{n} of {len(samples)} samples in {key}" for key, n in counts]
        return lines + samples[keys.index(counts[0][0])]


def _innermost(stack: list[str]) -> str:
    for line in reversed(stack):
        if line.startswith("attndesk/"):
            return line
    if stack and stack[-1].startswith("soak/"):
        return f"Qt (C++, no Python frame below {stack[-1]})"
    return stack[-1] if stack else "?"


@dataclass
class MemoryPoint:
    t: float
    rss_mib: float
    action: int


class MemoryWatch(threading.Thread):
    """Samples resident memory every 20 ms (a point every 0.25 s for the curve); past ``limit`` it
    calls ``on_limit(rss)`` once (the soak stops: other engineers share this machine)."""

    def __init__(
        self,
        t0: float,
        action: Callable[[], int],
        limit: int,
        on_limit: Callable[[int], None],
        sampler: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="soak-memory-watch", daemon=True)
        self.t0, self._action, self.limit, self._on_limit, self._sampler = t0, action, limit, on_limit, sampler
        self.curve: list[MemoryPoint] = []
        self.peak = (0, 0.0, -1)  # (rss bytes, t, action)
        self._halt = threading.Event()
        self._proc = psutil.Process()
        self._fired = False
        self.cpu = 0.0  # this thread's CPU seconds so far (the soak's, not the app's)

    def rss(self) -> int:
        return self._proc.memory_info().rss

    def run(self) -> None:
        next_point = 0.0
        while not self._halt.wait(0.02):
            self.cpu = time.thread_time()
            rss, t = self.rss(), time.perf_counter() - self.t0
            if rss > self.peak[0]:
                self.peak = (rss, round(t, 3), self._action())
            if t >= next_point:
                self.curve.append(MemoryPoint(round(t, 2), round(rss / 2**20, 1), self._action()))
                next_point = t + 0.25
            if rss > self.limit and not self._fired:
                self._fired = True
                self._on_limit(rss)
            if self._sampler is not None:
                self._sampler()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)


def running_qthreads() -> list[str]:
    """The names of attndesk's running worker threads (empty if the app no longer has the registry)."""
    worker = sys.modules.get("attndesk.app.jobs.worker")
    running = getattr(worker, "running_threads", None)
    if running is None:
        return []
    return [thread.name for thread in running()]


def python_threads(before: set[int]) -> list[str]:
    return [
        f"{t.name}{' (daemon)' if t.daemon else ''}"
        for t in threading.enumerate()
        if t.ident not in before and t.is_alive() and not t.name.startswith("soak-")
    ]


def os_thread_count() -> int:
    return psutil.Process(os.getpid()).num_threads()


def as_dicts(items) -> list[dict]:
    return [asdict(i) for i in items]
