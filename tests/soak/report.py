"""The soak's verdict: the reliability criteria (0 exceptions, no 100 ms of GUI-thread work at once, 0 threads
left, memory bounded and back, the known input exact), the JSON report, and what to print on a failure."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

STALL_CPU_S = 0.100  # GUI-thread work that counts as a stall (the criterion)
# A gap's time the GUI thread was blocked (a lock, a join, I/O, the GIL) is reported beside it but
# is no criterion: waiting for the GIL held by a worker that the OS preempted grows with the load
# of the machine, and the criterion must not depend on it (a 3.7 s lock wait was found this way).
BLOCKED_NOTE_S = 0.100


def is_stall(stall: dict, limit_s: float = STALL_CPU_S) -> bool:
    return stall["cpu"] >= limit_s


def stall_limit(report: dict) -> float:
    """The stall bound ``report`` is judged by: ``STALL_CPU_S`` on the reference machine, times the
    slowness the supervisor sampled while the run went (tests/speed.py), where it recorded one."""
    return float((report.get("pace") or {}).get("stall_limit_s", STALL_CPU_S))


MEMORY_ALLOWANCE_MIB = 200  # after a large input, RSS must come back within this of its baseline
LAST_ACTIONS = 30


def replay_command(seed: int, seconds: float) -> str:
    return f"make soak SECONDS={seconds:g} SEED={seed}"


def failures(report: dict, stall_s: float | None = None) -> list[str]:
    """Every criterion the run missed, one line each (empty: passed); a stall is ``stall_s`` or more
    of GUI-thread CPU in one gap or event (default: ``stall_limit(report)``)."""
    stall_s = stall_limit(report) if stall_s is None else stall_s
    out = []
    if report.get("crash"):
        out.append(f"the soak process died: {report['crash']}")
    if report.get("aborted"):
        out.append(f"aborted: {report['aborted']}")
    for p in report.get("exceptions", []):
        out.append(f"{p['kind']} at action {p['action']}: {p['type']}: {p['message'][:200]}")
    stalls = report.get("stalls", {})
    for s in stalls.get("gaps", []) + stalls.get("events", []):
        if is_stall(s, stall_s):
            out.append(
                f"stall ({s['source']}) at action {s['action']}: {s['wall'] * 1e3:.0f} ms wall, "
                f"{s['cpu'] * 1e3:.0f} ms GUI-thread CPU (limit {stall_s * 1e3:.0f} ms; "
                f"{s.get('gc', 0) * 1e3:.0f} ms garbage collection), "
                f"{s.get('blocked', 0) * 1e3:.0f} ms blocked {s['what']}"
            )
    threads = report.get("threads", {})
    if threads.get("qthreads_left") or threads.get("python_left"):
        out.append(f"threads left after close: {threads.get('qthreads_left')} {threads.get('python_left')}")
    back = report.get("memory", {}).get("return_check") or {}
    if back and not back.get("ok"):
        out.append(f"memory did not come back: {back.get('summary')}")
    known = report.get("known_input") or {}
    if known and not known.get("ok"):
        out.append(f"known input not shown correctly: {known.get('summary')}")
    for v in report.get("sandbox_violations", []):
        out.append(f"wrote outside the sandbox: {v}")
    return out


def first_failure_action(report: dict) -> int | None:
    """The first exception's action, else the first stall's (exceptions are the rarer lead)."""
    marks = [p["action"] for p in report.get("exceptions", [])]
    if not marks:
        stalls = report.get("stalls", {})
        limit = stall_limit(report)
        marks = [s["action"] for s in stalls.get("gaps", []) + stalls.get("events", []) if is_stall(s, limit)]
    return min(marks) if marks else None


def format_action(a: dict) -> str:
    indent = "    " * a.get("depth", 0)
    notes = f" [{'; '.join(a['notes'])}]" if a.get("notes") else ""
    return f"  #{a['i']:<5} {a['t']:8.2f}s {indent}{a['kind']:<8} {a['target']}: {a['detail']}{notes}"


def print_failure(report: dict, report_path: str | Path | None, out=sys.stdout) -> None:
    """The seed, how to replay, what failed and the actions that led there."""
    lines = failures(report)
    seed, seconds = report.get("seed"), report.get("seconds", 60)
    print(f"\nSOAK FAILED (seed {seed}): {len(lines)} problem(s)", file=out)
    print(f"replay: {replay_command(seed, seconds)} (the same choices while the window keeps the same pace)", file=out)
    if report_path:
        print(f"replay these exact actions: make soak REPLAY={report_path}", file=out)
    for line in lines[:40]:
        print(f"  - {line}", file=out)
    if len(lines) > 40:
        print(f"  ... and {len(lines) - 40} more (see the report)", file=out)
    actions = report.get("actions", [])
    first = first_failure_action(report)
    if first is not None:
        before = [a for a in actions if a["i"] <= first][-LAST_ACTIONS:]
        print(f"the {len(before)} actions up to the first failure (action {first}):", file=out)
        for a in before:
            print(format_action(a), file=out)
    print(f"the last {min(LAST_ACTIONS, len(actions))} actions:", file=out)
    for a in actions[-LAST_ACTIONS:]:
        print(format_action(a), file=out)
    if report_path:
        print(f"report: {report_path}", file=out)


def summary_line(report: dict) -> str:
    stalls = report.get("stalls", {})
    gap = stalls.get("max_gap_cpu") or [0, 0]
    mem = report.get("memory", {})
    return (
        f"seed {report.get('seed')}: {len(report.get('actions', []))} actions in "
        f"{report.get('duration_s', 0):.0f} s, {len(report.get('exceptions', []))} exceptions, "
        f"longest gap {1e3 * (stalls.get('max_gap') or [0])[0]:.0f} ms wall, "
        f"most GUI-thread CPU in one gap {1e3 * gap[1]:.0f} ms, most blocked in one gap "
        f"{1e3 * max((g.get('blocked', 0) for g in stalls.get('gaps', [])), default=0):.0f} ms "
        f"(gaps blocked >= {BLOCKED_NOTE_S * 1e3:.0f} ms: "
        f"{sum(g.get('blocked', 0) >= BLOCKED_NOTE_S for g in stalls.get('gaps', []))}), "
        f"longest garbage collection in the GUI thread {1e3 * (stalls.get('gc_worst') or [0])[0]:.0f} ms, "
        f"peak RSS {mem.get('peak_mib', 0):.0f} MiB, stall limit {stall_limit(report) * 1e3:.0f} ms"
    )


def load(path: str | Path) -> dict:
    """A report written by ``write`` (or gzipped: soak-findings keeps them as .json.gz)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def write(report: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)
    return path
