"""The edge graph of a model and the engine that runs it with edges patched.

Nodes (senders): ``embed``, every attention head ``L{l}.H{h}`` and every MLP ``L{l}.MLP``; an
encoder-decoder prefixes them ``enc.`` / ``dec.`` and names its cross-attention heads ``cross.``.
Receivers are the inputs of later nodes, by kind: a head's query (``q``), key (``k``) and value
(``v``) inputs, an MLP's input (``mlp``) and the ``logits``. Where K/V heads are grouped, the key
and value inputs belong to the group (``L{l}.KV{g}``) and its query heads share them; they are
never ungrouped. An edge joins a sender to a receiver input that reads the residual stream after
the sender wrote to it (cross-attention keys and values read the encoder's final stream).

The norm convention: a receiver reads norm(x), x the residual stream, a sum of its senders'
terms (and constant biases). Patching an edge changes only its sender's term in that receiver's
x; the norm (LayerNorm, RMSNorm) is recomputed from the changed sum, for that receiver only.

The engine (``Engine.run``) runs a batch of rows; each row has a prompt pair, a base run (its
tokens: the clean or the corrupted prompt) and, per receiver input, coefficients over its
senders: row b's input to receiver r is x_b + sum_s C[b, r, s] (target_s - running_s), with
running_s the sender's term in that row and target_s = corrupt_s + alpha_b (clean_s - corrupt_s)
from the pair's clean and corrupted runs. One exact edge patch is one coefficient 1 with alpha 1
on the corrupted run; a circuit is the clean run with coefficient 1 (alpha 0) on every edge
outside it. Gradient rows add a zero leaf to every receiver input and hand back the metric's
gradient there. A head's term is its slice of the output projection's input times that slice of
the projection's weight (``LayerHeads.weight``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from attndesk.attention.alibi import alibi_slopes
from attndesk.attention.kernel import _broadcast_mask, attend
from attndesk.attention.masks import causal_mask
from attndesk.attention.rope import apply_rope, rope_cos_sin
from attndesk.attention.scoring import Scoring
from attndesk.errors import ConfigError
from attndesk.models.loader import LoadedModel
from attndesk.system.free_memory import format_bytes

from .anatomy import check_lm, hidden_size, intermediate_size, vocabulary
from .inputs import hooks, last_logits, metric_values, prompt, token_id

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

KINDS = ("q", "k", "v", "mlp", "logits")
# what the edge graph covers among the pretrained model types: pre-norm decoders whose every
# attention head and MLP adds its output straight to the residual stream (decoders of LLaMA's
# shape share its module names: input_layernorm, self_attn.{q,k,v,o}_proj,
# post_attention_layernorm, mlp), and T5's encoder-decoders
LLAMA_SHAPED = ("llama", "mistral", "qwen2", "qwen3", "gemma", "olmo", "smollm3", "gpt_oss")
DECODERS = ("gpt2", "gpt_neox", "opt", "phi3", *LLAMA_SHAPED)
T5_SHAPED = ("t5", "mt5")
COVERED = (*DECODERS, *T5_SHAPED)
COVERED_NAMES = (
    "GPT-2, GPT-NeoX, OPT, LLaMA, Mistral, Qwen2, Qwen3, Gemma, Phi-3, OLMo, SmolLM3, GPT-OSS, T5, mT5 "
    "and attndesk's trained toy decoders"
)
# why the rest are not: a sender's term must reach each later reader unchanged but for that reader's norm
NOT_COVERED_WHY = {
    "gemma2": "its attention and MLP outputs pass through a norm before the residual sum",
    "gemma3_text": "its attention and MLP outputs pass through a norm before the residual sum",
    "olmo2": "its attention and MLP outputs pass through a norm before the residual sum",
    "encoder": "its blocks normalise the residual sum itself (post-norm) or it has no decoder's logits",
    "encoder-decoder": "only T5's encoder-decoders are laid out for edges",
}


@dataclass(frozen=True)
class Senders:
    """One block of senders: a vector (``embed``, an MLP: one node) or one layer's heads."""

    key: str
    names: tuple[str, ...]
    stream: str
    order: int
    weight: torch.Tensor | None = None  # heads: [H, d, E], head h's slice of the output projection

    @property
    def heads(self) -> bool:
        return self.weight is not None


@dataclass(frozen=True)
class Projection:
    """A projection module a site's receivers read through: per receiver its slice of the output."""

    module: nn.Module
    slices: tuple[tuple[int, slice], ...]  # (receiver index in the site, output features)


@dataclass
class Site:
    """Where receivers read the residual stream: the norm they read it through and their inputs.

    A site with ``projections`` patches their outputs (a head's q/k/v slice); one without patches
    the norm's output (an MLP's input, the logits)."""

    key: str
    stream: str
    order: int
    norm: nn.Module
    receivers: list[tuple[str, str]]  # (dst, kind)
    projections: list[Projection] = field(default_factory=list)
    senders: list[Senders] = field(default_factory=list)  # those it reads, in order
    flat: bool = False  # the norm reads the stream flattened to [B T, E] (OPT's MLP)

    @property
    def width(self) -> int:
        return sum(len(s.names) for s in self.senders)


