"""Image maps of a vision transformer's run: where on the patch grid a prediction's evidence is, by
six definitions, one function each; every map is [rows, cols] (``head_maps``: [H, rows, cols]).

* ``head_maps``: each head's weights from one query token (the class token by default) onto the
  patches, at one layer.
* ``rollout_map``: rollout as vit-explain defines it (Gildenblat's vit_rollout.py): per layer, fuse
  the heads (mean, max or min), zero the lowest ``discard_ratio`` of the fused matrix (never entry
  [0, 0]), a = (fused + I) / 2, divide by ``a.sum(-1)`` broadcast over the last axis (column j by
  row j's sum: plain row normalisation whenever the rows sum to 1, as with mean fusion and nothing
  discarded), R = a @ R; the query's row over the patches, divided by its maximum.
* ``flow_map``: attention flow (Abnar & Zuidema, 2020; ``interp.flow``), the query's row.
* ``grad_rollout_map``: vit-explain's gradient-weighted rollout (vit_grad_rollout.py): per layer,
  mean over heads of A * dS/dA, negatives set to 0, the same discard (entry [0, 0] included), the
  same a and R; divided by its maximum.
* ``chefer_map``: attention x gradient (Chefer, Gur & Wolf, 2021, "Generic Attention-model
  Explainability"): R = I; per layer, Abar = mean over heads of (dS/dA * A) clamped at 0,
  R = R + Abar @ R; the query's row over the patches (raw, not rescaled).
* ``integrated_gradients_map``: integrated gradients (Sundararajan et al., 2017) of the score S on
  the processor's pixel values, from the processed black image, with Gauss-Legendre nodes; each
  patch's map value is the sum of its pixels' and channels' attributions.

S is the explained score: the top logit of a classifier (or the class ``target``), the length of
the pooled output of a bare tower (CLIP's, SigLIP's: they have no classes).

A model without a class token (SigLIP, Swin) has no class row: ``query=None`` (their default)
uses the mean over the patch rows instead, i.e. the map of the average patch. Swin's token grid
changes between stages (patch merging), so only ``head_maps`` (on its first stage, per window)
and integrated gradients apply to it; the layer-chaining maps refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attndesk.jobs import JobContext, job_context

from ..errors import ConfigError
from ..pretrained.backend import capturing
from ..pretrained.loader import LoadedModel
from ..pretrained.vision import (
    ImageInput,
    VisionCapture,
    VisionResult,
    forward,
    patch_size,
    pixel_values,
    read_image,
    score,
)
from .flow import attention_flow

HEAD_FUSIONS = ("mean", "max", "min")
MAPS = ("class token", "rollout", "attention flow", "gradient rollout", "attention x gradient", "integrated gradients")


def _query_row(matrix: np.ndarray, query: int | None, specials: int) -> np.ndarray:
    """[N] -> the query's row of [N, N] (None: the mean over the patch rows), patches only."""
    row = matrix[specials:].mean(axis=0) if query is None else matrix[int(query)]
    return row[specials:]


def _check_query(query: int | None, specials: int, length: int) -> None:
    if query is not None and not 0 <= int(query) < length:
        raise ConfigError(f"query token {query} out of range: the run has {length} tokens")
    if query is None and specials >= length:
        raise ConfigError("the run has no patch tokens")


def default_query(result: VisionResult) -> int | None:
    """The class token's index, or None (the mean patch) for a model without one."""
    return 0 if result.specials and result.tokens[0] == "[CLS]" else None


def head_maps(result: VisionResult, layer: int, query: int | None = 0) -> np.ndarray:
    """[H, rows, cols]: each head's weights from token ``query`` (None: the mean over the patch
    queries) onto the patches at ``layer``. Swin: the first stage's layers, weight only within
    the query's window."""
    weights = result.layer_weights(layer)  # [H, N, N]
    _check_query(query, result.specials, result.length)
    rows = weights[:, result.specials :].mean(axis=1) if query is None else weights[:, int(query)]
    return result.patch_map(rows[:, result.specials :]).astype(np.float32)


def _chained(result: VisionResult, what: str) -> np.ndarray:
    if result.window_weights is not None:
        raise ConfigError(
            f"{what} chains the layers' token x token matrices, and Swin's token grid changes between stages: "
            "use each head's window maps or integrated gradients"
        )
    return np.asarray(result.weights, dtype=np.float64)


def _fuse(weights: np.ndarray, head_fusion: str) -> np.ndarray:
    if head_fusion not in HEAD_FUSIONS:
        raise ConfigError(f"head fusion must be one of {', '.join(HEAD_FUSIONS)}, got {head_fusion!r}")
    if head_fusion == "max":
        return weights.max(axis=0)
    return weights.min(axis=0) if head_fusion == "min" else weights.mean(axis=0)


