"""Activation patching of every head, batched (attndesk.interp) vs a naive loop, side by side.

    .venv/bin/python benchmarks/bench_interp.py [--layers 12] [--heads 12] [--tokens 20]

A random GPT-2-shaped model (12 layers, 12 heads, width 768, the packaged WordPiece vocabulary of
30522), built in a temp folder, and a clean/corrupted pair of 20 tokens (an IOI-style sentence
with the second name swapped). Every head's context (its slice of the output projection's input,
all positions) is patched from the clean run into the corrupted one:
- batched: ``activation_patching(sites=("head",))`` with the default memory budget, and again with
  a tight budget (64 MiB) that forces several passes;
- naive: one forward pass per head (batch 1), a plain torch pre-hook on that layer's ``c_proj``
  replacing the head's slice, the same last-position logits.
Time: wall clock of each, batched runs before and after the naive loop (median). Peak memory:
the process's peak resident set during a run minus its resident set before it (Linux VmHWM).
The effects of both are compared (max abs difference).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("GOMP_SPINCOUNT", "2000")  # before torch loads: see attndesk/attention/kernel.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_pretrained import peak_mib  # noqa: E402

from attndesk.interp import activation_patching  # noqa: E402
from attndesk.interp.anatomy import layer_parts  # noqa: E402
from attndesk.interp.inputs import hooks, last_logits, make_metric, prompt_pair  # noqa: E402
from attndesk.models import load_pretrained  # noqa: E402
from attndesk.runs.config import default_memory_budget  # noqa: E402
from attndesk.system.free_memory import format_bytes  # noqa: E402

CLEAN = "when mary and john went to the big store , john gave a drink to the girl named"
CORRUPT = "when mary and john went to the big store , mary gave a drink to the girl named"
TIGHT = 64 * 2**20


def naive(model, clean: str, corrupt: str, answer: str, wrong: str) -> np.ndarray:
    """[layers, heads] normalised effects, one forward pass per head."""
    metric = make_metric(model, "logit_diff", answer, wrong)
    a, b = prompt_pair(model, clean, corrupt)
    parts = layer_parts(model)["self"]
    saved: dict = {}
    with torch.inference_mode():
        with hooks({p.out_proj: (lambda m, x, n=p.layer: saved.__setitem__(n, x.clone())) for p in parts}):
            m_clean = float(metric(last_logits(model, a.ids))[0])
        m_corrupt = float(metric(last_logits(model, b.ids))[0])
        out = np.empty((len(parts), model.num_heads))
        for p in parts:
            d = p.head_dim
            for h in range(model.num_heads):

                def swap(m, x, h=h, z=saved[p.layer], d=d):
                    x = x.clone()
                    x[..., h * d : (h + 1) * d] = z[..., h * d : (h + 1) * d]
                    return x

                with hooks({p.out_proj: swap}):
                    out[p.layer, h] = float(metric(last_logits(model, b.ids))[0])
    return (out - m_corrupt) / (m_clean - m_corrupt)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    args = parser.parse_args(argv)
    import pretrained_models

    with tempfile.TemporaryDirectory() as folder:
        path = pretrained_models.build(
            "gpt2",
            os.path.join(folder, "gpt2"),
            n_embd=64 * args.heads,
            n_layer=args.layers,
            n_head=args.heads,
            n_positions=128,
        )
        model = load_pretrained(path)
    tokens = prompt_pair(model, CLEAN, CORRUPT)[0].length
    print(
        f"# {datetime.datetime.now():%Y-%m-%d %H:%M} {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    print(f"# random GPT-2-shaped: {args.layers} layers x {args.heads} heads, width {64 * args.heads}; {tokens} tokens")
    patch = lambda budget=None: activation_patching(model, CLEAN, CORRUPT, "mary", "john", memory_budget=budget)  # noqa: E731
    patch()  # warm-up
    first, t1 = timed(patch)
    reference, t_naive = timed(lambda: naive(model, CLEAN, CORRUPT, "mary", "john"))
    _, t2 = timed(patch)
    tight, t_tight = timed(lambda: patch(TIGHT))
    peak = peak_mib(patch)
    peak_tight = peak_mib(lambda: patch(TIGHT))
    batched = statistics.median([t1, t2])
    diff = float(np.abs(first.effects("head") - reference).max())
    print(
        f"batched (budget {format_bytes(default_memory_budget())}): {batched:.2f} s ({t1:.2f}, {t2:.2f}), "
        f"{first.forward_passes} pass(es) of {first.batch_rows} copies, estimate {format_bytes(first.pass_bytes)}, "
        f"peak +{peak:.0f} MiB"
    )
    print(
        f"batched (budget {format_bytes(TIGHT)}): {t_tight:.2f} s, {tight.forward_passes} passes of {tight.batch_rows} "
        f"copies, estimate {format_bytes(tight.pass_bytes)}, peak +{peak_tight:.0f} MiB"
    )
    print(f"naive, one head per forward: {t_naive:.2f} s, {args.layers * args.heads} passes")
    print(
        f"speed-up {t_naive / batched:.1f}x (tight budget {t_naive / t_tight:.1f}x); max |effect difference| {diff:.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
