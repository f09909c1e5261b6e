"""attndesk's ``attend`` as transformers' attention implementation "attndesk".

transformers calls ``attndesk_attention(module, q, k, v, mask, ...)`` for every attention layer of
a model loaded with ``attn_implementation="attndesk"``; the matching mask function (registered
under the same name, built on transformers' boolean ``sdpa_mask``) hands it the causal,
sliding-window and padding masks as booleans (True = may attend). Every weight is computed by
``attndesk.attention.kernel.attend``.

What a forward pass records or changes is a ``Capture`` set for that pass with ``capturing``
(a context variable, so concurrent threads do not mix): each layer's weights copied into one
float32 array per part, the masks and windows the layers used, one layer's ``Intermediates``,
head ablation, a forced causal mask, unscaled scores, and layer-by-layer timing, progress and
cancellation through hooks on the layer modules. Without a capture the function just attends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np
import torch

from attndesk.attention.kernel import attend
from attndesk.attention.scoring import Scoring
from attndesk.attention.types import Intermediates
from attndesk.jobs import JobContext

IMPLEMENTATION = "attndesk"
PARTS = ("self", "decoder", "cross")


@dataclass(frozen=True)
class Site:
    """Where an attention module sits: its part ("self", "decoder", "cross"), layer and stack."""

    part: str
    layer: int
    stack: str = ""  # "" (one stack), "encoder" or "decoder": names the timing stages

    def stage(self) -> str:
        return f"{self.stack} layer {self.layer}".strip()


class ForwardClock:
    """Seconds per stage of one forward pass, split at the layer hooks; progress and cancel there."""

    def __init__(self, plan: tuple[str, ...], ctx: JobContext | None):
        self.plan, self.seconds = plan, {name: 0.0 for name in plan}
        self._ctx = ctx
        self._last = time.perf_counter()

    def check_cancel(self) -> None:
        if self._ctx is not None:
            self._ctx.check()

    def mark(self, stage: str) -> None:
        """The time since the previous mark was spent in ``stage``."""
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._last
        self._last = now
        if self._ctx is not None and stage in self.plan:
            self._ctx.progress((self.plan.index(stage) + 1) / len(self.plan), stage)
        self.check_cancel()

    def total(self) -> dict[str, float]:
        out = dict(self.seconds)
        out["total"] = sum(self.seconds.values())
        return out


def _numpy(t: torch.Tensor | None) -> np.ndarray | None:
    """The first batch item as float32 numpy (a copy: the tensor may be reused)."""
    if t is None:
        return None
    return t[0].detach().to("cpu", torch.float32).numpy().copy()


@dataclass
class Capture:
    """What one forward pass records and changes (see the module docstring).

    ``sites`` maps id(attention module) to its Site (None while discovering: every module
    that calls is recorded in ``calls``). ``layers`` is the layer count per part, sizing
    ``weights[part]`` [N, H, Lq, Lk]. ``last_row``: keep only each layer's last query row
    (``rows[part][layer]`` [H, Lk], the generation stepper). ``ablate`` maps (part, layer) to
    query heads whose context is zeroed. ``keep_layer``: the layer whose stages go to
    ``intermediates[part]``.
    """

    sites: Mapping[int, Site] | None
    layers: Mapping[str, int] = field(default_factory=dict)
    keep_weights: bool = True
    last_row: bool = False
    ablate: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    force_causal: bool = False
    unscaled: bool = False
    keep_layer: int | None = None
    clock: ForwardClock | None = None
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    rows: dict[str, list] = field(default_factory=dict)
    masks: dict[str, list] = field(default_factory=dict)
    windows: dict[str, list] = field(default_factory=dict)
    intermediates: dict[str, dict] = field(default_factory=dict)
    calls: list = field(default_factory=list)  # (module, Site | None, query heads, kv heads) per call
    scales: list = field(default_factory=list)  # the scale each layer was handed (None = 1/sqrt(d))
    flops: int = 0
    pending_raw: tuple | None = None  # (q, k) before the rotary embedding, from the patched helper

    def site(self, module) -> Site | None:
        return None if self.sites is None else self.sites.get(id(module))

    def wants_stages(self, site: Site | None) -> bool:
        return site is not None and self.keep_layer is not None and site.layer == self.keep_layer

    # -- hooks ------------------------------------------------------------------------------------
    def layer_start(self, site: Site) -> None:
        if self.clock is not None:
            self.clock.check_cancel()
            if site.layer == 0 and site.part != "cross":
                self.clock.mark("decoder embed" if site.stack == "decoder" else "embed")

    def layer_end(self, site: Site) -> None:
        if self.clock is not None:
            self.clock.mark(site.stage())

    def observe(self, site: Site, query: torch.Tensor, key: torch.Tensor) -> None:
        """The batch's Q [B, H, Lq, d] and K [B, KV, Lk, d] as the layer attends (after any rotary
        embedding); a subclass that samples vectors overrides it (the corpus atlas)."""

    def attended(self, site: Site, value: torch.Tensor, context: torch.Tensor) -> None:
        """The batch's V [B, KV, Lk, d_v] and the layer's context [B, H, Lq, d_v] (weights @ V, before
        any ablation); a subclass that compares outputs overrides it (the KV-cache runs)."""

    def attending(self, site: Site, query: torch.Tensor, key: torch.Tensor, mask, bias, scoring: Scoring) -> None:
        """The layer's Q and K (after any rotary embedding; ``pending_raw`` still holds them before
        it), its boolean mask and additive bias, and its ``Scoring``, just before ``attend``
        scores them (the score decomposition reads them here)."""

    def rotated(self, query: torch.Tensor, key: torch.Tensor, result, args: tuple, kwargs: dict):
        """What the patched ``apply_rotary_pos_emb`` returns for (query, key): ``result``, the
        modeling code's own, unless a subclass recomputes it (the score decomposition, in float64)."""
        return result

    def attention_io(self, site: Site, name: str, value) -> None:
        if self.wants_stages(site) and isinstance(value, torch.Tensor):
            self.intermediates.setdefault(site.part, {})[name] = _numpy(value)

    # -- the attention call -------------------------------------------------------------------------
    def adjust(self, site: Site, mask: torch.Tensor | None, lq: int, lk: int, scaling):
        """The forced causal mask (self-attention of a non-decoder) and the unscaled toggle."""
        if self.force_causal and site.part == "self":
            # query i (of the last lq positions) may see keys 0..(lk - lq + i)
            causal = torch.ones(lq, lk, dtype=torch.bool, device=mask.device if mask is not None else None)
            causal = causal.tril(diagonal=lk - lq)
            mask = causal if mask is None else mask & causal
        return mask, (1.0 if self.unscaled else scaling)

    def record(self, site: Site, weights: torch.Tensor, mask: torch.Tensor | None, window: int | None, d: int) -> None:
        heads, lq, lk = weights.shape[1:]
        self.flops += 4 * heads * lq * lk * d  # Q K^T and weights @ V
        n = self.layers.get(site.part, site.layer + 1)
        self._remember(self.windows, site, n, window)
        self._remember(self.masks, site, n, self._unique_mask(site.part, mask))
        if self.last_row:
            self._remember(self.rows, site, n, _numpy(weights[:, :, -1, :]))
        elif self.keep_weights:
            if site.part not in self.weights:
                self.weights[site.part] = np.empty((n, heads, lq, lk), dtype=np.float32)
            torch.from_numpy(self.weights[site.part][site.layer]).copy_(weights[0])

    @staticmethod
    def _remember(store: dict, site: Site, n: int, value) -> None:
        store.setdefault(site.part, [None] * n)[site.layer] = value

    def _unique_mask(self, part: str, mask: torch.Tensor | None) -> np.ndarray | None:
        """[Lq, Lk] bool of this layer; layers with equal masks share one array."""
        if mask is None:
            return None
        array = mask.reshape(-1, *mask.shape[-2:])[0].cpu().numpy()  # [.., Lq, Lk] -> the first [Lq, Lk]
        for seen in self.masks.get(part, ()):
            if seen is not None and seen.shape == array.shape and np.array_equal(seen, array):
                return seen
        return array.copy()


