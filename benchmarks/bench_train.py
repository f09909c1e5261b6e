"""Benchmark: how fast the trainer forms induction heads, and what every task reaches.

    .venv/bin/python benchmarks/bench_train.py [--threads 1 2] [--max-steps 3000] [--skip-tasks]
        [--repeat 3] [--threads-only]

0. Threads, alone and shared: 300 steps of the induction preset on 1 thread, on the count
   ``attndesk.system.threads`` chooses (``threads="auto"``) and on every core, first alone and then
   with two CPU-burning processes beside it (started for those runs, killed after); the rows in
   one rotation, ``--repeat`` rotations (median and range). Target: the chosen count beside two
   busy processes within 2.5x of its time alone.
1. Induction, the shipped preset's configuration (2 layers, attention only, d 64, 4 heads, RoPE,
   AdamW 3e-3, batch 64, seed 0): every 25 steps the model is evaluated on 256 fresh repeated
   random sequences (a stream the training never draws from); prints the training time (the
   evaluations excluded) and steps to an induction score >= 0.5 and to >= 90% accuracy on the
   repeated part, and steps/s, for each --threads count in turn (side by side in one run).
   Target: at most 3 minutes (goal: under one).
2. The two-layer mechanism: the same task with ONE layer for as many steps: its accuracy and best
   induction score (a single layer cannot compose a previous-token head with an induction head).
3. Every task with its configuration (the shipped presets, plus copy, sort and text, which ship
   none): the accuracy and pattern score reached on fresh sequences, steps and training time.

Prints Markdown tables with the date, the machine and the load average (other processes share
the CPU: say so next to the figures).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

from attndesk import set_torch_environment

set_torch_environment()  # before torch loads, as the command and the window do

import torch  # noqa: E402

from attndesk.system.threads import available_cores, busy_elsewhere  # noqa: E402
from attndesk.train import TrainConfig, Trainer  # noqa: E402
from attndesk.train.presets import PRESETS  # noqa: E402

THREAD_STEPS = 300
BUSY = 2  # CPU-burning processes beside the shared runs

FRESH_SEED = 987_654_321
EXTRA = {
    "copy": TrainConfig(task="copy", seed=0, steps=400, position="learned"),
    "sort": TrainConfig(task="sort", seed=0, steps=800, position="learned", mlp=True, layernorm=True),
    "text": TrainConfig(task="text", seed=0, steps=800, position="rope", mlp=True, layernorm=True),
}


def _timed_run(cfg: TrainConfig, every: int, stop_when=None):
    """Train ``cfg``, evaluating every ``every`` steps on fresh sequences; returns (rows, train_s)
    with rows (step, train_s, accuracy, best score, per-layer best scores)."""
    trainer = Trainer(cfg.replace(eval_every=10**9, probe_every_ms=10**9, checkpoint_every=10**9))
    fresh = trainer.task.sample(256, torch.Generator().manual_seed(FRESH_SEED))
    rows, train_s = [], 0.0
    steps = trainer.steps()
    while True:
        start = time.perf_counter()
        report = next(steps, None)
        train_s += time.perf_counter() - start
        if report is None:
            break
        if report.step % every == 0 or report.step == cfg.steps:
            m = trainer.run.evaluate(fresh)
            rows.append((report.step, train_s, m["accuracy"], m["pattern"], m["scores"].max(axis=1)))
            if stop_when is not None and stop_when(rows[-1]):
                break
    return rows, train_s


def _first(rows, test):
    return next(((step, seconds) for step, seconds, *rest in rows if test(rest)), None)


def induction_speed(threads: list[int], max_steps: int) -> None:
    print("\n## Induction preset: time to form induction heads\n")
    print("| threads | steps to score >= 0.5 | s | steps to accuracy >= 0.9 | s | steps/s |")
    print("|---|---|---|---|---|---|")
    for count in threads:
        torch.set_num_threads(count)
        cfg = PRESETS["induction"].replace(steps=max_steps)
        rows, train_s = _timed_run(cfg, 25, stop_when=lambda r: r[2] >= 0.9 and r[3] >= 0.5)
        score = _first(rows, lambda r: r[1] >= 0.5)
        accuracy = _first(rows, lambda r: r[0] >= 0.9)
        shown = [f"{s:,} | {t:.1f}" if s else "not reached | -" for s, t in (score or (0, 0), accuracy or (0, 0))]
        print(f"| {count} | {shown[0]} | {shown[1]} | {rows[-1][0] / train_s:.1f} |", flush=True)


def one_layer(steps: int) -> None:
    print("\n## One layer vs two (induction, attention only, same steps)\n")
    print("| layers | steps | accuracy on the repeat | best induction score | best per layer |")
    print("|---|---|---|---|---|")
    for layers in (1, 2):
        cfg = PRESETS["induction"].replace(layers=layers, steps=steps)
        rows, _ = _timed_run(cfg, steps)
        step, _, accuracy, best, per_layer = rows[-1]
        print(
            f"| {layers} | {step:,} | {accuracy:.3f} | {best:.3f} | {', '.join(f'{v:.2f}' for v in per_layer)} |",
            flush=True,
        )


def every_task() -> None:
    print("\n## Every task with its configuration (fresh sequences)\n")
    print("| task | configuration | steps | accuracy | pattern | score | train s |")
    print("|---|---|---|---|---|---|---|")
    for name, cfg in {**PRESETS, **EXTRA}.items():
        rows, train_s = _timed_run(cfg, cfg.steps)
        step, _, accuracy, best, _ = rows[-1]
        kind = "preset" if name in PRESETS else "bench only"
        shape = (
            f"{cfg.layers}L {cfg.heads}H d{cfg.embed_dim} {cfg.position}"
            f"{' +MLP' if cfg.mlp else ''}{' +LN' if cfg.layernorm else ''} ({kind})"
        )
        pattern = Trainer(cfg.replace(steps=1)).task.pattern
        print(
            f"| {cfg.task} | {shape} | {step:,} | {accuracy:.3f} | {pattern} | {best:.3f} | {train_s:.0f} |", flush=True
        )


@contextmanager
def busy_processes(count: int):
    """``count`` processes that each keep a core busy (a Python loop) while the block runs."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0)  # running before the measured run starts
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