@dataclass
class Graph:
    """Every sender block and every site of a model, in the order of the forward pass."""

    senders: list[Senders]
    sites: list[Site]
    dims: dict[str, int]  # embed, mlp, heads, vocab, layers (every stack's), kv_heads

    def nodes(self) -> list[str]:
        names = [n for s in self.senders for n in s.names]
        receivers = [dst for site in self.sites for dst, _ in site.receivers]
        return list(dict.fromkeys(names + receivers))

    def edges(self) -> list[tuple[str, str, str]]:
        """(src, dst, kind) for every edge, site by site, receiver by receiver, sender by sender."""
        out: list[tuple[str, str, str]] = []
        for site in self.sites:
            sources = [n for s in site.senders for n in s.names]
            for dst, kind in site.receivers:
                out.extend((src, dst, kind) for src in sources)
        return out

    def index(self) -> dict[tuple[str, str, str], tuple[int, int, int]]:
        """(src, dst, kind) -> (site, receiver, sender column)."""
        out = {}
        for i, site in enumerate(self.sites):
            sources = [n for s in site.senders for n in s.names]
            for r, (dst, kind) in enumerate(site.receivers):
                for c, src in enumerate(sources):
                    out[(src, dst, kind)] = (i, r, c)
        return out


def _link(senders: list[Senders], sites: list[Site]) -> None:
    for site in sites:
        site.senders = [s for s in senders if s.stream == site.stream and s.order < site.order]


def _head_weight(module: nn.Module, heads: int) -> torch.Tensor:
    """[H, d, E] from an output projection: nn.Linear stores [E, H d], GPT-2's Conv1D [H d, E]."""
    weight = module.get_parameter("weight").detach()
    if hasattr(module, "nf"):
        return weight.reshape(heads, -1, weight.shape[1])
    return weight.t().reshape(heads, -1, weight.shape[0])


def _attention_receivers(
    prefix: str, layer: int, heads: int, kv_heads: int, kinds: Sequence[str] = ("q", "k", "v")
) -> tuple[list[tuple[str, str]], dict[str, list[int]]]:
    """The receivers of one attention layer and, per kind, their indices (q per head; k/v per
    head, or per K/V group where grouped)."""
    receivers: list[tuple[str, str]] = []
    by_kind: dict[str, list[int]] = {}
    grouped = kv_heads < heads
    for kind in kinds:
        count = kv_heads if kind != "q" and grouped else heads
        name = "KV" if kind != "q" and grouped else "H"
        by_kind[kind] = list(range(len(receivers), len(receivers) + count))
        receivers += [(f"{prefix}L{layer}.{name}{i}", kind) for i in range(count)]
    return receivers, by_kind


def _slices(indices: list[int], width: int, offset: int = 0) -> tuple[tuple[int, slice], ...]:
    return tuple((r, slice(offset + i * width, offset + (i + 1) * width)) for i, r in enumerate(indices))


# --- pretrained models ---------------------------------------------------------------------------


def _check_covered(model: LoadedModel) -> str:
    kind = model.spec.model_type
    if kind not in COVERED:
        why = NOT_COVERED_WHY.get(kind) or NOT_COVERED_WHY.get(model.spec.family, "")
        raise ConfigError(
            f"edge circuits cover {COVERED_NAMES}; {model.name} is {model.spec.family_name} ({kind}), not covered"
            + (f": {why}" if why else "")
        )
    if kind == "opt" and not model.model.config.do_layer_norm_before:
        raise ConfigError(f"{model.name} is an OPT that normalises after each block (post-norm): not covered")
    check_lm(model, "an edge circuit's metric")
    return kind


@dataclass(frozen=True)
class _Parts:
    """What the edge graph needs of one pre-norm decoder block. ``layout`` of the q/k/v projections:
    ``separate`` (one module per kind), ``concat`` (one module: every query head, then every key
    head, then every value head), ``interleaved`` (one module: head by head, its q, k and v).
    ``parallel``: attention and MLP both read the block's input (GPT-NeoX); ``flat``: the MLP's norm
    reads the stream as [B T, E] (OPT)."""

    norm1: nn.Module
    norm2: nn.Module
    mlp: nn.Module
    out: nn.Module
    qkv: tuple[nn.Module, ...]
    layout: str
    head_dim: int
    parallel: bool = False
    flat: bool = False


def _decoder_blocks(hf, kind: str) -> tuple[Sequence[nn.Module], nn.Module]:
    if kind == "gpt2":
        return hf.transformer.h, hf.transformer.ln_f
    if kind == "gpt_neox":
        return hf.gpt_neox.layers, hf.gpt_neox.final_layer_norm
    if kind == "opt":
        return hf.model.decoder.layers, hf.model.decoder.final_layer_norm
    return hf.model.layers, hf.model.norm


