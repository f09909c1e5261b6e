"""Benchmark: the KV-cache lab's sweep on a 4k-token input, the retrieval heads' causal check and
the sink variants' first-token weight.

    .venv/bin/python benchmarks/bench_kvcache_lab.py [--tokens 4096] [--limit 300] [--skip-sweep]

1. Sweep: every policy (``POLICIES`` order, the oracle included) at 10 budgets (``default_budgets``),
   the input's last 32 tokens read as decode steps, for the ``needle`` preset (2 layers, RoPE, run
   past its training length: RoPE has no position table) and a random-weight Llama-shaped decoder
   (2 layers, width 64, 4 query heads, 2 K/V heads, built into a temporary folder). Each model's
   sweep stops once ``--limit`` seconds of this process's CPU time are spent (``process_time``: the
   other processes of a shared machine do not count); prints the points reached, the CPU seconds
   and the curves' rows.
2. Retrieval heads: the retrieval scores and the causal check for k = 1 .. 4 of the check's preset
   (``RETRIEVAL_PRESET``, ``needle-deep``) and of ``needle`` (top-k retrieval heads masked vs k random
   non-retrieval heads, as Wu et al. mask them: the query zeroed on the answer steps; 20 draws or
   every set).
3. Sinks: first-token weight per layer (mean over heads) and the softmax sink's share, for the
   ``needle``, ``needle-sink`` (learned sink logits) and ``needle-off-by-one`` presets, on 256
   fresh needle sequences.

Prints Markdown with the date, the machine and the load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from attndesk import set_torch_environment

set_torch_environment()

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _header() -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, ")
    print(
        f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads, load average {load}\n"
    )


def _llama(folder: Path, tokens: int):
    sys.path.insert(0, str(ROOT))
    from attndesk.models import load_pretrained
    from tests.pretrained_models import build

    build(
        "llama",
        folder,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=tokens,
    )
    config = folder / "tokenizer_config.json"  # the copied tokenizer says 512 tokens: this model reads more
    settings = json.loads(config.read_text(encoding="utf-8"))
    config.write_text(json.dumps(settings | {"model_max_length": tokens}), encoding="utf-8")
    return load_pretrained(str(folder))


def _sweep(label: str, model, ids: list[int], limit: float) -> None:
    from attndesk.kvcache import POLICIES, kv_model
    from attndesk.kvcache.model import CausalMemo
    from attndesk.kvcache.sweep import DECODE_ROWS, default_budgets, sweep

    budgets = default_budgets(len(ids) - DECODE_ROWS)
    memo = CausalMemo(kv_model(model))  # one prefill and one full run for the whole grid, as one sweep call
    start, wall, table = time.process_time(), time.perf_counter(), []
    for name in POLICIES:
        for budget in budgets:
            if time.process_time() - start > limit:
                break
            table += sweep(memo, ids, [name], [budget])
    spent, wall = time.process_time() - start, time.perf_counter() - wall
    print(
        f"### {label}: {len(ids)} tokens, {len(table)} of {len(POLICIES) * len(budgets)} points in {spent:.0f} s CPU "
        f"({wall:.0f} s wall)\n"
    )
    print("| policy | budget | KL mean | agree | kept | CPU s |")
    print("|---|---|---|---|---|---|")
    for row in table:
        print(
            f"| {row['policy']} | {row['budget']} | {row['kl_mean']:.4g} | {row['agree']:.3f} | "
            f"{row['kept']:.1f} | {row['seconds']:.1f} |"
        )
    print()


def _retrieval() -> None:
    from attndesk.kvcache.retrieval import RETRIEVAL_PRESET, ablation_check, retrieval_scores
    from attndesk.train.presets import load_preset

    for name in (RETRIEVAL_PRESET, "needle"):
        run = load_preset(name)
        print(f"### Retrieval heads ({name} preset)\n")
        print("scores [layer, head]:", np.array2string(retrieval_scores(run), precision=3), "\n")
        for k in range(1, run.cfg.heads + 1):
            check = ablation_check(run, k)
            print(f"- k={k}: {check.summary()}{' (met)' if check.passed else ''}")
        print()


def _sinks() -> None:
    from attndesk.kvcache.retrieval import needle_batch
    from attndesk.kvcache.sinks import sink_report, toy_activations
    from attndesk.train.presets import load_preset

    print("### Sink variants (first-token weight, mean over heads, per layer)\n")
    print("| preset | accuracy | layer 1 | layer 2 | softmax sink share (layer 1, 2) |")
    print("|---|---|---|---|---|")
    for name in ("needle", "needle-sink", "needle-off-by-one"):
        run = load_preset(name)
        batch = needle_batch(run)
        logits, weights, stream = toy_activations(run.model, batch.ids)
        report = sink_report(weights, stream[0])
        first = report.first_token.mean(axis=1)
        share = "-" if report.softmax_sink is None else ", ".join(f"{x:.3f}" for x in report.softmax_sink.mean(1))
        acc = run.task.accuracy(logits, batch)
        print(f"| {name} | {acc:.3f} | {first[0]:.3f} | {first[1]:.3f} | {share} |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--limit", type=float, default=300.0, help="CPU seconds per model's sweep")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--models", default="toy,llama", help="whose sweep: toy, llama or both")
    parser.add_argument("--skip-heads", action="store_true", help="leave out the retrieval and sink parts")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the shared machine: 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    _header()
    if not args.skip_heads:
        _retrieval()
        _sinks()
    if args.skip_sweep:
        return 0
    from attndesk.kvcache.model import TrainedKV
    from attndesk.train import make_task
    from attndesk.train.presets import load_preset

    models = args.models.split(",")
    run = load_preset("needle")
    toy = TrainedKV(run)
    toy.max_tokens = None  # RoPE: no position table limits the length
    per = 64
    sample = make_task(run.cfg.replace(seq_len=per)).sample(args.tokens // per, torch.Generator().manual_seed(0))
    if "toy" in models:
        _sweep("needle toy (2 layers, 4 heads, d 64)", toy, sample.ids.flatten().tolist(), args.limit)
    if "llama" not in models:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        llama = _llama(Path(tmp), args.tokens)
        ids = np.random.default_rng(0).integers(5, 1000, args.tokens).tolist()
        _sweep("random Llama (2 layers, width 64, 4 heads, 2 K/V heads)", llama, ids, args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
