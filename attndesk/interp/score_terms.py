"""Why a head attends where it does: one pre-softmax score split into (query-side component) x
(key-side component) terms over the residual stream's components, in float64.

The stream a layer reads is a sum of components: the embeddings (token, position, token type:
each its own), the output of every earlier head (its context through its slice of the output
projection), every earlier MLP's output, and one constant, ``bias`` (the output projections',
MLP-free biases and the norms' shifts, with the query/key projection's own bias on its side).
Once each norm's denominator is fixed at its value for the token, the norm is linear
(LayerNorm: g (x - mean x) / sigma + b; RMSNorm: g x / rms): every norm between the components
and the score (pre-norms, post-norms, sandwich norms, query/key norms) is folded with the scale
it has for that token, and its shift joins ``bias``. Queries and keys are then affine in the
components, q = sum_a q_a, k = sum_b k_b, and the score is exactly

    s = scale q . k + bias_ij = sum_ab scale q_a . k_b + bias_ij

Rows of ``kind`` "content" hold scale q_a . k_b before any rotary embedding; under RoPE the rows of
kind "rope" hold what the rotation adds to each pair (scale R_i q_a . R_j k_b - the content
term); an additive bias (ALiBi, T5's relative position bias) is one row of kind "position". A
soft-capped score is decomposed before the cap (``decomposed`` = scale q . k + bias, ``score`` =
C tanh(scale q . k / C) + bias, as ``attend`` orders them), and the result says so.

The toy mode's one-layer model (an ``AttentionConfig``: token embeddings, sinusoidal positions)
and trained toy decoders (``attndesk.train``) are decomposed from their weights directly. A
pretrained model (``load_pretrained``) is decomposed from a float64 copy through hooks: one pass
records every component and each norm's denominators, a second, batched pass feeds each
component alone (the others at zero, every norm at its recorded denominator) and reads the
target layer's queries and keys; the affine check (components + constant = the real run) guards
the result. The float64 copy computes every norm in float64 (some modeling code rounds its norm
through float32); ``score`` is attend's score in that copy.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from attndesk.attention.alibi import alibi_slopes, slope_bias
from attndesk.attention.kernel import attend
from attndesk.attention.masks import causal_mask
from attndesk.attention.positional import sinusoidal_encoding
from attndesk.attention.rope import apply_rope, rope_cos_sin
from attndesk.attention.scoring import Scoring
from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.models.backend import Capture, Site, capturing
from attndesk.models.loader import LoadedModel
from attndesk.models.run import forward_parameters
from attndesk.models.sites import layer_path
from attndesk.runs.config import AttentionConfig
from attndesk.runs.pipeline import _tokenize, build_model, run_attention

from .inputs import prompt, resolve_budget

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

BIAS = "bias"
POSITION = "position"
KINDS = ("content", "rope", "position")
TOLERANCE = 1e-9  # the terms' sum against the exact score, relative to max(1, |score|)
_PREFIX = {"self": "enc.", "decoder": "dec.", "cross": "cross."}
_OUT_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "o", "Wo", "out_lin")
_MLP_NAMES = ("mlp", "DenseReluDense", "feed_forward", "fc2", "ffn")
_BATCH = 64  # components per batched pass


@dataclass(frozen=True)
class ScoreTerms:
    """One score's decomposition. ``terms``: one row per (query_component, key_component, kind)
    with its ``term``, summing to ``decomposed``; ``score``: attend's pre-softmax score (equal to
    ``decomposed`` unless ``softcap``); ``components``: the stream's components in order (``bias``
    last)."""

    terms: pd.DataFrame
    score: float
    decomposed: float
    layer: int
    head: int
    query: int
    key: int
    scale: float
    components: tuple[str, ...]
    part: str = "self"
    softcap: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def error(self) -> float:
        """|sum of the terms - decomposed|."""
        return abs(float(self.terms["term"].sum()) - self.decomposed)

    def matrix(self) -> pd.DataFrame:
        """query component x key component, the kinds summed ("position" left out), in stream order."""
        pairs = self.terms[self.terms["kind"] != POSITION]
        table = pairs.pivot_table(
            index="query_component", columns="key_component", values="term", aggfunc="sum", fill_value=0.0
        )
        order = [c for c in self.components if c in table.index]
        return table.reindex(index=order, columns=[c for c in self.components if c in table.columns])


def score_terms(
    model,
    text_or_ids: str | Sequence[int],
    layer: int,
    head: int,
    query: int,
    key: int,
    *,
    part: str = "self",
    target: str | None = None,
    memory_budget: int | None = None,
    ctx: JobContext | None = None,
) -> ScoreTerms:
    """Head ``head`` of layer ``layer``'s pre-softmax score of query position ``query`` for key
    position ``key`` as (query component) x (key component) terms (see the module docstring).

    ``model``: the toy mode's ``AttentionConfig`` (text; layer 0), a trained toy run or its
    decoder (``text_or_ids``: token ids) or a loaded
    pretrained model (``text_or_ids``: text; an encoder-decoder reads ``part`` "self" (encoder),
    "decoder" or "cross", decoding ``target``; its float64 copy must fit ``memory_budget`` bytes,
    default the core's budget). A masked (query, key) pair is refused."""
    ctx = job_context(ctx)
    if isinstance(model, AttentionConfig):
        if not isinstance(text_or_ids, str):
            raise ConfigError("the toy model reads text")
        _check_index("layer", layer, 1)
        return _toy_layer_terms(model, text_or_ids, head, query, key)
    decoder = _decoder_of(model)
    if decoder is not None:
        if isinstance(text_or_ids, str):
            raise ConfigError("a trained toy model reads token ids, not text")
        return _decoder_terms(decoder, list(text_or_ids), layer, head, query, key)
    if isinstance(model, LoadedModel):
        if not isinstance(text_or_ids, str):
            raise ConfigError(f"{model.name} reads text: pass the prompt, not token ids")
        return _pretrained_terms(model, text_or_ids, layer, head, query, key, part, target, memory_budget, ctx)
    raise ConfigError(f"cannot decompose scores of a {type(model).__name__}: pass a trained run or a loaded model")


def _is_decoder(module) -> bool:
    """A trained toy decoder (``attndesk.train.model.Decoder``), known by its parts: the core does
    not import the trainer, which stands on it."""
    return isinstance(module, nn.Module) and all(hasattr(module, a) for a in ("cfg", "embed", "blocks", "unembed"))


def _decoder_of(model):
    if _is_decoder(model):
        return model
    inner = getattr(model, "model", None)
    return inner if _is_decoder(inner) else None


def _check_position(name: str, value: int, length: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < length:
        raise ConfigError(f"the {name} position must be 0..{length - 1}, got {value!r}")
    return int(value)


def _check_index(name: str, value: int, count: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < count:
        raise ConfigError(f"the {name} must be 0..{count - 1}, got {value!r}")
    return int(value)


def _frame(
    q_names: Sequence[str],
    q_raw: np.ndarray,
    k_names: Sequence[str],
    k_raw: np.ndarray,
    scale: float,
    rotated: tuple[np.ndarray, np.ndarray] | None,
    position: float | None,
    position_name: str,
) -> pd.DataFrame:
    """The terms table of per-component query [Nq, d] and key [Nk, d] vectors (float64)."""
    content = scale * (q_raw @ k_raw.T)
    qn, kn = (
        np.repeat(np.asarray(q_names, dtype=object), len(k_names)),
        np.tile(np.asarray(k_names, dtype=object), len(q_names)),
    )
    import pandas as pd

    frames = [pd.DataFrame({"query_component": qn, "key_component": kn, "kind": "content", "term": content.ravel()})]
    if rotated is not None:
        rope = scale * (rotated[0] @ rotated[1].T) - content
        frames.append(pd.DataFrame({"query_component": qn, "key_component": kn, "kind": "rope", "term": rope.ravel()}))
    if position is not None:
        frames.append(
            pd.DataFrame(
                {
                    "query_component": [position_name],
                    "key_component": [position_name],
                    "kind": [POSITION],
                    "term": [position],
                }
            )
        )
    table = pd.concat(frames, ignore_index=True)
    table["kind"] = pd.Categorical(table["kind"], categories=KINDS)
    return table


def _finish(
    table: pd.DataFrame,
    *,
    pre_cap: float,
    position: float,
    softcap: float | None,
    score: float,
    components: Sequence[str],
    notes: list[str],
    **where,
) -> ScoreTerms:
    decomposed = pre_cap + position
    if softcap is not None:
        notes.append(
            f"soft-capped at {softcap:g}: the terms sum to the score before the cap ({decomposed:.6g}); "
            f"attend scores C tanh(s / C) + bias = {score:.6g}"
        )
    result = ScoreTerms(
        table, score, decomposed, components=(*components, BIAS), softcap=softcap, notes=tuple(notes), **where
    )
    scale = max(1.0, abs(decomposed))
    if result.error > TOLERANCE * scale:  # the affine check: a piece the decomposition did not see
        raise ConfigError(
            f"the terms miss the score by {result.error:.3g}: this model has a piece between the "
            "residual stream and its queries/keys that is not linear once its norms are fixed"
        )
    return result


# -- trained toy decoders ------------------------------------------------------------------------


def _project_side(v: torch.Tensor, linear: nn.Linear, index: int, d: int) -> torch.Tensor:
    """Each component's share [N + 1, d] of head ``index``'s projection of the rows ``v`` [N + 1, E];
    the projection's bias joins the last row, the constant's."""
    out = v @ linear.weight[index * d : (index + 1) * d].T
    if linear.bias is not None:
        out[-1] += linear.bias[index * d : (index + 1) * d]
    return out


def _rotated(q: torch.Tensor, k: torch.Tensor, length: int, d: int, query: int, key: int) -> tuple:
    """The per-component queries and keys rotated by RoPE at their positions (numpy)."""
    cos, sin = rope_cos_sin(length, d, dtype=torch.float64)
    return apply_rope(q, cos[query], sin[query]).numpy(), apply_rope(k, cos[key], sin[key]).numpy()


def _check_decoder_cell(cfg, ids: list[int], layer: int, head: int, query: int, key: int) -> tuple[int, ...]:
    """(layer, head, query, key) checked against a trained decoder and its input ``ids``: the query
    must see the key."""
    layer = _check_index("layer", layer, cfg.layers)
    head = _check_index("head", head, cfg.heads)
    if not 1 <= len(ids) <= cfg.length or any(not 0 <= int(t) < cfg.vocab for t in ids):
        raise ConfigError(f"this model reads 1 to {cfg.length} token ids in 0..{cfg.vocab - 1}")
    query, key = _check_position("query", query, len(ids)), _check_position("key", key, len(ids))
    if key > query or (cfg.window is not None and query - key >= cfg.window):
        raise ConfigError(f"query {query} does not see key {key} in this causal model: there is no score to decompose")
    return layer, head, query, key


def _decoder_stream(m, ids_t: torch.Tensor, layer: int, mask, position: str):
    """(component names, components [N + 1, L, E] with the constant last, the stream [L, E]) that a
    trained decoder's ``layer`` reads: embeddings, each earlier head's output, each earlier MLP's."""
    cfg, length = m.cfg, ids_t.shape[1]
    names, parts = ["embed"], [m.embed(ids_t)[0]]
    if m.pos is not None:
        names.append("pos")
        parts.append(m.pos.weight[:length])
    elif cfg.position == "sinusoidal":
        names.append("pos")
        parts.append(m.sinusoid[:length])
    constant = torch.zeros_like(parts[0])
    x = torch.stack(parts).sum(0)
    for index in range(layer):
        block = m.blocks[index]
        h = x if block.ln1 is None else block.ln1(x)
        keep: dict = {}
        out, _ = block.attn(
            h[None],
            mask=mask,
            position=position,
            window=cfg.window,
            softcap=cfg.softcap,
            sinks=block.sinks,
            keep=keep,
        )
        context, proj, d = keep["context"][0], block.attn.out_proj, block.attn.head_dim
        for hh in range(cfg.heads):
            names.append(f"L{index}.H{hh}")
            parts.append(context[hh] @ proj.weight[:, hh * d : (hh + 1) * d].T)
        if proj.bias is not None:
            constant = constant + proj.bias
        x = x + out[0]
        if block.mlp is not None:
            y = block.mlp(x if block.ln2 is None else block.ln2(x))
            names.append(f"L{index}.MLP")
            parts.append(y)
            x = x + y
    stack = torch.cat([torch.stack(parts), constant[None]])  # [N + 1, L, E]
    assert torch.allclose(stack.sum(0), x, rtol=0, atol=1e-10), "the components sum to the stream"
    return names, stack, x


def _fold_layer_norm(v: torch.Tensor, ln, row: torch.Tensor) -> torch.Tensor:
    """The components ``v`` [N + 1, E] through a LayerNorm whose denominator is fixed at the stream
    ``row``'s; its shift joins the constant (the last row)."""
    sigma = torch.sqrt(((row - row.mean()) ** 2).mean() + ln.eps)
    v = (v - v.mean(-1, keepdim=True)) / sigma * ln.weight
    v[-1] += ln.bias
    return v


def _decoder_terms(decoder, ids: list[int], layer: int, head: int, query: int, key: int) -> ScoreTerms:
    m = copy.deepcopy(decoder).double().eval()
    cfg = m.cfg
    layer, head, query, key = _check_decoder_cell(cfg, ids, layer, head, query, key)
    length = len(ids)
    mask = causal_mask(length)
    position = cfg.position if cfg.position in ("rope", "alibi") else "none"
    with torch.no_grad():
        names, stack, x = _decoder_stream(m, torch.as_tensor([ids], dtype=torch.int64), layer, mask, position)
        block = m.blocks[layer]
        attn = block.attn
        d, group = attn.head_dim, head // (attn.heads // attn.kv_heads)
        keep: dict = {}
        h = x if block.ln1 is None else block.ln1(x)
        attn(
            h[None], mask=mask, position=position, window=cfg.window, softcap=cfg.softcap, sinks=block.sinks, keep=keep
        )
        score = float(keep["masked"][0, head, query, key])
        pre_cap = float(keep["scaled"][0, head, query, key])  # scale q . k of the real run

        def side(pos: int) -> torch.Tensor:  # [N + 1, E]: the components as the layer's norm sees them
            return stack[:, pos] if block.ln1 is None else _fold_layer_norm(stack[:, pos], block.ln1, x[pos])

        q, k = _project_side(side(query), attn.q_proj, head, d), _project_side(side(key), attn.k_proj, group, d)
        rotated = _rotated(q, k, length, d, query, key) if position == "rope" else None
        bias = 0.0
        if position == "alibi":
            bias = float(slope_bias(alibi_slopes(cfg.heads), length, length, dtype=torch.float64)[head, query, key])
    scale = 1.0 / math.sqrt(d)
    names_all = [*names, BIAS]
    table = _frame(
        names_all, q.numpy(), names_all, k.numpy(), scale, rotated, bias if position == "alibi" else None, "alibi"
    )
    return _finish(
        table,
        pre_cap=pre_cap,
        position=bias,
        softcap=cfg.softcap,
        score=score,
        components=names,
        notes=[],
        layer=layer,
        head=head,
        query=query,
        key=key,
        scale=scale,
    )


# -- the toy mode's one-layer model -----------------------------------------------------------------


def _check_toy_sees(config: AttentionConfig, text: str, query: int, key: int) -> None:
    """The toy mode's query must see the key under its mask and window."""
    mask = run_attention(config, text).mask
    window = config.window
    if (mask is not None and not bool(mask[query, key])) or (window is not None and abs(query - key) >= window):
        raise ConfigError(f"query {query} does not see key {key} under this mask: there is no score to decompose")


def _toy_layer_terms(config: AttentionConfig, text: str, head: int, query: int, key: int) -> ScoreTerms:
    """The toy mode's model (token embeddings + sinusoidal positions, one attention layer) on
    ``text``: components ``embed``, ``pos`` (sinusoidal positions) and ``bias``."""
    queries, _, _ = _tokenize(config, text, None)
    model = build_model(config, torch.device("cpu"))
    layer = copy.deepcopy(model.attention).double()
    head = _check_index("head", head, layer.heads)
    length = len(queries.ids)
    query, key = _check_position("query", query, length), _check_position("key", key, length)
    _check_toy_sees(config, text, query, key)
    with torch.no_grad():
        names, parts = ["embed"], [model.embedding.weight.double()[torch.tensor(queries.ids)]]
        if config.position == "sinusoidal":
            names.append("pos")
            parts.append(sinusoidal_encoding(length, config.embed_dim, dtype=torch.float64))
        x = torch.stack(parts).sum(0)
        stack = torch.cat([torch.stack(parts), torch.zeros_like(x)[None]])  # [N + 1, L, E]: the last the constant
        scale = layer.head_dim**-0.5 if config.scaled else 1.0
        rope = config.position == "rope"
        proj = layer.project(x[None], x[None], x[None], scale=scale, rope=rope, fold=False)
        scoring = config.scoring(proj.scale)
        keep: dict = {}
        attend(
            proj.q,
            proj.k,
            proj.v,
            scoring=Scoring(scale=proj.scale, softcap=scoring.softcap, slopes=scoring.slopes),
            keep=keep,
        )
        d, group = layer.head_dim, head // (layer.heads // layer.kv_heads)

        q, k = (
            _project_side(stack[:, query], layer.q_proj, head, d),
            _project_side(stack[:, key], layer.k_proj, group, d),
        )
        rotated = _rotated(q, k, length, d, query, key) if rope else None
        bias = (
            0.0
            if scoring.slopes is None
            else float(slope_bias(scoring.slopes, length, length, dtype=torch.float64)[head, query, key])
        )
    names_all = [*names, BIAS]
    position = bias if scoring.slopes is not None else None
    table = _frame(names_all, q.numpy(), names_all, k.numpy(), proj.scale, rotated, position, "alibi")
    return _finish(
        table,
        pre_cap=float(keep["scaled"][0, head, query, key]),
        position=bias,
        softcap=scoring.softcap,
        score=float(keep["masked"][0, head, query, key]),
        components=names,
        notes=[],
        layer=0,
        head=head,
        query=query,
        key=key,
        scale=proj.scale,
    )


# -- pretrained models -----------------------------------------------------------------------------


class _Stop(Exception):
    """Raised at the target layer's scores: nothing after them is needed."""


@dataclass
class _ScoreCapture(Capture):
    target: Site | None = None
    seen: list = field(default_factory=list)
    found: tuple | None = None

    def wants_stages(self, site) -> bool:
        return False

    def rotated(self, query, key, result, args, kwargs):
        """The rotation again in float64 when the modeling code rounds it through float32 (the
        rotate-half layout, a partial rotary width allowed); the model's own where it differs."""
        cos, sin = (args[0], args[1]) if len(args) >= 2 else (kwargs.get("cos"), kwargs.get("sin"))
        if not isinstance(cos, torch.Tensor) or not isinstance(sin, torch.Tensor) or query.dtype != torch.float64:
            return result
        if cos.dim() == query.dim() - 1:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        width = cos.shape[-1]
        exact = []
        for t, theirs in zip((query, key), result):
            rot, rest = t[..., :width], t[..., width:]
            half = width // 2
            turned = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
            mine = torch.cat([rot * cos.double() + turned * sin.double(), rest], dim=-1)
            if mine.shape != theirs.shape or not torch.allclose(mine, theirs.double(), rtol=1e-5, atol=1e-6):
                return result
            exact.append(mine.to(theirs.dtype))
        return tuple(exact)

    def attending(self, site, query, key, mask, bias, scoring) -> None:
        self.seen.append(site)
        if site == self.target:
            self.found = (query, key, self.pending_raw, mask, bias, scoring)
            raise _Stop


@dataclass
class _Norm:
    """A norm module as g (x - [mean x]) / sqrt(mean(.^2) + eps) + b over its last axis."""

    weight: torch.Tensor
    shift: torch.Tensor
    centred: bool
    eps: float

    def sigma(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((self.centre(x) ** 2).mean(-1, keepdim=True) + self.eps)

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-1, keepdim=True) if self.centred else x


def _is_norm(module: nn.Module) -> bool:
    if next(module.children(), None) is not None:
        return False
    return isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower()


def _norm_of(module: nn.Module, width: int) -> _Norm:
    """g, b, centring and eps of a norm module, read by probing it (so (1 + w) scales, weightless
    norms, a hard-coded eps and float32 rounding inside need no per-family table)."""
    probe = torch.ones(1, width, dtype=torch.float64)
    probe[:, 1::2] = -1.0
    small = 0.01
    dtype = next((p.dtype for p in module.parameters()), torch.float64)

    def apply(x: torch.Tensor) -> torch.Tensor:  # in the module's own precision
        return module(x.to(dtype)).double()

    with torch.no_grad():
        centred = bool(torch.allclose(apply(probe + 3.0), apply(probe), atol=1e-6))
        up, down = apply(probe), apply(-probe)
        low = (apply(small * probe) - apply(-small * probe))[0]
    attribute = next(
        (
            getattr(module, a)
            for a in ("eps", "variance_epsilon", "epsilon")
            if isinstance(getattr(module, a, None), float)
        ),
        None,
    )
    base = _Norm(torch.ones(width, dtype=torch.float64), torch.zeros(width, dtype=torch.float64), centred, 0.0)
    spread = float((base.centre(probe) ** 2).mean())
    if attribute is None:  # from how the output shrinks with a small input: r = t sqrt(m + e) / sqrt(t^2 m + e)
        gap = (up - down)[0]
        use = gap.abs() > 1e-12
        r = float((low[use] / gap[use]).mean()) if bool(use.any()) else 1.0
        attribute = max(0.0, small**2 * spread * (1 - r**2) / (r**2 - small**2)) if r**2 > small**2 else 0.0
    norm = _Norm(base.weight, base.shift, centred, float(attribute))
    n = norm.centre(probe) / norm.sigma(probe)
    gain, shift = ((up - down) / (2 * n))[0], ((up + down) / 2)[0]
    return _Norm(_exact(module, "weight", gain), _exact(module, "bias", shift), centred, float(attribute))


def _exact(module: nn.Module, name: str, probed: torch.Tensor) -> torch.Tensor:
    """The module's own parameter (or 1 + it, Gemma's gain) in float64 where the probe found it
    (within a float32 module's rounding): the probe's value otherwise."""
    param = getattr(module, name, None)
    if isinstance(param, torch.Tensor) and param.shape == probed.shape:
        exact = param.detach().double()
        for candidate in (exact, 1.0 + exact):
            if torch.allclose(candidate, probed, rtol=1e-4, atol=1e-5):
                return candidate
    return probed


class _Decomposer:
    """The hooks of the two passes over a float64 copy (see the module docstring)."""

    def __init__(self, model: LoadedModel, copy_: nn.Module, sites: dict[int, Site]):
        self.model, self.copy, self.sites = model, copy_, sites
        self.enc_dec = model.family == "encoder-decoder"
        modules = dict(copy_.named_modules())
        self.norms = {id(m): m for m in modules.values() if _is_norm(m)}
        self.norm_info: dict[int, _Norm] = {}
        self.probing = False
        self.embeddings = [
            (name, m)
            for name, m in modules.items()
            if isinstance(m, nn.Embedding) and "relative_attention_bias" not in name
        ]
        self.heads: list[tuple[Site, nn.Module, bool]] = []  # (site, module, is the output projection)
        self.mlps: list[tuple[str, nn.Module]] = []
        seen_mlp: set[int] = set()
        for name, module in modules.items():
            site = sites.get(id(module))
            if site is None:
                continue
            children = dict(module.named_children())
            out = next((children[n] for n in _OUT_NAMES if n in children), None)
            self.heads.append((site, out if out is not None else module, out is not None))
            located = layer_path(name)
            if located is None:
                continue
            mlp = _mlp(modules[located[0]])
            if mlp is not None and id(mlp) not in seen_mlp:
                seen_mlp.add(id(mlp))
                stack = ("enc." if site.part == "self" else "dec.") if self.enc_dec else ""
                self.mlps.append((f"{stack}L{site.layer}.MLP", mlp))
        self.mode = "record"
        self.names: list[str] = []
        self.keys: dict[tuple[int, int], int] = {}  # (id(module), call) -> component
        self.recorded: dict[int, torch.Tensor] = {}
        self.sigmas: dict[tuple[int, int], torch.Tensor] = {}
        self.calls: dict[int, int] = {}
        self.alpha: torch.Tensor | None = None
        self.capture: _ScoreCapture | None = None

    # -- hooks --------------------------------------------------------------------------------
    def _call(self, module) -> int:
        n = self.calls.get(id(module), 0)
        self.calls[id(module)] = n + 1
        return n

    def _component(self, module, call: int, name: Callable[[], str]) -> int | None:
        key = (id(module), call)
        if self.mode == "record":
            self.keys[key] = len(self.names)
            self.names.append(name())
        return self.keys.get(key)

    @staticmethod
    def _scaled(recorded: torch.Tensor, alpha: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The recorded output times each batch row's factor ``alpha`` [B], shaped as the module's
        output ``like`` (or broadcastable to it, as a position table is)."""
        batch = alpha.shape[0]
        if recorded.dim() >= 2 and recorded.shape[0] == 1:
            scaled = alpha.view(batch, *([1] * (recorded.dim() - 1))) * recorded
        else:
            scaled = alpha.view(batch, *([1] * recorded.dim())) * recorded[None]
        return scaled.reshape(like.shape) if scaled.numel() == like.numel() else scaled

    def _embedding_hook(self, name: str):
        def hook(module, args, output):
            call = self._call(module)
            index = self._component(module, call, lambda: self._embedding_name(name))
            return self._replace(index, output)

        return hook

    def _embedding_name(self, name: str) -> str:
        leaf = name.split(".")[-1].lower()
        kind = "pos" if "pos" in leaf or leaf == "wpe" else "token_type" if "type" in leaf else "embed"
        if self.enc_dec:
            encoder_done = self.capture is not None and any(s.part == "self" for s in self.capture.seen)
            kind = ("dec." if encoder_done else "enc.") + kind
        name, n = kind, 1
        while name in self.names:  # every component named once
            n += 1
            name = f"{kind}.{n}"
        return name

    def _mlp_hook(self, name: str):
        def hook(module, args, output):
            call = self._call(module)
            index = self._component(module, call, lambda: name)
            first = output[0] if isinstance(output, tuple) else output
            new = self._replace(index, first)
            return (new, *output[1:]) if isinstance(output, tuple) else new

        return hook

    def _replace(self, index: int | None, output: torch.Tensor) -> torch.Tensor:
        if index is None:
            return output
        if self.mode == "record":
            self.recorded[index] = output.detach().clone()
            return output
        assert self.alpha is not None
        return self._scaled(self.recorded[index], self.alpha[:, index], output)

    def _head_value(self, site: Site, module, z: torch.Tensor) -> torch.Tensor:
        call = self._call(module)
        heads = self.model.num_heads
        prefix = _PREFIX[site.part] if self.enc_dec else ""
        first = self._component(module, call, lambda: f"{prefix}L{site.layer}.H0")
        if self.mode == "record":
            for h in range(1, heads):
                self.names.append(f"{prefix}L{site.layer}.H{h}")
            assert first is not None
            self.recorded[first] = z.detach().clone()
            return z
        assert self.alpha is not None and first is not None
        width = z.shape[-1] // heads
        cols = self.alpha[:, first : first + heads].repeat_interleave(width, dim=1)  # [B, H d]
        recorded = self.recorded[first]
        scaled = cols.view(cols.shape[0], *([1] * (recorded.dim() - 1)), -1) * recorded
        return scaled.reshape(z.shape) if scaled.numel() == z.numel() else scaled

    def _head_pre(self, site: Site):
        def hook(module, args):
            return (self._head_value(site, module, args[0]), *args[1:])

        return hook

    def _head_post(self, site: Site):
        def hook(module, args, output):
            first = output[0] if isinstance(output, tuple) else output
            new = self._head_value(site, module, first)
            return (new, *output[1:]) if isinstance(output, tuple) else new

        return hook

    def _norm_hook(self, module, args, output):
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not isinstance(output, torch.Tensor):
            return None
        if self.probing:  # the probe's own calls of the module
            return None
        info = self.norm_info.get(id(module))
        if info is None:
            self.probing = True
            try:
                info = self.norm_info[id(module)] = _norm_of(module, int(x.shape[-1]))
            finally:
                self.probing = False
        call = self._call(module)
        if self.mode == "record":
            sigma = info.sigma(x)
            self.sigmas[(id(module), call)] = sigma
            folded = info.weight * info.centre(x) / sigma + info.shift
            if not torch.allclose(folded, output.double(), rtol=1e-4, atol=1e-4 * max(1.0, float(output.abs().max()))):
                raise ConfigError(
                    f"{type(module).__name__} is not a LayerNorm/RMSNorm over its last axis: its scale cannot be folded"
                )
            return folded.to(output.dtype)
        sigma = self.sigmas[(id(module), call)]
        if sigma.shape[0] not in (1, x.shape[0]):  # a pass that flattens batch and positions (OPT)
            sigma = sigma.repeat(x.shape[0] // sigma.shape[0], *([1] * (sigma.dim() - 1)))
        return (info.weight * info.centre(x) / sigma + info.shift).to(output.dtype)

    # -- the passes ------------------------------------------------------------------------------
    def run(self, kwargs: dict, target: Site) -> tuple:
        self.calls = {}
        self.capture = _ScoreCapture(
            sites=self.sites, layers=dict(self.model.layers), keep_weights=False, keep_layer=target.layer, target=target
        )
        handles = [m.register_forward_hook(self._norm_hook) for m in self.norms.values()]
        handles += [m.register_forward_hook(self._embedding_hook(name)) for name, m in self.embeddings]
        handles += [m.register_forward_hook(self._mlp_hook(name)) for name, m in self.mlps]
        for site, module, is_proj in self.heads:
            if is_proj:
                handles.append(module.register_forward_pre_hook(self._head_pre(site)))
            else:
                handles.append(module.register_forward_hook(self._head_post(site)))
        try:
            with torch.inference_mode(), capturing(self.capture):
                try:
                    self.copy(**kwargs)
                except _Stop:
                    pass
        finally:
            for handle in handles:
                handle.remove()
        if self.capture.found is None:
            raise ConfigError(f"the forward pass never reached {target.part} layer {target.layer}")
        return self.capture.found


def _mlp(block: nn.Module) -> nn.Module | None:
    for wanted in _MLP_NAMES:
        for name, module in block.named_modules():
            if name.split(".")[-1] == wanted:
                return module
    children = dict(block.named_children())
    if "intermediate" in children and "output" in children:  # BERT-style: the output block's dense
        return getattr(children["output"], "dense", None)
    return None


_COPIES: dict[int, tuple[nn.Module, dict[int, Site], threading.Lock]] = {}
_COPIES_LOCK = threading.Lock()


def _float64_copy(model: LoadedModel, budget: int) -> tuple[nn.Module, dict[int, Site], threading.Lock]:
    """One float64 copy per model (the latest one asked for), its sites by the copy's modules;
    refused in one line when the copy alone would not fit the memory budget."""
    need = 8 * sum(p.numel() for p in model.model.parameters())
    if need > budget:
        raise ConfigError(
            f"the score decomposition works on a float64 copy of {model.name}: {need / 2**30:.1f} GiB, "
            f"over the memory budget of {budget / 2**30:.1f} GiB; raise the budget or choose a smaller model"
        )
    with _COPIES_LOCK:
        held = _COPIES.get(model.serial)
        if held is None:
            with model._lock:
                twin = copy.deepcopy(model.model).double().eval()
            for module in twin.modules():
                if "experts" in dict(module.named_children()):
                    _in_float32(module)
            names = {name: id(m) for name, m in model.model.named_modules()}
            twins = dict(twin.named_modules())
            sites = {id(twins[name]): model.sites[key] for name, key in names.items() if key in model.sites}
            _COPIES.clear()
            held = _COPIES[model.serial] = (twin, sites, threading.Lock())
        return held


def _in_float32(module: nn.Module) -> None:
    """A mixture-of-experts block stays float32 (its grouped products have no float64 kernel);
    its output, an atomic component, is handed on in float64."""

    def down(m, args):
        return tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    def up(m, args, output):
        if isinstance(output, tuple):
            return tuple(o.double() if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in output)
        return output.double()

    module.float()
    module.register_forward_pre_hook(down)
    module.register_forward_hook(up)


def _check_pretrained_cell(model: LoadedModel, text: str, layer, head, query, key, part: str, target):
    """(the prompt, layer, head, query, key) checked against a pretrained model's attention ``part``."""
    parts = ("self", "decoder", "cross") if model.family == "encoder-decoder" else ("self",)
    if part not in parts:
        raise ConfigError(f"{model.name} has attention parts {', '.join(parts)}, not {part!r}")
    layer = _check_index("layer", layer, model.layers[part])
    head = _check_index("head", head, model.num_heads)
    p = prompt(model, text, target) if model.family == "encoder-decoder" else prompt(model, text)
    source_len = p.length
    target_len = int(p.decoder_ids.shape[1]) if p.decoder_ids is not None else 0
    q_len = source_len if part == "self" else target_len
    k_len = target_len if part == "decoder" else source_len
    query, key = _check_position("query", query, q_len), _check_position("key", key, k_len)
    return p, layer, head, query, key


@dataclass
class _Passes:
    """The recorded run's queries [B, H, Lq, d] and keys [B, KV, Lk, d], mask, bias and scoring; the
    component names; and at the cell, one row per component alone then one with none, the query and
    key (``q``, ``k``) and, where the rotation could be read apart, their pre-RoPE twins."""

    q1: torch.Tensor
    k1: torch.Tensor
    mask: torch.Tensor | None
    bias: torch.Tensor | None
    scoring: Scoring
    names: list[str]
    group: int
    q: torch.Tensor
    k: torch.Tensor
    q_unrotated: list[torch.Tensor]
    k_unrotated: list[torch.Tensor]


def _component_passes(model: LoadedModel, p, part: str, layer: int, head: int, query: int, key: int, budget, ctx):
    """One recording pass on a float64 copy, then batched passes feeding each component alone."""
    twin, sites, lock = _float64_copy(model, resolve_budget(budget))
    accepts = forward_parameters(type(twin))  # type: ignore[arg-type]

    def inputs(batch: int) -> dict:
        kwargs: dict = {"input_ids": p.ids.expand(batch, -1)}
        if p.decoder_ids is not None:
            kwargs["decoder_input_ids"] = p.decoder_ids.expand(batch, -1)
        if "use_cache" in accepts:
            kwargs["use_cache"] = False
        return kwargs

    site = Site(part, layer, next(s.stack for s in sites.values() if s.part == part and s.layer == layer))
    with lock:
        dec = _Decomposer(model, twin, sites)
        ctx.progress(0.0, "recording the components")
        q1, k1, _raw1, mask, bias, scoring = dec.run(inputs(1), site)
        count = len(dec.names)
        dec.mode = "replay"
        rows = torch.cat([torch.eye(count), torch.zeros(1, count)]).double()  # each alone, then none
        qs, ks, qrs, krs = [], [], [], []
        group = head // (q1.shape[1] // k1.shape[1])
        for start in range(0, rows.shape[0], _BATCH):
            ctx.check()
            chunk = rows[start : start + _BATCH]
            dec.alpha = chunk
            q, k, raw, *_ = dec.run(inputs(chunk.shape[0]), site)
            qs.append(q[:, head, query])
            ks.append(k[:, group, key])
            if raw is not None:
                qrs.append(raw[0][:, head, query])
                krs.append(raw[1][:, group, key])
            ctx.progress(min(1.0, (start + _BATCH) / rows.shape[0]), "one pass per component")
    return _Passes(q1, k1, mask, bias, scoring, list(dec.names), group, torch.cat(qs), torch.cat(ks), qrs, krs)


def _check_affine(model: LoadedModel, q_all: torch.Tensor, k_all: torch.Tensor, q_real, k_real) -> None:
    """The affine check: the components and the constant rebuild the real run's query and key."""
    for got, real in ((q_all, q_real), (k_all, k_real)):
        rebuilt = (got[:-1] - got[-1]).sum(0) + got[-1]
        if not torch.allclose(rebuilt, real, rtol=0, atol=1e-9 * max(1.0, float(real.abs().max()))):
            raise ConfigError(
                f"{model.name}'s queries and keys are not affine in the residual stream's components here: "
                "a piece between them is not a norm, a head or an MLP"
            )


def _cell_bias(run: _Passes, head: int, query: int, key: int) -> float:
    """The additive position bias of the cell (0 without one); the query must see the key."""
    mask, bias, q1, k1 = run.mask, run.bias, run.q1, run.k1
    allowed = (
        True
        if mask is None
        else bool(
            torch.broadcast_to(mask, (*mask.shape[:-2], q1.shape[-2], k1.shape[-2]))[(0,) * (mask.dim() - 2)][
                query, key
            ]
        )
    )
    extra = 0.0
    if bias is not None:
        full = torch.broadcast_to(bias, (1, q1.shape[1], q1.shape[-2], k1.shape[-2]))
        extra = float(full[0, head, query, key])
    if not allowed or not math.isfinite(extra):
        raise ConfigError(f"query {query} does not see key {key} in this layer: there is no score to decompose")
    return extra


def _contributions(t: torch.Tensor) -> np.ndarray:
    """Rows of each component alone, then of none, as each component's share, then the constant."""
    none = t[-1]
    return torch.cat([t[:-1] - none, none[None]]).numpy()


def _sides(run: _Passes) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Each component's query and key at the cell, before RoPE where the rotation could be read
    apart, and then their rotated twins (else None)."""
    if run.q_unrotated:
        unrotated = _contributions(torch.cat(run.q_unrotated)), _contributions(torch.cat(run.k_unrotated))
        return *unrotated, (_contributions(run.q), _contributions(run.k))
    return _contributions(run.q), _contributions(run.k), None


def _pretrained_terms(
    model: LoadedModel,
    text: str,
    layer: int,
    head: int,
    query: int,
    key: int,
    part: str,
    target: str | None,
    memory_budget: int | None,
    ctx: JobContext,
) -> ScoreTerms:
    p, layer, head, query, key = _check_pretrained_cell(model, text, layer, head, query, key, part, target)
    run = _component_passes(model, p, part, layer, head, query, key, memory_budget, ctx)
    q1, k1, scoring, group, q_all, k_all, names = run.q1, run.k1, run.scoring, run.group, run.q, run.k, run.names
    _check_affine(model, q_all, k_all, q1[0, head, query], k1[0, group, key])
    scale = float(scoring.scale)
    # a component that reaches neither side (the other stack's, under cross-attention) has no term
    q_keep = [i for i in range(len(names)) if bool((q_all[i] != q_all[-1]).any())]
    k_keep = [i for i in range(len(names)) if bool((k_all[i] != k_all[-1]).any())]
    q_raw, k_raw, rotated = _sides(run)
    extra = _cell_bias(run, head, query, key)
    raw_score = float(scale * (q1[0, head, query] @ k1[0, group, key]))
    score = _attend_score(q1, k1, run.mask, run.bias, scoring, head, group, query, key)
    name = "relative bias" if model.spec.positions == "relative bias" else POSITION
    qi, ki = [*q_keep, len(names)], [*k_keep, len(names)]
    if rotated is not None:
        rotated = (rotated[0][qi], rotated[1][ki])
    table = _frame(
        [*(names[i] for i in q_keep), BIAS],
        q_raw[qi],
        [*(names[i] for i in k_keep), BIAS],
        k_raw[ki],
        scale,
        rotated,
        extra if run.bias is not None else None,
        name,
    )
    names = [n for i, n in enumerate(names) if i in set(q_keep) | set(k_keep)]
    notes = (
        []
        if not (model.spec.positions == "rope" and not run.q_unrotated)
        else ["RoPE is inside every term (the rotation could not be read apart)"]
    )
    return _finish(
        table,
        pre_cap=raw_score,
        position=extra,
        softcap=scoring.softcap,
        score=score,
        components=names,
        notes=notes,
        layer=layer,
        head=head,
        query=query,
        key=key,
        scale=scale,
        part=part,
    )


def _attend_score(q, k, mask, bias, scoring: Scoring, head, group, query, key) -> float:
    """attend's own pre-softmax score of that cell (its ``masked`` stage), in float64."""
    keep: dict = {}
    plain = Scoring(scale=scoring.scale, softcap=scoring.softcap)
    attend(
        q[:1],
        k[:1],
        k[:1],
        mask=None if mask is None else mask[:1],
        bias=None if bias is None else bias[:1],
        scoring=plain,
        keep=keep,
    )
    return float(keep["masked"][0, head, query, key])


__all__ = ["BIAS", "KINDS", "POSITION", "ScoreTerms", "score_terms"]
