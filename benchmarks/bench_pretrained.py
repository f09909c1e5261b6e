"""Real models through attndesk vs transformers' eager attention, same weights, side by side.

    .venv/bin/python benchmarks/bench_pretrained.py [--repeats 7] [--lengths 128 512] [--models minilm llama]

One row per model and length: a forward pass that returns every layer's attention weights
(float32 numpy [layers, heads, L, L]) and hidden states, from text:
- attndesk: ``run_pretrained(model, text)`` (transformers runs the model, attndesk's ``attend``
  computes every attention, each layer's weights are copied once into the result array);
- eager: the same checkpoint loaded with ``attn_implementation="eager"``, called with
  ``output_attentions=True, output_hidden_states=True``, its tuples stacked into numpy.
Time: medians of interleaved repeats (attndesk, eager, attndesk, ...), after a warm-up each;
"spread" is (max - min) / median of those repeats. Peak memory: the process's peak resident set during
one pass (reset just before it, after returning freed heap to the OS) minus its resident set
before it, median of 3 per side. Models: the packaged all-MiniLM-L6-v2 and a random 12-layer
LLaMA-shaped model (768 wide, 12 query heads sharing 4 K/V heads, RoPE), built in a temp folder.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
os.environ.setdefault("GOMP_SPINCOUNT", "2000")  # before torch loads: see attndesk/attention/kernel.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

from attndesk.models import load_pretrained, packaged_model_dir, run_pretrained  # noqa: E402
from attndesk.models.loader import transformers_offline  # noqa: E402

LLAMA = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
}
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "looked", "at", "dog"]


def text_of(tokenizer, tokens: int) -> str:
    """A text of exactly ``tokens`` tokens ([CLS] + words + [SEP] with the packaged tokenizer)."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(tokens - 2))
    assert len(tokenizer(text)["input_ids"]) == tokens
    return text


def eager_pass(model, tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    weights = np.stack([a[0].numpy() for a in out.attentions])  # [N, H, L, L]
    hidden = np.stack([h[0].numpy() for h in out.hidden_states])  # [N + 1, L, E]
    return weights, hidden


_LIBC = ctypes.CDLL("libc.so.6")


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_mib(fn) -> float:
    """Peak resident memory ``fn`` adds above the resident set before it (Linux: the peak is reset
    by writing 5 to /proc/self/clear_refs, then read back as VmHWM)."""
    gc.collect()
    _LIBC.malloc_trim(0)  # hand freed heap back to the OS, or a pass reusing it would show no peak
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_mib("VmRSS")
    fn()
    return _status_mib("VmHWM") - before


def compare(name: str, ours, eager, length: int, repeats: int) -> dict:
    text = text_of(ours.tokenizer, length)
    a = run_pretrained(ours, text)
    w, _hidden = eager_pass(eager, ours.tokenizer, text)
    diff = float(np.abs(a.weights - w).max())
    times = {"attndesk": [], "eager": []}
    calls = {"attndesk": lambda: run_pretrained(ours, text), "eager": lambda: eager_pass(eager, ours.tokenizer, text)}
    for _ in range(repeats):
        for key, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    spread = {k: (max(v) - min(v)) / med[k] for k, v in times.items()}
    peaks = {k: statistics.median(peak_mib(fn) for _ in range(3)) for k, fn in calls.items()}
    return {
        "model": name,
        "L": length,
        "ours": med["attndesk"],
        "eager": med["eager"],
        "spread_ours": spread["attndesk"],
        "spread_eager": spread["eager"],
        "peak_ours": peaks["attndesk"],
        "peak_eager": peaks["eager"],
        "diff": diff,
        "weights_mib": a.weights.nbytes / 2**20,
    }


def models(which: list[str], folder: str):
    import pretrained_models

    transformers_offline()
    if "minilm" in which:
        yield "all-MiniLM-L6-v2", load_pretrained(), pretrained_models.eager(packaged_model_dir())
    if "llama" in which:
        path = pretrained_models.build("llama", os.path.join(folder, "llama-12l"), **LLAMA)
        yield "LLaMA-shaped 12L (random)", load_pretrained(path), pretrained_models.eager(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed passes per side (interleaved; medians)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512], help="token counts")
    parser.add_argument("--models", nargs="+", default=["minilm", "llama"], choices=["minilm", "llama"])
    args = parser.parse_args(argv)
    print(f"pretrained benchmark: torch {torch.__version__}, {torch.get_num_threads()} threads, cpu float32")
    head = (
        f"{'model':<26} {'L':>5} {'attndesk ms':>11} {'eager ms':>9} {'ratio':>6} {'spread a/e':>11} "
        f"{'peak attndesk':>13} {'peak eager':>10} {'max |dw|':>9}"
    )
    print(head)
    print("-" * len(head))
    with tempfile.TemporaryDirectory() as folder:
        for name, ours, eager in models(args.models, folder):
            for length in args.lengths:
                r = compare(name, ours, eager, length, args.repeats)
                print(
                    f"{name:<26} {length:>5} {r['ours'] * 1e3:>11.1f} {r['eager'] * 1e3:>9.1f} "
                    f"{r['ours'] / r['eager']:>5.2f}x {r['spread_ours']:>5.0%}/{r['spread_eager']:<5.0%} "
                    f"{r['peak_ours']:>9.0f} MiB {r['peak_eager']:>6.0f} MiB {r['diff']:>9.1e}",
                    flush=True,
                )
            del ours, eager
    print("\nratio = attndesk / eager time (target <= 1.0x); peak = memory a pass adds (target attndesk <= eager);")
    print("max |dw| = the largest difference between the two sides' attention weights.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