def _discard(fused: np.ndarray, ratio: float, keep_first: bool) -> np.ndarray:
    """The fused matrix with its lowest ``ratio`` of entries zeroed (entry [0, 0] kept if asked)."""
    if not 0.0 <= ratio < 1.0:
        raise ConfigError(f"discard ratio must lie in [0, 1), got {ratio}")
    flat = fused.ravel().copy()
    count = int(flat.size * ratio)
    if count:
        lowest = np.argsort(flat, kind="stable")[:count]
        if keep_first:
            lowest = lowest[lowest != 0]
        flat[lowest] = 0.0
    return flat.reshape(fused.shape)


def _vit_explain_step(fused: np.ndarray, result_matrix: np.ndarray) -> np.ndarray:
    a = (fused + np.eye(len(fused))) / 2.0
    a = a / a.sum(axis=-1)  # broadcast over the last axis, as the reference code does
    return a @ result_matrix


def _rescaled(row: np.ndarray) -> np.ndarray:
    top = float(row.max()) if row.size else 0.0
    return row / top if top > 0 else row


def rollout_map(
    result: VisionResult, *, query: int | None = 0, head_fusion: str = "mean", discard_ratio: float = 0.0
) -> np.ndarray:
    """[rows, cols]: attention rollout as vit-explain defines it (the module docstring)."""
    weights = _chained(result, "rollout")
    _check_query(query, result.specials, result.length)
    rolled = np.eye(result.length)
    for layer in weights:
        rolled = _vit_explain_step(_discard(_fuse(layer, head_fusion), discard_ratio, True), rolled)
    return result.patch_map(_rescaled(_query_row(rolled, query, result.specials)))


def flow_map(result: VisionResult, *, query: int | None = 0, ctx: JobContext | None = None) -> np.ndarray:
    """[rows, cols]: the attention flow into token ``query`` after the last layer from each patch
    (None: the mean of the flows into the patch tokens, one maximum-flow problem per patch)."""
    weights = _chained(result, "attention flow")
    _check_query(query, result.specials, result.length)
    rows = list(range(result.specials, result.length)) if query is None else [int(query)]
    flow = attention_flow(weights, rows=rows, tokens=result.tokens, ctx=job_context(ctx)).flow  # [len(rows), N]
    return result.patch_map(flow.mean(axis=0)[result.specials :])


@dataclass
class AttentionGradients:
    """Every layer's weights [L, H, N, N] and the score's gradient with respect to them."""

    weights: np.ndarray
    grads: np.ndarray
    score: float
    target: int | None  # the class explained (None: a bare tower's pooled length)
    label: str


def attention_gradients(model: LoadedModel, image: ImageInput, target: int | None = None) -> AttentionGradients:
    """One forward and backward pass: the weights and dS/dA of every layer (S: the module docstring)."""
    if model.vision is None:
        raise ConfigError(f"{model.name} is a text model: image maps need a vision model")
    if model.vision.windows:
        raise ConfigError(f"{model.name} attends in windows (Swin): the gradient maps chain one token grid")
    pixels = pixel_values(model, read_image(image))
    capture = VisionCapture(sites=model.sites, layers=model.layers, keep_tensors=True)
    with model._lock, torch.enable_grad(), capturing(capture):
        out = forward(model, pixels)
        value, chosen, label = _score(model, out, target)
        tensors = [capture.per_layer[n] for n in range(model.num_layers)]
        grads = torch.autograd.grad(value, tensors)
    stack = lambda ts: torch.cat([t.detach() for t in ts]).double().cpu().numpy()  # noqa: E731
    return AttentionGradients(stack(tensors), stack(grads), float(value.detach()), chosen, label)


def _score(model: LoadedModel, out, target: int | None) -> tuple[torch.Tensor, int | None, str]:
    logits = getattr(out, "logits", None)
    if logits is None:
        if target is not None:
            raise ConfigError(f"{model.name} has no classifier: it explains the length of its pooled output")
        return score(out), None, "pooled output length"
    classes = int(logits.shape[-1])
    chosen = int(logits[0].argmax()) if target is None else int(target)
    if not 0 <= chosen < classes:
        raise ConfigError(f"class {target} out of range: {model.name} has classes 0..{classes - 1}")
    id2label = getattr(model.model.config, "id2label", None) or {}
    return logits[0, chosen], chosen, str(id2label.get(chosen, f"LABEL_{chosen}"))