def _decoder_parts(block, kind: str) -> _Parts:
    if kind == "gpt2":
        a = block.attn
        return _Parts(block.ln_1, block.ln_2, block.mlp, a.c_proj, (a.c_attn,), "concat", a.head_dim)
    if kind == "gpt_neox":
        a = block.attention
        return _Parts(
            block.input_layernorm,
            block.post_attention_layernorm,
            block.mlp,
            a.dense,
            (a.query_key_value,),
            "interleaved",
            a.head_size,
            parallel=bool(block.use_parallel_residual),
        )
    if kind == "opt":
        a = block.self_attn
        norm1, norm2 = block.self_attn_layer_norm, block.final_layer_norm
        return _Parts(
            norm1, norm2, block.fc2, a.out_proj, (a.q_proj, a.k_proj, a.v_proj), "separate", a.head_dim, flat=True
        )
    a = block.self_attn
    norm1, norm2 = block.input_layernorm, block.post_attention_layernorm
    if kind == "phi3":
        return _Parts(norm1, norm2, block.mlp, a.o_proj, (a.qkv_proj,), "concat", a.head_dim)
    return _Parts(norm1, norm2, block.mlp, a.o_proj, (a.q_proj, a.k_proj, a.v_proj), "separate", a.head_dim)


def _qkv_projections(parts: _Parts, by_kind: dict[str, list[int]]) -> list[Projection]:
    d = parts.head_dim
    if parts.layout == "separate":
        return [Projection(m, _slices(by_kind[k], d)) for m, k in zip(parts.qkv, ("q", "k", "v"))]
    if parts.layout == "concat":
        q_width, kv_width = len(by_kind["q"]) * d, len(by_kind["k"]) * d
        slices = (
            _slices(by_kind["q"], d) + _slices(by_kind["k"], d, q_width) + _slices(by_kind["v"], d, q_width + kv_width)
        )
        return [Projection(parts.qkv[0], slices)]
    slices = tuple(
        (r, slice((3 * i + j) * d, (3 * i + j + 1) * d))
        for j, kind in enumerate(("q", "k", "v"))
        for i, r in enumerate(by_kind[kind])
    )
    return [Projection(parts.qkv[0], slices)]


def _decoder_graph(model: LoadedModel, kind: str) -> tuple[Graph, dict]:
    """The pre-norm decoders: their senders, sites and the modules to hook."""
    blocks, final = _decoder_blocks(model.model, kind)
    heads, kv = model.num_heads, model.kv_heads
    senders = [Senders("embed", ("embed",), "main", 0)]
    sites: list[Site] = []
    points: dict = {"embed": (blocks[0], "embed"), "z": {}, "mlp": {}}
    for layer, block in enumerate(blocks):
        parts = _decoder_parts(block, kind)
        receivers, by_kind = _attention_receivers("", layer, heads, kv)
        projections = _qkv_projections(parts, by_kind)
        sites.append(Site(f"L{layer}.attn", "main", 10 * layer + 1, parts.norm1, receivers, projections))
        key = f"L{layer}.heads"
        senders.append(
            Senders(
                key,
                tuple(f"L{layer}.H{h}" for h in range(heads)),
                "main",
                10 * layer + 2,
                _head_weight(parts.out, heads),
            )
        )
        points["z"][parts.out] = key
        # a parallel block's MLP reads the block's input: it comes before its own layer's heads
        order = 10 * layer + (1 if parts.parallel else 3)
        mlp_site = Site(f"L{layer}.mlp", "main", order, parts.norm2, [(f"L{layer}.MLP", "mlp")], flat=parts.flat)
        sites.append(mlp_site)
        senders.append(Senders(f"L{layer}.MLP", (f"L{layer}.MLP",), "main", 10 * layer + 4))
        points["mlp"][parts.mlp] = f"L{layer}.MLP"
    sites.append(Site("logits", "main", 10 * len(blocks) + 1, final, [("logits", "logits")]))
    _link(senders, sites)
    return Graph(senders, sites, _dims(model, len(blocks), heads, kv)), points


def _t5_self_attention(stack: str, layer: int, attn, heads: int, senders: list, sites: list, points: dict) -> int:
    """A T5 stack's (``enc``/``dec``) self-attention at ``layer``: its q/k/v site and its heads as
    senders; the head dimension."""
    d = attn.SelfAttention.key_value_proj_dim
    receivers, by_kind = _attention_receivers(f"{stack}.", layer, heads, heads)
    projections = [Projection(getattr(attn.SelfAttention, k), _slices(by_kind[k], d)) for k in ("q", "k", "v")]
    sites.append(Site(f"{stack}.L{layer}.attn", stack, 10 * layer + 1, attn.layer_norm, receivers, projections))
    o = attn.SelfAttention.o
    key = f"{stack}.L{layer}.heads"
    names = tuple(f"{stack}.L{layer}.H{h}" for h in range(heads))
    senders.append(Senders(key, names, stack, 10 * layer + 2, _head_weight(o, heads)))
    points["z"][o] = key
    return d


def _t5_mlp(stack: str, layer: int, ff, order: int, senders: list, sites: list, points: dict) -> None:
    """A T5 stack's feed-forward at ``layer``: its site (at ``order``) and its output as a sender."""
    name = f"{stack}.L{layer}.MLP"
    sites.append(Site(f"{stack}.L{layer}.mlp", stack, order, ff.layer_norm, [(name, "mlp")]))
    senders.append(Senders(name, (name,), stack, order + 1))
    points["mlp"][ff.DenseReluDense] = name