_ACTIVE: ContextVar[Capture | None] = ContextVar("attndesk_capture", default=None)


def active() -> Capture | None:
    """The capture of the forward pass running in this thread, if any."""
    return _ACTIVE.get()


@contextmanager
def capturing(capture: Capture) -> Iterator[Capture]:
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)


def _split_mask(attention_mask, position_bias):
    """(bool mask, additive bias): a float mask (a model building its own) is added to the scores."""
    mask, bias = attention_mask, position_bias
    if mask is not None and mask.dtype != torch.bool:
        bias = mask if bias is None else bias + mask
        mask = None
    return mask, bias


def _ablated(context: torch.Tensor, heads: tuple[int, ...]) -> torch.Tensor:
    context = context.clone()
    context[:, list(heads)] = 0.0  # [B, H, Lq, d]: those heads contribute nothing to the output projection
    return context


def attndesk_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    softcap=None,
    position_bias=None,
    sliding_window=None,
    s_aux=None,
    **_ignored,
):
    """transformers' attention interface: q [B, H, Lq, d], k/v [B, KV, Lk, d] -> ([B, Lq, H, d], weights).

    ``s_aux`` [H]: GPT-OSS's learned sink logits, one per head in the softmax's denominator.
    ``_ignored`` holds flags for other backends (output_attentions, use_cache, position_ids, ...).
    """
    capture = _ACTIVE.get()
    mask, bias = _split_mask(attention_mask, position_bias)
    drop = float(dropout) if module.training and dropout else None
    site = capture.site(module) if capture is not None else None
    if capture is not None and capture.sites is None:  # discovering which modules attend
        capture.calls.append((module, None, int(query.shape[1]), int(key.shape[1])))
    if site is None:
        scoring = Scoring.of(query.shape[-1], scale=scaling, softcap=softcap, sinks=s_aux)
        context, weights = attend(query, key, value, mask=mask, bias=bias, scoring=scoring, dropout=drop)
        return context.transpose(1, 2).contiguous(), weights
    assert capture is not None  # a site is one of the capture's
    capture.calls.append((module, site, int(query.shape[1]), int(key.shape[1])))
    capture.scales.append(scaling)
    capture.observe(site, query, key)
    mask, scale = capture.adjust(site, mask, query.shape[-2], key.shape[-2], scaling)
    keep: dict[str, torch.Tensor] | None = {} if capture.wants_stages(site) else None
    scoring = Scoring.of(query.shape[-1], scale=scale, softcap=softcap, sinks=s_aux)
    capture.attending(site, query, key, mask, bias, scoring)
    context, weights = attend(query, key, value, mask=mask, bias=bias, scoring=scoring, dropout=drop, keep=keep)
    window = sliding_window if sliding_window is not None else getattr(module, "sliding_window", None)
    capture.record(site, weights, mask, int(window) if window else None, int(query.shape[-1]))
    capture.attended(site, value, context)
    if keep is not None:
        raw = capture.pending_raw or (None, None)
        stages = {name: _numpy(t) for name, t in keep.items()}
        stages.update(q=_numpy(query), k=_numpy(key), v=_numpy(value), q_raw=_numpy(raw[0]), k_raw=_numpy(raw[1]))
        capture.intermediates.setdefault(site.part, {}).update(stages)
    capture.pending_raw = None
    heads = capture.ablate.get((site.part, site.layer))
    if heads:
        context = _ablated(context, heads)
    return context.transpose(1, 2).contiguous(), weights


