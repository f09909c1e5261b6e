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
uses the mean over the patch rows instead, i.e. the map of the average patch; SigLIP's own answer
to "what pools the image" is its attention-pooling head, whose probe's weights ``probe_maps``
gives per head (that head is outside the encoder's layers, so not in the chained maps). Swin's token grid
changes between stages (patch merging), so only ``head_maps`` (on its first stage, per window)
and integrated gradients apply to it; the layer-chaining maps refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from attndesk.attention.kernel import attend
from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.models.backend import capturing
from attndesk.models.loader import LoadedModel
from attndesk.models.vision import (
    ImageInput,
    VisionCapture,
    VisionResult,
    forward,
    patch_size,
    pixel_values,
    pooled_length,
    read_image,
)

from .flow import attention_flow

HEAD_FUSIONS = ("mean", "max", "min")
IG_BATCH = 8  # integrated gradients' points per forward and backward pass
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


def probe_maps(model: LoadedModel, result: VisionResult) -> np.ndarray:
    """[H, rows, cols]: SigLIP's attention-pooling head, each head's weights from its learned probe
    onto the patches (what pools the image into its embedding), computed by ``attend`` from the
    head's own projections of the last hidden state (after the tower's final layer norm)."""
    modules = dict(model.model.named_modules())
    pooling = next((m for m in modules.values() if type(m).__name__.endswith("AttentionPoolingHead")), None)
    norm = next((m for name, m in modules.items() if name.endswith("post_layernorm")), None)
    if pooling is None or norm is None or result.hidden_states is None:
        raise ConfigError(f"{model.name} has no attention-pooling head (SigLIP's probe): use the mean patch")
    mha = pooling.attention
    heads, width = int(mha.num_heads), int(mha.embed_dim)
    with torch.inference_mode():
        hidden = norm(torch.as_tensor(result.hidden_states[-1], device=model.device))  # [N, E]
        w_q, w_k, w_v = mha.in_proj_weight.split(width)
        b_q, b_k, b_v = mha.in_proj_bias.split(width)
        split = lambda t: t.reshape(1, -1, heads, width // heads).transpose(1, 2)  # noqa: E731  [1, H, L, d]
        q = split(pooling.probe[0] @ w_q.T + b_q)
        k, v = split(hidden @ w_k.T + b_k), split(hidden @ w_v.T + b_v)
        _, weights = attend(q, k, v)  # [1, H, 1, N]
    return result.patch_map(weights[0, :, 0].float().cpu().numpy())


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
        values, chosen, label = _scores(model, out, target)
        value = values[0]
        tensors = [capture.per_layer[n] for n in range(model.num_layers)]
        grads = torch.autograd.grad(value, tensors)
    stack = lambda ts: torch.cat([t.detach() for t in ts]).double().cpu().numpy()  # noqa: E731
    return AttentionGradients(stack(tensors), stack(grads), float(value.detach()), chosen, label)


def _scores(model: LoadedModel, out, target: int | None) -> tuple[torch.Tensor, int | None, str]:
    """([B] the explained score of each image, the class, its label); the class is ``target``, or
    the top class of the first image."""
    logits = getattr(out, "logits", None)
    if logits is None:
        if target is not None:
            raise ConfigError(f"{model.name} has no classifier: it explains the length of its pooled output")
        return pooled_length(out), None, "pooled output length"
    classes = int(logits.shape[-1])
    chosen = int(logits[0].argmax()) if target is None else int(target)
    if not 0 <= chosen < classes:
        raise ConfigError(f"class {target} out of range: {model.name} has classes 0..{classes - 1}")
    id2label = getattr(model.model.config, "id2label", None) or {}
    return logits[:, chosen], chosen, str(id2label.get(chosen, f"LABEL_{chosen}"))


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
    summed per patch (the module docstring). ``steps`` Gauss-Legendre nodes, ``IG_BATCH`` per pass."""
    ctx = job_context(ctx)
    if model.vision is None:
        raise ConfigError(f"{model.name} is a text model: image maps need a vision model")
    if not 1 <= int(steps) <= 1024:
        raise ConfigError(f"integrated gradients take 1 to 1024 steps, got {steps}")
    picture = read_image(image)

    x = pixel_values(model, picture).detach()
    x0 = pixel_values(model, Image.new("RGB", picture.size)).detach()
    nodes, node_weights = np.polynomial.legendre.leggauss(int(steps))
    alphas, scales = (nodes + 1.0) / 2.0, node_weights / 2.0  # on [0, 1]
    total = torch.zeros_like(x, dtype=torch.float64)
    with model._lock:
        with torch.inference_mode():
            values, chosen, label = _scores(model, forward(model, torch.cat([x, x0])), target)
            at_image, at_base = float(values[0]), float(values[1])
        for start in range(0, len(alphas), IG_BATCH):
            ctx.check()
            alpha = torch.as_tensor(alphas[start : start + IG_BATCH], dtype=x.dtype, device=x.device)
            points = (x0 + alpha[:, None, None, None] * (x - x0)).requires_grad_(True)
            with torch.enable_grad():
                (grad,) = torch.autograd.grad(_scores(model, forward(model, points), chosen)[0].sum(), points)
            weight = torch.as_tensor(scales[start : start + IG_BATCH], dtype=torch.float64, device=x.device)
            total += (weight[:, None, None, None] * grad.double()).sum(dim=0, keepdim=True)
            done = min(start + IG_BATCH, len(alphas))
            ctx.progress(done / len(alphas), f"integrated gradients: step {done} of {len(alphas)}")
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
    "probe_maps",
    "rollout_map",
]