def grad_rollout_map(
    result: VisionResult, gradients: AttentionGradients, *, query: int | None = 0, discard_ratio: float = 0.0
) -> np.ndarray:
    """[rows, cols]: vit-explain's gradient-weighted rollout (the module docstring)."""
    _chained(result, "gradient rollout")
    _check_query(query, result.specials, result.length)
    rolled = np.eye(result.length)
    for attention, grad in zip(gradients.weights, gradients.grads, strict=True):
        fused = np.clip((attention * grad).mean(axis=0), 0.0, None)
        rolled = _vit_explain_step(_discard(fused, discard_ratio, False), rolled)
    return result.patch_map(_rescaled(_query_row(rolled, query, result.specials)))


def chefer_map(result: VisionResult, gradients: AttentionGradients, *, query: int | None = 0) -> np.ndarray:
    """[rows, cols]: attention x gradient relevance of Chefer et al. (the module docstring)."""
    _chained(result, "attention x gradient")
    _check_query(query, result.specials, result.length)
    relevance = np.eye(result.length)
    for attention, grad in zip(gradients.weights, gradients.grads, strict=True):
        relevance = relevance + np.clip(grad * attention, 0.0, None).mean(axis=0) @ relevance
    return result.patch_map(_query_row(relevance, query, result.specials))


@dataclass
class PixelAttribution:
    """Integrated gradients: ``map`` [rows, cols] (patch sums of ``pixels`` [C, H, W]), the score at
    the image and at the baseline, and how far the attributions' sum is from their difference."""

    map: np.ndarray
    pixels: np.ndarray
    score: float
    baseline_score: float
    completeness_error: float
    steps: int
    target: int | None
    label: str


def integrated_gradients_map(
    model: LoadedModel,
    image: ImageInput,
    *,
    target: int | None = None,
    steps: int = 32,
    ctx: JobContext | None = None,
) -> PixelAttribution:
    """Integrated gradients of the score on the pixel values, from the processed black image,
    summed per patch (the module docstring). ``steps`` Gauss-Legendre nodes, one pass each."""
    ctx = job_context(ctx)
    if model.vision is None:
        raise ConfigError(f"{model.name} is a text model: image maps need a vision model")
    if not 1 <= int(steps) <= 1024:
        raise ConfigError(f"integrated gradients take 1 to 1024 steps, got {steps}")
    picture = read_image(image)
    from PIL import Image

    x = pixel_values(model, picture).detach()
    x0 = pixel_values(model, Image.new("RGB", picture.size)).detach()
    nodes, node_weights = np.polynomial.legendre.leggauss(int(steps))
    alphas, scales = (nodes + 1.0) / 2.0, node_weights / 2.0  # on [0, 1]
    total = torch.zeros_like(x, dtype=torch.float64)
    with model._lock:
        with torch.inference_mode():
            value, chosen, label = _score(model, forward(model, x), target)
            at_image = float(value)
            at_base = float(_score(model, forward(model, x0), chosen)[0])
        for i, (alpha, scale) in enumerate(zip(alphas, scales, strict=True)):
            ctx.check()
            point = (x0 + float(alpha) * (x - x0)).requires_grad_(True)
            with torch.enable_grad():
                (grad,) = torch.autograd.grad(_score(model, forward(model, point), chosen)[0], point)
            total += float(scale) * grad.double()
            ctx.progress((i + 1) / len(alphas), f"integrated gradients: step {i + 1} of {len(alphas)}")
    pixels = ((x - x0).double() * total)[0].cpu().numpy()  # [C, H, W]
    difference = at_image - at_base
    error = abs(float(pixels.sum()) - difference) / max(abs(difference), 1e-12)
    patch = patch_size(model)
    summed = pixels.sum(axis=0)
    rows, cols = -(-summed.shape[0] // patch), -(-summed.shape[1] // patch)
    padded = np.zeros((rows * patch, cols * patch))
    padded[: summed.shape[0], : summed.shape[1]] = summed
    per_patch = padded.reshape(rows, patch, cols, patch).sum(axis=(1, 3))
    if not model.vision.windows:
        per_patch = per_patch[: summed.shape[0] // patch, : summed.shape[1] // patch]  # whole patches only
    return PixelAttribution(per_patch, pixels, at_image, at_base, error, int(steps), chosen, label)


__all__ = [
    "HEAD_FUSIONS",
    "MAPS",
    "AttentionGradients",
    "PixelAttribution",
    "attention_gradients",
    "chefer_map",
    "default_query",
    "flow_map",
    "grad_rollout_map",
    "head_maps",
    "integrated_gradients_map",
    "rollout_map",
]
