"""Long sequences with bounded memory (``make bench-long``): embed 512, 8 heads, padding mask, float32.

For L in 4096, 8192, 16384 it runs ``run_attention`` in a fresh subprocess per case (so each
peak RSS is that case's own, measured with ``resource.getrusage``) and prints: the plan, the
total time, the peak RSS beside what the full-matrix path would need, the longest stall of a
thread ticking every 5 ms beside the run (a stand-in for the window's event loop: the run holds
the GIL only in short stretches), and the time of an exact hover read-out. At L=4096 (where the
full path fits the budget) it times the full and the blocked path, as a ratio.

At L=16384 it also runs a sliding window of 512 tokens (Mistral-style), which computes only the
band: its time and memory beside global attention's, and the share of cells it computed.

Targets: L=16384 completes with peak RSS under 3 GiB; blocked <= 1.5x full at L=4096; an exact
hover read-out at L=16384 well under a second; the windowed run well under global attention's
time (O(L W) work, not O(L^2)).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from attndesk import set_torch_environment  # noqa: E402

set_torch_environment()  # before torch loads: importing attndesk sets nothing

EMBED, HEADS, MASK = 512, 8, "padding"
WINDOW = 512
LENGTHS = (4096, 8192, 16384)
GIB = 2**30


def _text(length: int) -> str:
    """About 90% real words, the rest padding (pad_to = length), so the padding mask matters."""
    import numpy as np

    from attndesk.runs.tokenizer import WordTokenizer

    words = WordTokenizer(16384).split(" ".join(_vocab_sample()))
    rng = np.random.default_rng(length)
    return " ".join(rng.choice(words, size=int(length * 0.9)))


def _vocab_sample() -> list[str]:
    from importlib import resources

    text = resources.files("attndesk.resources").joinpath("vocab.txt").read_text(encoding="utf-8")
    return [w for w in text.splitlines()[:5000] if w.isalpha()]


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def run_case(length: int, kind: str, repeats: int) -> dict:
    """One case in this (fresh) process; returns what the parent prints."""
    import numpy as np
    import torch

    from attndesk.attention.masks import visible_cells
    from attndesk.core import AttentionConfig, run_attention
    from attndesk.runs.memory import estimate_run
    from attndesk.runs.plan import plan_run

    config = AttentionConfig(
        embed_dim=EMBED,
        num_heads=HEADS,
        mask=MASK,
        pad_to=length,
        dtype="float32",
        window=WINDOW if kind == "window" else None,
    )
    text = _text(length)
    plan = plan_run(config, length, force=None if kind in ("auto", "ratio", "window") else kind)
    run_attention(config.replace(pad_to=64), "warm up the kernels")  # imports, model, thread pools
    base_rss = _rss_bytes()

    if kind == "ratio":  # full and blocked alternately in one process: fair under a varying load
        full_plan, blocked_plan = plan_run(config, length, force="full"), plan_run(config, length, force="pyramid")
        run_attention(config, text, plan=full_plan)
        run_attention(config, text, plan=blocked_plan)  # first touches of memory out of the way
        full_t, blocked_t = [], []
        for _ in range(repeats):
            for chosen, into in ((full_plan, full_t), (blocked_plan, blocked_t)):
                start = time.perf_counter()
                run_attention(config, text, plan=chosen)
                into.append(time.perf_counter() - start)
        return {
            "full": statistics.median(full_t),
            "blocked": statistics.median(blocked_t),
            "full_all": full_t,
            "blocked_all": blocked_t,
        }

    times, gaps, result = [], [], None
    for _ in range(repeats):
        result = None
        box: dict = {}

        def work(box: dict = box) -> None:
            box["result"] = run_attention(config, text, plan=plan)

        worker = threading.Thread(target=work)
        start = time.perf_counter()
        worker.start()
        last, longest = time.perf_counter(), 0.0
        while worker.is_alive():
            time.sleep(0.005)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        worker.join()
        times.append(time.perf_counter() - start)
        gaps.append(longest)
        result = box["result"]

    hover = []
    if result.exact is not None:
        rng = np.random.default_rng(0)
        for head in [*range(HEADS), "mean"] * 3:
            q, k = (int(i) for i in rng.integers(0, length, size=2))
            start = time.perf_counter()
            result.weight_at(head, q, k)
            hover.append(time.perf_counter() - start)
    estimate = estimate_run(config, length)
    return {
        "length": length,
        "kind": result.plan.kind,
        "plan": result.plan.describe(),
        "seconds": statistics.median(times),
        "all_seconds": times,
        "timings": result.timings,
        "overview_seconds": result.timings.get("overview", 0.0),
        "window": config.window,
        "cells": visible_cells(length, length, window=config.window) / length**2,
        "peak_rss": _rss_bytes(),
        "base_rss": base_rss,
        "plan_peak": result.plan.peak_bytes,
        "full_peak": estimate.peak_bytes,
        "full_weights": estimate.weights_bytes,
        "max_gap": max(gaps),
        "hover_median": statistics.median(hover) if hover else None,
        "hover_max": max(hover) if hover else None,
        "threads": torch.get_num_threads(),
    }


def _spawn(length: int, kind: str, repeats: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--case", str(length), kind, str(repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"case L={length} {kind} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def verdicts(cases: list, ratio: dict | None) -> list[str]:
    """One line per target: measured, the target, MET or MISSED."""
    lines = []
    if ratio is not None:
        r = ratio["blocked"] / ratio["full"]
        lines.append(
            f"blocked / full at L=4096: {r:.2f}x (medians of 5 alternating warm runs: blocked "
            f"{ratio['blocked']:.2f} s, full {ratio['full']:.2f} s; target <= 1.5x) "
            f"{'MET' if r <= 1.5 else 'MISSED'}"
        )
    longest = max((c for label, c in cases if label != "window"), key=lambda c: c["length"])
    windowed = next((c for label, c in cases if label == "window"), None)
    if windowed is not None and longest["length"] == windowed["length"]:
        r = windowed["seconds"] / longest["seconds"]
        lines.append(
            f"window {WINDOW} at L={windowed['length']}: {windowed['seconds']:.2f} s vs global "
            f"{longest['seconds']:.2f} s ({r:.2f}x; it computes {windowed['cells']:.1%} of the cells), "
            f"peak RSS {_gib(windowed['peak_rss'])} {'MET' if r < 0.5 else 'MISSED'} (target < 0.5x)"
        )
    if longest["length"] == 16384:
        rss = longest["peak_rss"]
        lines.append(
            f"peak RSS at L=16384: {_gib(rss)} (target < 3 GiB; the full path needs "
            f"{_gib(longest['full_peak'])}) {'MET' if rss < 3 * GIB else 'MISSED'}"
        )
        hover = longest["hover_max"]
        lines.append(
            f"exact hover read-out at L=16384: median {longest['hover_median'] * 1e3:.2f} ms, "
            f"max {hover * 1e3:.2f} ms (target well under 1 s) {'MET' if hover < 0.1 else 'MISSED'}"
        )
        lines.append(
            f"longest stall of a 5 ms ticker beside the L=16384 run: {longest['max_gap'] * 1e3:.0f} ms "
            f"(the window's own event-loop test lives with the app)"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs=3, metavar=("L", "KIND", "REPEATS"), help=argparse.SUPPRESS)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="comma-separated lengths")
    args = parser.parse_args()
    if args.case:
        length, kind, repeats = int(args.case[0]), args.case[1], int(args.case[2])
        print(json.dumps(run_case(length, kind, repeats)))
        return 0

    from attndesk.runs.config import default_memory_budget
    from attndesk.system.free_memory import format_bytes

    lengths = [int(x) for x in args.lengths.split(",")]
    print(
        f"attndesk long sequences: embed {EMBED}, {HEADS} heads, {MASK} mask, float32, "
        f"memory budget {format_bytes(default_memory_budget())}, {os.cpu_count()} CPU(s)"
    )
    cases, ratio = [], None
    for length in lengths:
        if length == 4096:
            cases.append(("full", _spawn(length, "full", 1)))
            cases.append(("blocked", _spawn(length, "pyramid", 1)))
            ratio = _spawn(length, "ratio", 5)
        else:
            cases.append(("auto", _spawn(length, "auto", 1)))
        if length == 16384:
            cases.append(("window", _spawn(length, "window", 1)))

    header = (
        f"{'L':>6}  {'path':<8} {'total s':>8} {'peak RSS':>10} {'(startup)':>10} "
        f"{'full path needs':>16} {'max stall':>10} {'hover':>9}"
    )
    # total s: one cold run in a fresh process (first touches of its memory included)
    print()
    print(header)
    print("-" * len(header))
    for _label, c in cases:
        hover = "-" if c["hover_median"] is None else f"{c['hover_median'] * 1e3:.2f} ms"
        kind = c["kind"] if c["window"] is None else f"win{c['window']}"
        print(
            f"{c['length']:>6}  {kind:<8} {c['seconds']:>8.2f} {_gib(c['peak_rss']):>10} "
            f"{_gib(c['base_rss']):>10} {_gib(c['full_peak']):>16} {c['max_gap'] * 1e3:>7.0f} ms {hover:>9}"
        )
    print()
    for _, c in cases:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in c["timings"].items() if k != "total")
        print(f"L={c['length']} {c['kind']}: {c['plan']}")
        print(f"    stages (s): {stages}; runs {[f'{t:.2f}' for t in c['all_seconds']]}")
    print()
    for line in verdicts(cases, ratio):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
