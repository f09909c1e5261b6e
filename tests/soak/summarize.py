"""``python -m tests.soak.summarize REPORT.json ...``: what several soak runs found, deduplicated
and ranked: exceptions by type and the innermost attndesk frame, stalls by where the GUI thread
was (the sampled frame, else the event), memory jumps by action, threads left, error statuses.
Each finding lists seed and action, so it replays with ``make soak SECONDS=... SEED=...``.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import re
import sys

from .report import format_action, is_stall, load, stall_limit

JUMP_MIB = 150  # an RSS rise this large between two curve points (0.25 s) is listed with its action


def _innermost_app_frame(traceback_text: str) -> str:
    frames = re.findall(r'File "([^"]*attndesk/[^"]*)", line (\d+), in (\S+)', traceback_text)
    if not frames:
        return "?"
    path, line, func = frames[-1]
    return f"attndesk/{path.split('/attndesk/', 1)[1]}:{line} {func}"


def _where(stall: dict) -> str:
    """The sampled frame the GUI thread spent the stall in, else the event that held the loop."""
    first = stall.get("stack") or []
    if first and " samples in " in first[0]:
        return first[0].split(" samples in ", 1)[1]
    return f"event {stall.get('what') or '?'}"


def _action(report: dict, index: int) -> dict:
    actions = report.get("actions", [])
    return (
        actions[index] if 0 <= index < len(actions) else {"i": index, "t": 0, "kind": "?", "target": "?", "detail": ""}
    )


def _short_action(a: dict) -> str:
    notes = f" [{'; '.join(a.get('notes', []))}]" if a.get("notes") else ""
    return f"#{a['i']} {a['kind']} {a['target'].split('/')[-1]}: {a['detail'][:90]}{notes[:160]}"


def exceptions(reports: list[dict]) -> list[str]:
    groups: dict[tuple, list] = collections.defaultdict(list)
    for r in reports:
        for p in r.get("exceptions", []):
            groups[(p["type"], _innermost_app_frame(p["traceback"]))].append((r, p))
    out = []
    for (kind, frame), items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        r, p = items[0]
        out.append(
            f"## {kind} at {frame}: {len(items)} time(s), seeds "
            f"{sorted({x['seed'] for x, _ in items})}\n{p['message'][:300]}\n"
            f"first: seed {r['seed']} action {p['action']}; the actions before it:"
        )
        out += [format_action(a) for a in r.get("actions", [])[max(0, p["action"] - 5) : p["action"] + 1]]
        out.append("traceback (last lines):\n" + "\n".join(p["traceback"].rstrip().splitlines()[-12:]) + "\n")
    return out


def _group_key(where: str) -> str:
    """ "file:line function" -> "file function" (one finding, several lines)."""
    return re.sub(r":\d+ ", " ", where, count=1)


def stalls(reports: list[dict]) -> list[str]:
    groups: dict[str, list] = collections.defaultdict(list)
    for r in reports:
        for s in r.get("stalls", {}).get("gaps", []):
            if is_stall(s, stall_limit(r)):
                where = _where(s)
                key = (
                    f"Qt C++ code during {s.get('what') or 'an unknown event'}"
                    if where.startswith("Qt (")
                    else _group_key(where)
                )
                groups[key].append((r, s))
    out = []
    ranked = sorted(groups.items(), key=lambda kv: -max(s["cpu"] for _, s in kv[1]))
    for where, items in ranked:
        r, worst = max(items, key=lambda rs: rs[1]["cpu"])
        a = _action(r, worst["action"])
        kinds = collections.Counter(f"{_action(x, s['action'])['kind']}" for x, s in items)
        seeds = collections.Counter(x["seed"] for x, _ in items)
        out.append(
            f"## {where}: {len(items)} stall(s), worst {worst['wall'] * 1e3:.0f} ms wall / "
            f"{worst['cpu'] * 1e3:.0f} ms GUI-thread CPU (seed {r['seed']}, action {worst['action']})\n"
            f"seeds {dict(seeds)}; lines {sorted({_where(s) for _, s in items})[:6]}\n"
            f"last action: {_short_action(a)}\nevent: {worst.get('what')}; after actions of kind {dict(kinds)}\n"
            f"state: {json.dumps(a.get('state', {}), ensure_ascii=False)[:400]}\n"
            "stack:\n    " + "\n    ".join(worst.get("stack", [])[-14:]) + "\n"
        )
    return out


def memory(reports: list[dict]) -> list[str]:
    out = []
    for r in reports:
        m = r.get("memory", {})
        curve = m.get("curve", [])
        out.append(
            f"## seed {r['seed']}: baseline {m.get('baseline_mib')} MiB, peak {m.get('peak_mib')} MiB at "
            f"{m.get('peak_t')} s (action {m.get('peak_action')}: {_short_action(_action(r, m.get('peak_action', -1)))}), "
            f"before the final checks {m.get('before_checks_mib')} MiB"
            + (f"; ABORTED: {r['aborted']}" if r.get("aborted") else "")
        )
        back = m.get("return_check") or {}
        if back:
            out.append(f"return check: {back.get('summary')} -> {'ok' if back.get('ok') else 'FAILED'}")
        for prev, point in itertools.pairwise(curve):
            if point["rss_mib"] - prev["rss_mib"] >= JUMP_MIB:
                a = _action(r, point["action"])
                out.append(
                    f"  +{point['rss_mib'] - prev['rss_mib']:.0f} MiB to {point['rss_mib']:.0f} at "
                    f"{point['t']} s after {_short_action(a)}"
                )
        for mark in m.get("high_water", []):
            out.append(
                f"  high-water {mark['rss_mib']:.0f} MiB at {mark['t']} s (action {mark['action']}), "
                "the window's largest arrays:"
            )
            out += [f"    {a['mib']:8.1f} MiB {a['shape']} {a['dtype']} {a['path']}" for a in mark["largest"]]
        out.append("")
    return out


def misc(reports: list[dict]) -> list[str]:
    out = []
    for r in reports:
        t = r.get("threads", {})
        k = r.get("known_input") or {}
        errors = [
            s
            for s in r.get("statuses", {})
            if not s.startswith("done in") and re.search(r"error|failed|not |cannot|can.t", s, re.I)
        ]
        out.append(
            f"## seed {r['seed']}: {r.get('actions_count', len(r.get('actions', [])))} actions, "
            f"{r.get('restarts', 0)} restarts, window built in {r.get('window_open_s')} (wall, cpu) s; "
            f"threads left {t.get('qthreads_left')} {t.get('python_left')}; known input: "
            f"{k.get('summary')}; crash: {r.get('crash') or 'no'}"
        )
        out += [f"  status: {s[:200]}" for s in errors[:60]]
        cov = r.get("coverage", {})
        out.append("  coverage: " + ", ".join(f"{k} {v['touched']}/{v['seen']}" for k, v in sorted(cov.items())))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak.summarize")
    p.add_argument("reports", nargs="+")
    args = p.parse_args(argv)
    reports = [load(path) for path in args.reports]
    for title, lines in (
        ("EXCEPTIONS", exceptions(reports)),
        ("STALLS (GUI-thread CPU at or over each report's stall limit)", stalls(reports)),
        ("MEMORY", memory(reports)),
        ("THREADS, KNOWN INPUT, STATUS ERRORS, COVERAGE", misc(reports)),
    ):
        print(f"\n# {title}\n")
        print("\n".join(lines) if lines else "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
