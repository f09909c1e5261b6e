"""Run by the kvpress 0.5.5 environment's interpreter (not attndesk's): the keys each press keeps.

    python kvpress_reference.py REQUEST.json OUT.json

REQUEST: {"model": folder, "prompts": [[ids...], ...], "budgets": [b, ...], "window": w}. OUT:
{press: [[[kept positions per K/V head] per layer] per (prompt, budget)]} with the prompts outer and
the budgets inner. The compression ratio of budget b over a prompt of P tokens is the float nearest
1 - b / P for which kvpress keeps exactly b keys (int(P (1 - ratio)) == b). A pruned press's cache
holds copies of the kept keys: each is found in the uncompressed cache by exact equality. AdaKV
masks keys instead (``masked_key_indices``): the kept ones are the others.
"""

import json
import sys
from pathlib import Path

import kvpress
import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache


def ratio_for(prompt: int, budget: int) -> float:
    ratio = 1 - budget / prompt
    for _ in range(8):
        if int(prompt * (1 - ratio)) == budget:
            return ratio
        ratio = float(np.nextafter(ratio, 0.0))
    raise AssertionError(f"no ratio keeps {budget} of {prompt}")


def presses(ratio: float, window: int):
    return {
        "streaming": ("sdpa", kvpress.StreamingLLMPress(compression_ratio=ratio, n_sink=4)),
        "h2o": ("eager", kvpress.ObservedAttentionPress(compression_ratio=ratio)),
        "snapkv": ("sdpa", kvpress.SnapKVPress(compression_ratio=ratio, window_size=window, kernel_size=5)),
        "pyramidkv": ("sdpa", kvpress.PyramidKVPress(compression_ratio=ratio, window_size=window, kernel_size=5)),
        "adakv": ("sdpa", kvpress.AdaKVPress(kvpress.SnapKVPress(compression_ratio=ratio, window_size=window))),
        "tova": ("sdpa", kvpress.TOVAPress(compression_ratio=ratio)),
        "knorm": ("sdpa", kvpress.KnormPress(compression_ratio=ratio)),
        "keydiff": ("sdpa", kvpress.KeyDiffPress(compression_ratio=ratio)),
        "expected_attention": ("sdpa", kvpress.ExpectedAttentionPress(compression_ratio=ratio, n_sink=4)),
        "random": ("sdpa", kvpress.RandomPress(compression_ratio=ratio, seed=0)),
    }


def positions(kept: torch.Tensor, full: torch.Tensor) -> list[list[int]]:
    """kept [KV, n, d], full [KV, P, d] -> the positions of the kept rows, per K/V head."""
    out = []
    for head in range(full.shape[0]):
        same = (kept[head][:, None, :] == full[head][None, :, :]).all(-1)  # [n, P]
        assert bool((same.sum(-1) == 1).all()), "a kept key matches no single key of the full cache"
        out.append(sorted(int(j) for j in same.float().argmax(-1)))
    return out


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    models = {
        impl: AutoModelForCausalLM.from_pretrained(
            request["model"], attn_implementation=impl, dtype=torch.float32
        ).eval()
        for impl in ("sdpa", "eager")
    }
    names = list(presses(0.5, request["window"]))
    out: dict[str, list] = {name: [] for name in names}
    with torch.no_grad():
        for ids in request["prompts"]:
            tensor = torch.tensor([ids])
            full = {}  # each implementation's own uncompressed keys (a later layer's differ in the last bits)
            for impl, model in models.items():
                cache = DynamicCache()
                model(tensor, past_key_values=cache, use_cache=True)
                full[impl] = [layer.keys[0] for layer in cache.layers]
            for budget in request["budgets"]:
                for name, (impl, press) in presses(ratio_for(len(ids), budget), request["window"]).items():
                    model = models[impl]
                    cache = DynamicCache()
                    with press(model):
                        model(tensor, past_key_values=cache, use_cache=True)
                    if name == "adakv":
                        kept = []
                        for layer in model.model.layers:
                            _, heads, seq = layer.self_attn.masked_key_indices
                            mask = np.ones((full[impl][0].shape[0], len(ids)), bool)
                            mask[heads.numpy(), seq.numpy()] = False
                            kept.append([np.flatnonzero(m).tolist() for m in mask])
                    else:
                        kept = [positions(layer.keys[0], f) for layer, f in zip(cache.layers, full[impl])]
                    out[name].append(kept)
    Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