def _t5_graph(model: LoadedModel) -> tuple[Graph, dict]:
    """T5: the encoder's and decoder's senders and sites, the cross-attention's query read from the
    decoder's stream and its keys and values from the encoder's final norm."""
    hf = model.model
    heads = model.num_heads
    senders = [Senders("enc.embed", ("enc.embed",), "enc", 0), Senders("dec.embed", ("dec.embed",), "dec", 0)]
    sites: list[Site] = []
    points: dict = {"embed": None, "embeds": {hf.encoder.block[0]: "enc.embed", hf.decoder.block[0]: "dec.embed"}}
    points["z"], points["mlp"] = {}, {}
    cross_slices: list[Projection] = []
    cross_receivers: list[tuple[str, str]] = []
    for layer, block in enumerate(hf.encoder.block):
        _t5_self_attention("enc", layer, block.layer[0], heads, senders, sites, points)
        _t5_mlp("enc", layer, block.layer[1], 10 * layer + 3, senders, sites, points)
    for layer, block in enumerate(hf.decoder.block):
        attn, cross, ff = block.layer[0], block.layer[1], block.layer[2]
        d = _t5_self_attention("dec", layer, attn, heads, senders, sites, points)
        # the cross-attention's query reads the decoder's stream; its keys and values the encoder's
        q_receivers, q_kind = _attention_receivers("cross.", layer, heads, heads, ("q",))
        eda = cross.EncDecAttention
        sites.append(
            Site(
                f"cross.L{layer}.q",
                "dec",
                10 * layer + 3,
                cross.layer_norm,
                q_receivers,
                [Projection(eda.q, _slices(q_kind["q"], d))],
            )
        )
        kv_receivers, kv_kind = _attention_receivers("cross.", layer, heads, heads, ("k", "v"))
        base = len(cross_receivers)
        cross_receivers += kv_receivers
        for k in ("k", "v"):
            cross_slices.append(Projection(getattr(eda, k), _slices([base + i for i in kv_kind[k]], d)))
        key = f"cross.L{layer}.heads"
        names = tuple(f"cross.L{layer}.H{h}" for h in range(heads))
        senders.append(Senders(key, names, "dec", 10 * layer + 4, _head_weight(eda.o, heads)))
        points["z"][eda.o] = key
        _t5_mlp("dec", layer, ff, 10 * layer + 5, senders, sites, points)
    enc_end = 10 * len(hf.encoder.block) + 1
    sites.append(Site("cross.kv", "enc", enc_end, hf.encoder.final_layer_norm, cross_receivers, cross_slices))
    sites.append(
        Site("logits", "dec", 10 * len(hf.decoder.block) + 1, hf.decoder.final_layer_norm, [("logits", "logits")])
    )
    _link(senders, sites)
    layers = len(hf.encoder.block) + 2 * len(hf.decoder.block)
    return Graph(senders, sites, _dims(model, layers, heads, heads)), points


def _dims(model: LoadedModel, layers: int, heads: int, kv: int) -> dict[str, int]:
    return {
        "embed": hidden_size(model),
        "mlp": intermediate_size(model),
        "heads": heads,
        "kv_heads": kv,
        "vocab": vocabulary(model),
        "layers": layers,
    }


# --- trained toy decoders ------------------------------------------------------------------------


class _Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


_IDENTITY = _Identity()


def _toy_graph(run) -> Graph:
    m, cfg = run.model, run.cfg
    heads = cfg.heads
    kv = cfg.kv_heads or heads
    senders = [Senders("embed", ("embed",), "main", 0)]
    sites: list[Site] = []
    for layer, block in enumerate(m.blocks):
        attn = block.attn
        d = attn.head_dim
        receivers, by_kind = _attention_receivers("", layer, heads, kv)
        projections = [
            Projection(attn.q_proj, _slices(by_kind["q"], d)),
            Projection(attn.k_proj, _slices(by_kind["k"], d)),
            Projection(attn.v_proj, _slices(by_kind["v"], d)),
        ]
        norm = block.ln1 if block.ln1 is not None else _IDENTITY
        sites.append(Site(f"L{layer}.attn", "main", 10 * layer + 1, norm, receivers, projections))
        names = tuple(f"L{layer}.H{h}" for h in range(heads))
        senders.append(Senders(f"L{layer}.heads", names, "main", 10 * layer + 2, _head_weight(attn.out_proj, heads)))
        if block.mlp is not None:
            norm2 = block.ln2 if block.ln2 is not None else _IDENTITY
            sites.append(Site(f"L{layer}.mlp", "main", 10 * layer + 3, norm2, [(f"L{layer}.MLP", "mlp")]))
            senders.append(Senders(f"L{layer}.MLP", (f"L{layer}.MLP",), "main", 10 * layer + 4))
    final = m.ln_f if m.ln_f is not None else _IDENTITY
    sites.append(Site("logits", "main", 10 * cfg.layers + 1, final, [("logits", "logits")]))
    _link(senders, sites)
    dims = {
        "embed": cfg.embed_dim,
        "mlp": 4 * cfg.embed_dim if cfg.mlp else 0,
        "heads": heads,
        "kv_heads": kv,
        "vocab": cfg.vocab,
        "layers": cfg.layers,
    }
    return Graph(senders, sites, dims)