def attndesk_mask(*args, **kwargs):
    """transformers' mask interface: always the boolean mask (never "skip, sdpa is causal itself")."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Register "attndesk" with transformers (idempotent; imports transformers)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, attndesk_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, attndesk_mask)


def patch_rotary(module_class: type) -> bool:
    """Record Q and K before the rotary embedding: wrap ``apply_rotary_pos_emb`` of the modeling
    module that defines ``module_class`` (the helper its attention calls just before the
    interface). The wrapper passes everything through unchanged. Returns whether there was one."""
    namespace = sys.modules.get(module_class.__module__)
    original = getattr(namespace, "apply_rotary_pos_emb", None)
    if namespace is None or original is None:
        return False
    if getattr(original, "_attndesk_wrapped", False):
        return True

    def apply_rotary_pos_emb(q, k, *args, **kwargs):
        capture = _ACTIVE.get()
        if capture is not None and capture.keep_layer is not None:
            capture.pending_raw = (q, k)
        result = original(q, k, *args, **kwargs)
        return result if capture is None else capture.rotated(q, k, result, args, kwargs)

    apply_rotary_pos_emb._attndesk_wrapped = True  # type: ignore[attr-defined]  # the mark that it is wrapped once
    setattr(namespace, "apply_rotary_pos_emb", apply_rotary_pos_emb)  # noqa: B010 - a module global mypy cannot see
    return True


def stage_intermediates(stages: Mapping[str, np.ndarray]) -> Intermediates:
    """A capture's stage arrays as the shared record (names outside it are dropped)."""
    names = set(Intermediates.names())
    return Intermediates.from_arrays({k: v for k, v in stages.items() if k in names and v is not None})


__all__ = [
    "IMPLEMENTATION",
    "PARTS",
    "Capture",
    "ForwardClock",
    "Site",
    "active",
    "attndesk_attention",
    "attndesk_mask",
    "capturing",
    "patch_rotary",
    "register",
    "stage_intermediates",
]