def _steps_seconds(threads) -> tuple[float, list[int]]:
    """Seconds for THREAD_STEPS steps of the induction preset on ``threads`` (a count or "auto"),
    no evaluation, probe or checkpoint in between; and the count each step ran on."""
    cfg = PRESETS["induction"].replace(
        steps=THREAD_STEPS, eval_every=10**9, probe_every_ms=10**9, checkpoint_every=10**9
    )
    trainer = Trainer(cfg, threads=threads)
    assert trainer.threads is not None
    counts = []
    start = time.perf_counter()
    for _ in trainer.steps():
        counts.append(trainer.threads.count)
    return time.perf_counter() - start, counts


def thread_speed(repeat: int) -> None:
    cores = available_cores()
    print(f"\n## Threads: {THREAD_STEPS} induction steps, alone and beside {BUSY} busy processes\n")
    print(f"{cores} cores this process may use; other processes' load measured before each run (in cores).\n")
    rows = [(1, 0), ("auto", 0), (cores, 0), (1, BUSY), ("auto", BUSY), (cores, BUSY)]
    times: dict[tuple, list[float]] = {row: [] for row in rows}
    used: dict[tuple, set[int]] = {row: set() for row in rows}
    loads: dict[tuple, list[float]] = {row: [] for row in rows}
    _steps_seconds(1)  # warm-up: the first steps pay one-off costs
    for _ in range(repeat):
        for threads, busy in rows:
            if busy:
                with busy_processes(busy):
                    loads[(threads, busy)].append(busy_elsewhere())
                    seconds, counts = _steps_seconds(threads)
            else:
                time.sleep(1.0)  # the burners' time out of the next load measurement
                loads[(threads, busy)].append(busy_elsewhere())
                seconds, counts = _steps_seconds(threads)
            times[(threads, busy)].append(seconds)
            used[(threads, busy)].update(counts)
            print(f"  {threads} thread(s), {busy or 'no'} busy beside: {seconds:.1f} s", file=sys.stderr, flush=True)
    median = {row: statistics.median(v) for row, v in times.items()}
    print(
        "| threads | beside | threads used | others' load | s (median) | range | vs 1 thread alone | vs itself alone |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for threads, busy in rows:
        row = (threads, busy)
        label = "chosen" if threads == "auto" else str(threads)
        spread = f"{min(times[row]):.1f}-{max(times[row]):.1f}"
        print(
            f"| {label} | {busy or 'alone'} | {', '.join(map(str, sorted(used[row])))} | "
            f"{statistics.median(loads[row]):.1f} | {median[row]:.1f} | {spread} | "
            f"{median[row] / median[(1, 0)]:.2f}x | {median[row] / median[(threads, 0)]:.2f}x |",
            flush=True,
        )
    target = median[("auto", BUSY)] / median[("auto", 0)]
    print(f"\nchosen count beside {BUSY} busy processes: {target:.2f}x its time alone (target <= 2.5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--skip-tasks", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="rotations of the threads section (default 3)")
    parser.add_argument("--threads-only", action="store_true", help="only the threads section")
    args = parser.parse_args()
    print(
        f"# bench_train: {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at the start"
    )
    thread_speed(args.repeat)
    if not args.threads_only:
        induction_speed(args.threads, args.max_steps)
        torch.set_num_threads(1)
        one_layer(PRESETS["induction"].steps)
        if not args.skip_tasks:
            every_task()
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
