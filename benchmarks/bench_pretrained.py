"""Benchmark the pretrained encoder (all-MiniLM-L6-v2): load time, forward time at 16/128/512 tokens,
attndesk's encoder vs a plain-torch reference forward on the same weights, peak memory.

    .venv/bin/python benchmarks/bench_pretrained.py [--repeats 5] [--lengths 16 128 512]

The reference is written here with nothing from attndesk: explicit matmuls, softmax(QK^T/sqrt(d))V,
and it also materialises every layer's attention weights, so the ratio compares like with like.
A second reference uses torch's fused scaled_dot_product_attention (no weights), for scale.
Memory: the process's peak resident set (ru_maxrss) after each step, and the size of the
weights array a run hands to the window.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attndesk.core.errors import ConfigError  # noqa: E402
from attndesk.core.pretrained import clear_cache, encode, load_pretrained, run_pretrained  # noqa: E402
from attndesk.core.pretrained.checkpoint import expected_shapes, read_tensors  # noqa: E402


def peak_rss_mib() -> float:
    """Peak resident set of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


class Reference:
    """BERT written out by hand over the checkpoint's tensors (no attndesk modules)."""

    def __init__(self, tensors: dict[str, torch.Tensor], spec, fused: bool = False):
        self.t, self.spec, self.fused = tensors, spec, fused

    def _ln(self, x, name):
        return F.layer_norm(x, x.shape[-1:], self.t[name + ".weight"], self.t[name + ".bias"], self.spec.layer_norm_eps)

    def _dense(self, x, name):
        return F.linear(x, self.t[name + ".weight"], self.t[name + ".bias"])

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor):
        t, spec = self.t, self.spec
        length, h = ids.shape[0], spec.num_heads
        x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:length]
        x = self._ln(x + t["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        weights = []
        for n in range(spec.num_layers):
            p = f"encoder.layer.{n}."
            q, k, v = (self._dense(x, p + f"attention.self.{s}").view(length, h, -1).transpose(0, 1)
                       for s in ("query", "key", "value"))  # [H, L, d]
            if self.fused:
                ctx = F.scaled_dot_product_attention(q, k, v)
            else:
                a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)  # [H, L, L]
                weights.append(a)
                ctx = a @ v
            ctx = ctx.transpose(0, 1).reshape(length, -1)
            x = self._ln(x + self._dense(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            x = self._ln(x + self._dense(F.gelu(self._dense(x, p + "intermediate.dense")), p + "output.dense"),
                         p + "output.LayerNorm")
        return x, weights


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: allocator, kernels
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)  # best of: the least disturbed by other processes on a shared machine


def text_of(model, tokens: int) -> str:
    """A text that tokenizes to exactly ``tokens`` tokens ([CLS] + words + [SEP])."""
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "looked", "at", "dog"]
    text = " ".join(words[i % len(words)] for i in range(tokens - 2))
    assert len(encode(model, text).ids) == tokens
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per length (the best is reported)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 128, 512], help="token counts")
    args = parser.parse_args(argv)

    rss_start = peak_rss_mib()
    clear_cache()
    start = time.perf_counter()
    try:
        model = load_pretrained()
    except ConfigError as exc:
        print(f"bench_pretrained: {exc}", file=sys.stderr)
        return 1
    load_s = time.perf_counter() - start
    rss_loaded = peak_rss_mib()
    tensors = read_tensors(model.path, model.spec)
    assert set(tensors) == set(expected_shapes(model.spec))
    plain, fused = Reference(tensors, model.spec), Reference(tensors, model.spec, fused=True)
    params = sum(p.numel() for p in model.encoder.parameters())

    print(f"pretrained benchmark: {model.name}  ({model.num_layers} layers x {model.num_heads} heads, "
          f"{model.spec.hidden_size} dims, {params / 1e6:.1f} M parameters)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {model.device}, float32")
    print(f"load (cold: read safetensors, build encoder, tokenizer): {load_s * 1000:8.1f} ms   "
          f"peak RSS {rss_start:.0f} -> {rss_loaded:.0f} MiB")
    print()
    head = (f"{'tokens':>6}  {'attndesk ms':>11}  {'reference ms':>12}  {'ratio':>6}  {'sdpa ref ms':>11}  "
            f"{'max |dw|':>9}  {'weights MiB':>11}  {'peak RSS MiB':>12}")
    print(head)
    print("-" * len(head))
    for length in args.lengths:
        text = text_of(model, length)
        ids = torch.tensor(encode(model, text).ids)
        ours_s = timed(lambda: run_pretrained(model, text), args.repeats)
        ref_s = timed(lambda: plain(ids), args.repeats)
        sdpa_s = timed(lambda: fused(ids), args.repeats)
        result = run_pretrained(model, text)
        _, ref_w = plain(ids)
        diff = max(float((torch.from_numpy(result.weights[n]) - ref_w[n]).abs().max()) for n in range(len(ref_w)))
        print(f"{length:>6}  {ours_s * 1000:>11.2f}  {ref_s * 1000:>12.2f}  {ours_s / ref_s:>6.2f}  "
              f"{sdpa_s * 1000:>11.2f}  {diff:>9.1e}  {result.weights.nbytes / 2**20:>11.2f}  {peak_rss_mib():>12.0f}")
    print()
    print("attndesk ms: run_pretrained end to end (tokenize, 6 timed layers, pooling, numpy copies of all")
    print("weights and hidden states). ratio = attndesk / reference (plain torch, weights materialised).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
