"""The soak process: ``python -m tests.soak.child --root DIR --seed N --seconds S --report FILE``.

Started by ``supervise.run`` with the sandbox's environment (offscreen Qt, HOME and settings in
the sandbox). Writes the JSON report and exits 0 (passed) or 1 (failed); on passing the RSS limit
it writes what it has and exits 3 at once.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import tempfile
import threading
import time

from .report import failures, load, write

LIMIT_EXIT = 3


def make_window():
    """The one place that names the application window."""
    from attndesk.app.window.main_window import MainWindow

    return MainWindow()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.soak.child")
    p.add_argument("--root", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--limit-mib", type=int, default=4096)
    p.add_argument("--no-final-checks", action="store_true")
    p.add_argument("--replay", default=None, help="a report whose actions to repeat")
    return p.parse_args(argv)


class Run:
    """One soak process: monitors around a ``Soak``; ``report()`` assembles the JSON report."""

    def __init__(self, args: argparse.Namespace) -> None:
        from PySide6.QtWidgets import QApplication

        from .driver import Soak, SoakOptions
        from .monitors import ExceptionMonitor, MemoryWatch, StallMonitor
        from .sandbox import Sandbox, install_write_guard

        self.args = args
        self.box = Sandbox(args.root)
        self.box.prepare()
        # a library imported above (dill, through the driver's imports) asked for the temporary folder
        # before the sandbox's existed and was given /tmp, which the write guard refuses: ask again
        tempfile.tempdir = None
        os.chdir(self.box.cwd)
        self.violations: list[str] = []
        install_write_guard(self.box, self.violations.append)
        self.app = QApplication([sys.argv[0]])
        self.stall = StallMonitor(time.perf_counter(), lambda: self.soak.current)
        replay = None
        if args.replay:
            replay = load(args.replay)["actions"]
        options = SoakOptions(seed=args.seed, seconds=args.seconds, stream=args.stream, replay=replay)
        self.soak = Soak(options, self.box, make_window, excluded=self.stall.excluded, paused=self.stall.paused)
        self.stall.t0 = self.soak.t0
        self.errors = ExceptionMonitor(self.soak.t0, lambda: self.soak.current, on_fatal=self.save)
        self.memory = MemoryWatch(
            self.soak.t0, lambda: self.soak.current, args.limit_mib * 2**20, self._over_limit, sampler=self.stall.sample
        )
        # the soak's machine has limit_mib of memory, as a container's control group would give it:
        # the window plans and refuses within what is left of it (with the memory budget raised, a
        # larger machine's free memory would admit a model past the soak's limit)
        from attndesk.system import free_memory

        limit = args.limit_mib * 2**20
        free_memory.cgroup_headroom = lambda: max(0, limit - self.memory.rss())
        from .holdings import HighWater

        self.soak.high_water = HighWater(self.memory.rss)
        self.extra: dict = {}
        self.before = {t.ident for t in threading.enumerate()}

    def start(self) -> None:
        from . import checks

        checks.count_own_cpu(lambda: self.stall.own_cpu() + self.memory.cpu)
        self.errors.install()
        self.soak.files.install()
        self.stall.install(self.app)
        self.stall.start()
        self.memory.start()

    def execute(self) -> dict:
        from . import checks
        from .monitors import os_thread_count

        self.start()
        self.soak.open_window()
        self.extra["baseline_mib"] = round(self.memory.rss() / 2**20, 1)
        self.extra["os_threads_start"] = os_thread_count()
        self.soak.run_random()
        self.extra["random_phase_s"] = self.soak.now()
        self.extra["memory_before_checks_mib"] = round(self.memory.rss() / 2**20, 1)
        checks.dismiss_dialogs(self.soak.main)
        if not self.args.no_final_checks:
            self.extra["known_input"] = checks.known_input(self.soak)
            self.extra["return_check"] = checks.memory_return(self.soak, self.extra["baseline_mib"])
        self.soak.close_window()
        self.extra["threads"] = self._threads_after_close()
        self.stall.stop()
        self.stall.remove(self.app)
        self.memory.stop()
        self.errors.uninstall()
        self.soak.files.uninstall()
        return self.report()

    def _threads_after_close(self) -> dict:
        from . import checks
        from .monitors import os_thread_count, python_threads, running_qthreads

        checks.wait_until(
            lambda: not running_qthreads() and not [t for t in python_threads(self.before) if "(daemon)" not in t], 10.0
        )
        left = python_threads(self.before)
        return {
            "qthreads_left": running_qthreads() + self.soak.leaks,
            "python_left": [t for t in left if "(daemon)" not in t],
            "python_daemon_left": [t for t in left if "(daemon)" in t],
            "os_threads_start": self.extra.get("os_threads_start"),
            "os_threads_end": os_thread_count(),
        }

    def report(self, aborted: str = "") -> dict:
        from .monitors import as_dicts

        soak, stall, mem = self.soak, self.stall, self.memory
        coverage = {
            kind: {"seen": len(paths), "touched": len(paths & soak.touched), "untouched": sorted(paths - soak.touched)}
            for kind, paths in soak.seen.items()
        }
        report = {
            "seed": self.args.seed,
            "seconds": self.args.seconds,
            "duration_s": soak.now(),
            "aborted": aborted,
            "actions_count": len(soak.actions),
            "restarts": soak.restarts,
            "window_open_s": soak.open_times,
            "exceptions": as_dicts(self.errors.problems),
            "qt_warnings": {k: {"count": v[0], "first_action": v[1]} for k, v in self.errors.warnings.items()},
            "stalls": {
                "max_gap": list(stall.max_gap),
                "max_gap_cpu": list(stall.max_gap_cpu),
                "heartbeat_ms": 5,
                "ticks": stall.ticks,
                "filter_call_us": round(stall.per_event_s * 1e6, 2),
                "gc_cpu_s": round(stall.gc_cpu, 3),
                "gc_worst": list(stall.gc_worst),
                "gaps": as_dicts(stall.gaps + ([stall.open_gap()] if aborted and stall.open_gap() else [])),
                "events": as_dicts(stall.events),
            },
            "memory": {
                "limit_mib": self.args.limit_mib,
                "baseline_mib": self.extra.get("baseline_mib"),
                "peak_mib": round(mem.peak[0] / 2**20, 1),
                "peak_t": mem.peak[1],
                "peak_action": mem.peak[2],
                "before_checks_mib": self.extra.get("memory_before_checks_mib"),
                "return_check": self.extra.get("return_check"),
                "curve": as_dicts(mem.curve),
                "high_water": soak.high_water.records,
            },
            "threads": self.extra.get("threads", {}),
            "known_input": self.extra.get("known_input"),
            "coverage": coverage,
            "statuses": soak.statuses,
            "file_dialogs": soak.files.calls,
            "sandbox_violations": list(self.violations),
            "actions": soak.actions,
        }
        report["failures"] = failures(report)
        report["passed"] = not report["failures"]
        return report

    def save(self, aborted: str = "") -> dict:
        report = self.report(aborted)
        write(report, self.args.report)
        return report

    def _over_limit(self, rss: int) -> None:
        """Memory thread: past the limit, save the report and stop now (the machine is shared)."""
        message = f"resident memory {rss / 2**30:.2f} GiB passed the {self.args.limit_mib} MiB limit"
        self.save(message)
        print(f"[soak] {message}: stopping (the report is written)", file=sys.__stderr__, flush=True)
        os._exit(LIMIT_EXIT)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    crash = open(os.path.join(args.root, "crash.txt"), "w", encoding="utf-8")  # noqa: SIM115 - faulthandler writes here until exit
    faulthandler.enable(crash, all_threads=True)
    run = Run(args)
    try:
        report = run.execute()
    except Exception:
        import traceback

        report = run.report(aborted="soak harness error:\n" + traceback.format_exc())
        print(report["aborted"], file=sys.stderr)
    write(report, args.report)  # the supervisor judges it at the pace it sampled, and prints the verdict
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown of Qt objects: the report is written
