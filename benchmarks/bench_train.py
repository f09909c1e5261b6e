"""Benchmark: how fast the trainer forms induction heads, and what every task reaches.

    .venv/bin/python benchmarks/bench_train.py [--threads 1 2] [--max-steps 3000] [--skip-tasks]

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
import time

import torch

from attndesk.train import TrainConfig, Trainer
from attndesk.train.presets import PRESETS

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--skip-tasks", action="store_true")
    args = parser.parse_args()
    print(
        f"# bench_train: {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at the start"
    )
    induction_speed(args.threads, args.max_steps)
    torch.set_num_threads(1)
    one_layer(PRESETS["induction"].steps)
    if not args.skip_tasks:
        every_task()
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
