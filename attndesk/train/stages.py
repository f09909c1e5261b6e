"""A trained decoder's attention as the toy views' result: every head of every layer on one input,
with every stage of each layer, so the heatmaps, the step-through, the head statistics, compare
and the online-softmax walk show trained weights as they show the toy model's random ones.

The heads of all layers are stacked in layer order (layer 0's heads first: head ``l * H + h`` is
layer ``l``'s head ``h``, labelled "L1 h2"). Per-head stages (Q, K, V, the scores through the
softmax, the context) are stacked the same way; the stages of one whole layer (its input, its
output) are kept only for a one-layer model, where they belong to every head. ``output`` is the
last layer's attention output. The result's ``AttentionConfig`` describes the stacked heads:
``num_heads`` = layers x heads, each head ``embed_dim / heads`` wide, a causal mask, the model's
position (learned positions, added to the embeddings, show as "none"), window, soft-cap and sink.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from attndesk.attention.masks import visible_cells
from attndesk.attention.types import LAYER_STAGES, Intermediates, head_name
from attndesk.runs.config import AttentionConfig
from attndesk.runs.result import AttentionResult

from .model import build_model
from .run import TrainRun

# every per-head stage the layers keep, stacked along the heads; not ALiBi's bias, whose formula in
# the step-through takes the slopes of the stacked config's heads, not of each layer's
HEAD_STAGES = tuple(name for name in Intermediates.names() if name not in LAYER_STAGES and name != "bias")
VIEW_POSITIONS = {"rope": "rope", "alibi": "alibi", "sinusoidal": "sinusoidal"}  # anything else: "none"


def head_labels(run: TrainRun) -> list[str]:
    """ "L0 H0", "L0 H1", ...: the stacked heads in layer order."""
    return [head_name(layer, h) for layer in range(run.cfg.layers) for h in range(run.cfg.heads)]


def view_config(run: TrainRun, weights: str) -> AttentionConfig:
    """The toy config that describes the stacked heads of ``run`` (``weights``: its source's name)."""
    cfg = run.cfg
    width = cfg.embed_dim // cfg.heads
    heads = cfg.layers * cfg.heads
    return AttentionConfig(
        weights_from=weights,
        embed_dim=heads * width,
        num_heads=heads,
        hidden_dim=width,
        mask="causal",
        position=VIEW_POSITIONS.get(cfg.position, "none"),
        kv_heads=None if cfg.kv_heads is None else cfg.layers * cfg.kv_heads,
        window=cfg.window,
        softcap=cfg.softcap,
        sink=cfg.sink,
        vocab_size=max(3, cfg.vocab),
        seed=cfg.seed,
        bias=True,
    )


def _stacked(keeps: list[dict], layers: int) -> dict[str, np.ndarray]:
    """The stages every layer kept, without the batch axis: per-head ones stacked along the heads."""
    stages = {}
    for name in HEAD_STAGES:
        if all(keep.get(name) is not None for keep in keeps):
            stages[name] = np.concatenate([keep[name][0].float().numpy() for keep in keeps])
    if layers == 1:
        stages.update({name: keeps[0][name][0].float().numpy() for name in LAYER_STAGES})
    return stages


def _mask(length: int, window: int | None) -> np.ndarray:
    """[L, L] True where query i may attend key j: j <= i (and i - j < window)."""
    i, j = np.indices((length, length))
    allowed = j <= i
    return allowed if window is None else allowed & (i - j < window)


def _attention_flops(cfg, length: int) -> int:
    """The attention layers' FLOPs on ``length`` tokens (as ``runs.memory.estimate_run`` counts
    them for one layer: the Q, K, V and output projections, QK^T and weights @ V over the cells the
    causal mask and the window leave, ~5 per cell for the softmax), summed over the layers."""
    e, h, d = cfg.embed_dim, cfg.heads, cfg.head_dim
    kv = (cfg.kv_heads or h) * d
    cells = h * visible_cells(length, length, causal=True, window=cfg.window)
    proj = 2 * length * e * h * d + 2 * 2 * length * e * kv
    out = 2 * length * h * d * e
    return int(cfg.layers * (proj + 2 * 2 * cells * d + 5 * cells + out))


def trained_result(run: TrainRun, weights: str, ids: torch.Tensor | None = None) -> AttentionResult:
    """Every head of ``run``'s model on ``ids`` [1, L] (default: the task's probe input), every stage kept."""
    ids = run.task.probe().ids[:1] if ids is None else run._check_ids(ids)[:1]
    keeps: list[dict] = [{} for _ in range(run.cfg.layers)]
    start = time.perf_counter()
    run.model.eval()
    with torch.no_grad():
        run.model(ids, keeps)
    seconds = time.perf_counter() - start
    stages = _stacked(keeps, run.cfg.layers)
    length = ids.shape[1]
    return AttentionResult(
        tokens=run.task.labels(ids[0]),
        token_ids=ids[0].numpy().astype(np.int64),
        weights=stages["weights"].astype(np.float32),
        output=keeps[-1]["output"][0].float().numpy(),
        timings={"attention": seconds, "total": seconds},
        flops=_attention_flops(run.cfg, length),
        peak_bytes=int(sum(a.nbytes for a in stages.values())),
        device="cpu",
        config=view_config(run, weights),
        mask=_mask(length, run.cfg.window),
        intermediates=Intermediates.from_arrays(stages),
    )


def initial_run(run: TrainRun) -> TrainRun:
    """``run``'s model before training: the weights its seed gives at step 0 (as the trainer starts)."""
    return TrainRun(run.cfg, run.task, build_model(run.cfg), step=0, status="new")