def _toy_forward(run, graph: Graph, ids: torch.Tensor, pas: Pass) -> torch.Tensor:
    """The toy decoder's forward (``attndesk.train.model``), with the engine at every point."""
    m, cfg = run.model, run.cfg
    length = ids.shape[-1]
    x = m.embed(ids)
    if m.pos is not None:
        x = x + m.pos.weight[:length]
    elif cfg.position == "sinusoidal":
        x = x + m.sinusoid[:length]
    x = pas.embed("embed", x)
    mask = _broadcast_mask(causal_mask(length, device=ids.device))
    sites = {s.key: s for s in graph.sites}
    for layer, block in enumerate(m.blocks):
        attn = block.attn
        site = sites[f"L{layer}.attn"]
        pas.resid(site, x)
        h = site.norm(x)
        q, k, v = (pas.project(site, p.module, p.module(h)) for p in site.projections)
        split = (x.shape[0], length, -1, attn.head_dim)
        q, k, v = (t.reshape(split).transpose(1, 2) for t in (q, k, v))
        if cfg.position == "rope":
            cos, sin = rope_cos_sin(length, attn.head_dim, dtype=q.dtype, device=q.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        slopes = alibi_slopes(attn.heads).tolist() if cfg.position == "alibi" else None
        scoring = Scoring.of(
            attn.head_dim,
            scale=1.0 / math.sqrt(attn.head_dim),
            softcap=cfg.softcap,
            slopes=slopes,
            window=cfg.window,
            sinks=block.sinks,
        )
        # the whole-tensor reference path: many rows of short prompts (the fast path loops per row)
        context, _ = attend(q, k, v, mask=mask, scoring=scoring)
        z = context.transpose(1, 2).reshape(x.shape[0], length, -1)
        pas.heads(f"L{layer}.heads", z)
        x = x + attn.out_proj(z)
        if block.mlp is not None:
            site = sites[f"L{layer}.mlp"]
            pas.resid(site, x)
            y = block.mlp(pas.normed(site, site.norm(x)))
            pas.vector(f"L{layer}.MLP", y)
            x = x + y
    site = sites["logits"]
    pas.resid(site, x)
    return m.unembed(pas.normed(site, site.norm(x[:, -1:])))[:, -1].float()


# --- the engine ----------------------------------------------------------------------------------


@dataclass
class Values:
    """The clean and corrupted runs' sender values, per prompt pair: vectors [P, T, E], heads' output
    projection inputs [P, T, H d]."""

    clean: dict[str, torch.Tensor]
    corrupt: dict[str, torch.Tensor]


class Pass:
    """One batched forward pass: what every hook point of the engine does for its rows.

    ``pair`` [B] each row's prompt pair; ``alpha`` [B] where between corrupt (0) and clean (1) its
    targets lie; ``coef`` site key -> [B, R, S] sender coefficients per receiver (absent: none);
    ``grad``: a zero leaf on every receiver input (``leaves``); ``detach``: targets act on values
    only (the gradient passes through the running values, as without the patch); ``embed_alpha``
    [B]: the embeddings themselves replaced by corrupt + alpha (clean - corrupt); ``record``: keep
    every sender's running value (``running``) for the caller."""

    def __init__(
        self,
        graph: Graph,
        values: Values | None,
        pair: torch.Tensor,
        alpha: torch.Tensor | None = None,
        coef: dict[str, torch.Tensor] | None = None,
        *,
        grad: bool = False,
        detach: bool = False,
        embed_alpha: torch.Tensor | None = None,
    ):
        self.graph, self.values, self.pair = graph, values, pair
        self.alpha = alpha
        self.coef = coef or {}
        self.grad, self.detach, self.embed_alpha = grad, detach, embed_alpha
        self.running: dict[str, torch.Tensor] = {}
        self.x: dict[str, torch.Tensor] = {}
        self.leaves: dict[str, torch.Tensor] = {}
        self._normed: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._sites = {s.key: s for s in graph.sites}
        self._blocks = {s.key: s for s in graph.senders}

    # sender points
    def embed(self, key: str, x: torch.Tensor) -> torch.Tensor:
        if self.embed_alpha is not None and self.values is not None:
            x = self._target(key, self.embed_alpha).to(x.dtype)
        self.running[key] = x
        return x

    def vector(self, key: str, y: torch.Tensor) -> None:
        self.running[key] = y.reshape(self.pair.shape[0], -1, y.shape[-1])

    def heads(self, key: str, z: torch.Tensor) -> None:
        self.running[key] = z.reshape(self.pair.shape[0], -1, z.shape[-1])

    def _target(self, key: str, alpha: torch.Tensor) -> torch.Tensor:
        assert self.values is not None
        clean, corrupt = self.values.clean[key][self.pair], self.values.corrupt[key][self.pair]
        return corrupt + alpha.to(clean.dtype)[:, None, None] * (clean - corrupt)

    # receiver points
    def resid(self, site: Site, x: torch.Tensor) -> None:
        self.x[site.key] = x

    def _changed(self, site: Site) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(rows, receivers, norm(x + delta)) of the pairs whose input differs, computed once per site."""
        if site.key in self._normed:
            return self._normed[site.key]
        x = self.x[site.key]
        coef = self.coef.get(site.key)
        rows_n, width = x.shape[0], len(site.receivers)
        if self.grad:
            bi = torch.arange(rows_n, device=x.device).repeat_interleave(width)
            ri = torch.arange(width, device=x.device).repeat(rows_n)
        elif coef is not None and bool(coef.any()):
            bi, ri = torch.nonzero(coef.any(-1), as_tuple=True)
        else:
            return None
        new = x[bi]
        if coef is not None:
            delta = self._delta(site, coef[bi, ri], bi)
            new = new + (delta.detach() if self.detach else delta)
        if self.grad:
            leaf = torch.zeros((rows_n, width, *x.shape[1:]), dtype=x.dtype, device=x.device, requires_grad=True)
            self.leaves[site.key] = leaf
            new = new + leaf[bi, ri]
        self._normed[site.key] = (bi, ri, site.norm.forward(new))
        return self._normed[site.key]

    def _delta(self, site: Site, coef: torch.Tensor, bi: torch.Tensor) -> torch.Tensor:
        """sum_s coef[n, s] (target_s - running_s) for the pairs' rows ``bi`` -> [N, T, E]."""
        assert self.alpha is not None
        delta: torch.Tensor | None = None
        col = 0
        for block in site.senders:
            width = len(block.names)
            c = coef[:, col : col + width].to(self.x[site.key].dtype)
            col += width
            if not bool(c.any()):
                continue
            diff = self._target(block.key, self.alpha)[bi] - self.running[block.key][bi]
            if block.heads:
                assert block.weight is not None
                h, d, _ = block.weight.shape
                diff = diff.reshape(*diff.shape[:2], h, d)
                term = torch.einsum("nh,nthd,hde->nte", c, diff, block.weight.to(diff.dtype))
            else:
                term = c[:, 0, None, None] * diff
            delta = term if delta is None else delta + term
        if delta is None:
            return torch.zeros_like(self.x[site.key][bi])
        return delta

    def project(self, site: Site, module: nn.Module, out: torch.Tensor) -> torch.Tensor:
        changed = self._changed(site)
        if changed is None:
            return out
        bi, ri, normed = changed
        projection = next(p for p in site.projections if p.module is module)
        mask = torch.zeros((len(site.receivers), out.shape[-1]), dtype=torch.bool, device=out.device)
        for r, features in projection.slices:
            mask[r, features] = True
        keep = mask[ri].any(-1)
        if not bool(keep.any()):
            return out
        bi, ri, normed = bi[keep], ri[keep], normed[keep]
        new = module.forward(normed)
        change = torch.where(mask[ri][:, None, :], new - out[bi], torch.zeros((), dtype=out.dtype))
        return out.index_add(0, bi, change)

    def normed(self, site: Site, out: torch.Tensor) -> torch.Tensor:
        changed = self._changed(site)
        if changed is None:
            return out
        bi, _, normed = changed
        normed = normed[:, -out.shape[1] :]  # the logits read the last position only
        return out.index_add(0, bi, normed - out[bi])


class Engine:
    """A model's graph and the forward pass that runs it under a ``Pass``."""

    def __init__(self, model):
        self.model = model
        self.toy = not isinstance(model, LoadedModel)
        if self.toy:
            self.kind = "toy"
            self.graph = _toy_graph(model)
            self.points: dict = {}
        else:
            self.kind = _check_covered(model)
            if self.kind in T5_SHAPED:
                self.graph, self.points = _t5_graph(model)
            else:
                self.graph, self.points = _decoder_graph(model, self.kind)

    def run(self, ids: torch.Tensor, decoder_ids: torch.Tensor | None, pas: Pass) -> torch.Tensor:
        """[B, V] logits after the last position, float32."""
        if self.toy:
            self.model.model.eval()
            return _toy_forward(self.model, self.graph, ids, pas)
        pre, post = self._hooks(pas)
        with hooks(pre, post, lock=self.model._lock):
            return last_logits(self.model, ids, decoder_ids)

    def _hooks(self, pas: Pass) -> tuple[dict, dict]:
        pre: dict[nn.Module, Callable] = {}
        post: dict[nn.Module, Callable] = {}
        embeds = self.points.get("embeds") or {self.points["embed"][0]: "embed"}
        for module, key in embeds.items():
            pre[module] = lambda m, x, key=key: pas.embed(key, x)
        for module, key in self.points["z"].items():
            pre[module] = lambda m, z, key=key: pas.heads(key, z)
        for module, key in self.points["mlp"].items():
            # a mixture-of-experts MLP hands back (output, router scores)
            post[module] = lambda m, y, key=key: pas.vector(key, y[0] if isinstance(y, tuple) else y)
        rows = int(pas.pair.shape[0])
        for site in self.graph.sites:
            if site.flat:
                pre[site.norm] = lambda m, x, site=site: pas.resid(site, x.reshape(rows, -1, x.shape[-1]))
                post[site.norm] = lambda m, out, site=site: pas.normed(
                    site, out.reshape(rows, -1, out.shape[-1])
                ).reshape(out.shape)
                continue
            pre[site.norm] = lambda m, x, site=site: pas.resid(site, x)
            if site.projections:
                for p in site.projections:
                    post[p.module] = lambda m, out, site=site, module=p.module: pas.project(site, module, out)
            else:
                post[site.norm] = lambda m, out, site=site: pas.normed(site, out)
        return pre, post

    def capture(
        self, ids: torch.Tensor, decoder_ids: torch.Tensor | None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Every sender's value and the logits of a plain batched run of ``ids``."""
        rows = ids.shape[0]
        pas = Pass(self.graph, None, torch.arange(rows))
        with torch.inference_mode():
            logits = self.run(ids, decoder_ids, pas)
        return {k: v.detach().clone() for k, v in pas.running.items()}, logits

    def pass_bytes(self, length: int, decoder_length: int, rows: int, pairs_per_row: int, grad: bool) -> int:
        """Estimated peak bytes of one pass of ``rows`` rows (activations of one layer, or of every
        layer when a gradient is taken, the rows' sender values and recomputed receiver inputs)."""
        d = self.graph.dims
        e, f, h, v = d["embed"], d["mlp"] or 4 * d["embed"], d["heads"], d["vocab"]
        n = max(length, decoder_length)

        def layer(t: int) -> int:
            return 4 * t * (12 * e + 6 * f) + 16 * h * t * t

        live = layer(n) * (d["layers"] if grad else 2)
        senders = 4 * n * e * (len(self.graph.senders) + 2)
        recompute = 4 * n * 6 * e * max(1, pairs_per_row) * (3 if grad else 1)
        return rows * (live + senders + recompute + 8 * v)


# --- inputs --------------------------------------------------------------------------------------


@dataclass
class Pairs:
    """The prompt pairs of one question: clean and corrupted ids [P, T] (and the decoder's [P, Td]),
    the answer and wrong token per pair, the token labels of the first pair."""

    clean: torch.Tensor
    corrupt: torch.Tensor
    decoder: torch.Tensor | None
    answer: torch.Tensor
    wrong: torch.Tensor | None
    clean_tokens: list[str]
    corrupt_tokens: list[str]

    @property
    def count(self) -> int:
        return int(self.clean.shape[0])


def _as_list(value, many: Callable[[object], bool]) -> list:
    return list(value) if many(value) else [value]


def _many_texts(x) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(t, str) for t in x)


def _many_ids(x) -> bool:
    return isinstance(x, (list, tuple, np.ndarray, torch.Tensor)) and len(x) > 0 and not _is_token(x[0])


def _is_token(x) -> bool:
    return isinstance(x, (int, np.integer)) or (isinstance(x, torch.Tensor) and x.dim() == 0)


def _per_pair(value, count: int, what: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise ConfigError(f"{len(values)} {what}s for {count} prompt pairs: give one, or one per pair")
    return values


def alignment(clean: list[str], corrupt: list[str]) -> str:
    """The two prompts' tokens side by side up to the first difference in length or token."""
    shown = []
    for i in range(max(len(clean), len(corrupt))):
        a = clean[i] if i < len(clean) else "-"
        b = corrupt[i] if i < len(corrupt) else "-"
        shown.append(f"{i}:{a!r}" if a == b else f"{i}:{a!r}/{b!r}")
    return " ".join(shown)


def _unequal(a: list[str], b: list[str]) -> ConfigError:
    return ConfigError(
        f"the clean prompt is {len(a)} tokens and the corrupted one {len(b)}: edge patching needs equal "
        f"token lengths; aligned (clean/corrupt): {alignment(a, b)}"
    )


def make_pairs(model, clean, corrupt, answer, wrong, metric: str, target: str | None = None) -> Pairs:
    """Check and tokenize the prompt pairs: one line on bad input, before any forward pass."""
    if isinstance(model, LoadedModel):
        _check_covered(model)
        cleans = _as_list(clean, _many_texts)
        corrupts = _as_list(corrupt, _many_texts)
        if len(cleans) != len(corrupts):
            raise ConfigError(f"{len(cleans)} clean prompts and {len(corrupts)} corrupted ones: give them in pairs")
        a = [prompt(model, t, target) for t in cleans]
        b = [prompt(model, t, target) for t in corrupts]
        for pa, pb in zip(a, b):
            if pa.length != pb.length or pa.length != a[0].length:
                other = pb if pa.length != pb.length else a[0]
                raise _unequal(list(pa.tokens), list(other.tokens))
        answers = [token_id(model, t, "answer") for t in _per_pair(answer, len(a), "answer")]
        wrongs = (
            None
            if wrong is None
            else [token_id(model, t, "wrong token") for t in _per_pair(wrong, len(a), "wrong token")]
        )
        dec = None if a[0].decoder_ids is None else torch.cat([p.decoder_ids for p in a if p.decoder_ids is not None])
        pairs = Pairs(
            torch.cat([p.ids for p in a]),
            torch.cat([p.ids for p in b]),
            dec,
            torch.tensor(answers),
            None if wrongs is None else torch.tensor(wrongs),
            list(a[0].tokens),
            list(b[0].tokens),
        )
    else:
        pairs = _toy_pairs(model, clean, corrupt, answer, wrong)
    if metric == "logit_diff":
        if pairs.wrong is None:
            raise ConfigError("the logit difference needs a wrong token beside the answer")
        if bool((pairs.wrong == pairs.answer).any()):
            raise ConfigError("the answer and the wrong token are the same token: their logit difference is always 0")
    return pairs


def _toy_pairs(run, clean, corrupt, answer, wrong) -> Pairs:
    if not hasattr(run, "cfg") or not hasattr(run, "model"):
        raise ConfigError(
            f"edge circuits take a pretrained model (load_pretrained) or a trained toy run, got {type(run).__name__}"
        )
    cfg = run.cfg
    cleans = _as_list(clean, _many_ids)
    corrupts = _as_list(corrupt, _many_ids)
    if len(cleans) != len(corrupts):
        raise ConfigError(f"{len(cleans)} clean prompts and {len(corrupts)} corrupted ones: give them in pairs")

    def ids(seq) -> list[int]:
        out = [int(t) for t in seq]
        bad = [t for t in out if not 0 <= t < cfg.vocab]
        if bad:
            raise ConfigError(f"token id {bad[0]} is outside the model's vocabulary of {cfg.vocab}")
        if not 1 <= len(out) <= cfg.length:
            raise ConfigError(f"a prompt of {len(out)} tokens: this model reads 1 to {cfg.length}")
        return out

    a, b = [ids(s) for s in cleans], [ids(s) for s in corrupts]
    for x, y in zip(a, b):
        if len(x) != len(y) or len(x) != len(a[0]):
            other = y if len(x) != len(y) else a[0]
            raise _unequal([str(t) for t in x], [str(t) for t in other])

    def token(t, what: str) -> int:
        if isinstance(t, (list, tuple)) and len(t) != 1:
            raise ConfigError(f"the {what} is {len(t)} tokens: the metric needs a single token")
        value = t[0] if isinstance(t, (list, tuple)) else t
        if not _is_token(value):
            raise ConfigError(f"the {what} of a toy model is a token id, got {type(value).__name__}")
        if not 0 <= int(value) < cfg.vocab:
            raise ConfigError(f"the {what} id {int(value)} is outside the model's vocabulary of {cfg.vocab}")
        return int(value)

    def per_pair(value, what: str) -> list[int]:
        if isinstance(value, (list, tuple)) and len(value) == len(a) and len(a) > 1:
            return [token(t, what) for t in value]
        return [token(value, what)] * len(a)

    answers = per_pair(answer, "answer")
    wrongs = None if wrong is None else per_pair(wrong, "wrong token")
    return Pairs(
        torch.tensor(a),
        torch.tensor(b),
        None,
        torch.tensor(answers),
        None if wrongs is None else torch.tensor(wrongs),
        [str(t) for t in a[0]],
        [str(t) for t in b[0]],
    )


def metric_rows(
    name: str, logits: torch.Tensor, pairs: Pairs, pair: torch.Tensor, reference: torch.Tensor | None
) -> torch.Tensor:
    """[B] float64 metric of each row (its pair's answer / wrong token / clean distribution)."""
    wrong = None if pairs.wrong is None else pairs.wrong[pair]
    return metric_values(name, logits, pairs.answer[pair], wrong, None if reference is None else reference[pair])


def budget_rows(engine: Engine, pairs: Pairs, budget: int, pairs_per_row: int, grad: bool, reserve: int) -> int:
    """Rows one pass may hold within ``budget``; a one-line ConfigError saying what fits when none does."""
    length = int(pairs.clean.shape[1])
    dec = 0 if pairs.decoder is None else int(pairs.decoder.shape[1])
    one = engine.pass_bytes(length, dec, 1, pairs_per_row, grad)
    rows = (budget - reserve) // one
    if rows >= 1:
        return int(rows)
    fits = 0
    for n in range(length - 1, 0, -1):
        if reserve + engine.pass_bytes(n, min(dec, n), 1, pairs_per_row, grad) <= budget:
            fits = n
            break
    what = f"prompts of at most {fits} tokens fit" if fits else "not even one token fits"
    raise ConfigError(
        f"one edge-patching pass of {length} tokens needs about {format_bytes(reserve + one)}, over the memory "
        f"budget of {format_bytes(budget)}: {what}; shorten the prompts or raise the budget"
    )


__all__ = [
    "COVERED",
    "COVERED_NAMES",
    "KINDS",
    "Engine",
    "Graph",
    "Pairs",
    "Pass",
    "Senders",
    "Site",
    "Values",
    "alignment",
    "budget_rows",
    "edge_graph",
    "make_pairs",
    "metric_rows",
]


def edge_graph(model) -> pd.DataFrame:
    """Every edge of the model's graph as rows (src, dst, kind), in the order ``edge_scores`` gives."""
    edges = Engine(model).graph.edges()
    import pandas as pd

    return pd.DataFrame(edges, columns=["src", "dst", "kind"])
