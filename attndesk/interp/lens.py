"""The logit lens (nostalgebraist 2020) and direct logit attribution.

The unembedding is what the model does after its last layer: the final norm, then (where the
model has them) T5's tied-embedding scale, OPT's ``project_out``, the LM head, BART's
``final_logits_bias`` and Gemma 2's final soft-cap. ``unembedding`` finds it and checks it: the
last layer's output through it must give the model's own logits, else the model is refused.

- ``logit_lens``: the residual stream entering each layer, and the last layer's output, through
  the unembedding: the top-k tokens per layer and position (and the answer's probability).
- ``direct_logit_attribution``: each head's direct contribution to the answer's logit (or the
  logit difference answer - wrong) at the last position: the head's context through its slice of
  the output projection, the final norm with its scale frozen at the real run's value, and the
  unembedding's linear part. The embeddings, the output projections' biases, the MLPs and the
  norm's bias make up the rest; their sum is checked against the model's logit (models whose
  blocks normalise a block's output before adding it, like Gemma 2, do not decompose: a notice
  says so and gives the error). Gemma 2's soft-cap is left out: attributions are pre-cap logits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from attndesk.errors import ConfigError
from attndesk.models.loader import LoadedModel
from attndesk.models.token_text import id_texts

from .anatomy import LayerParts, check_lm, layer_parts
from .inputs import Prompt, hooks, last_logits, prompt, token_id

_NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_layernorm", "layer_norm")


@dataclass
class Unembedding:
    """final norm (or None) -> linear head: ``after_norm`` maps normed [.., E] to pre-cap logits."""

    norm: nn.Module | None
    after_norm: Callable[[torch.Tensor], torch.Tensor]
    softcap: float | None

    def logits(self, resid: torch.Tensor) -> torch.Tensor:
        y = self.after_norm(self.norm(resid) if self.norm is not None else resid)
        return y if self.softcap is None else torch.tanh(y / self.softcap) * self.softcap


def _stack(model: LoadedModel) -> nn.Module:
    base = model.model.base_model if hasattr(model.model, "base_model") else model.model
    if model.family == "encoder-decoder":
        return model.model.get_decoder()
    return getattr(base, "decoder", base)  # OPT keeps its layers and final norm in model.decoder


def _final_norm(model: LoadedModel) -> nn.Module | None:
    children = dict(_stack(model).named_children())
    for name in _NORM_NAMES:
        if name in children:
            return children[name]
    return None


def unembedding(model: LoadedModel) -> Unembedding:
    head = check_lm(model, "the logit lens")
    config = model.model.config
    scale = 1.0
    if config.model_type in ("t5", "mt5", "umt5") and getattr(config, "tie_word_embeddings", False):
        scale = float(config.d_model) ** -0.5
    project = getattr(_stack(model), "project_out", None)
    bias = getattr(model.model, "final_logits_bias", None)

    def after_norm(y: torch.Tensor) -> torch.Tensor:
        y = y * scale if scale != 1.0 else y
        y = project(y) if project is not None else y
        out = head(y).float()
        return out + bias.to(out.dtype) if bias is not None else out

    return Unembedding(_final_norm(model), after_norm, getattr(config, "final_logit_softcapping", None))


def _residuals(model: LoadedModel, p: Prompt) -> tuple[list[LayerParts], torch.Tensor, dict, torch.Tensor]:
    """(the layers the lens reads, the residual entering each and leaving the last [N+1, L, E],
    every head's context at the o_proj input and each attention/MLP output per layer, logits)."""
    part = "decoder" if model.family == "encoder-decoder" else "self"
    table = layer_parts(model)
    layers = table[part]
    store: dict = {}
    pre: dict = {parts.block: (lambda m, x, n=parts.layer: store.__setitem__(("resid", n), x)) for parts in layers}
    post: dict = {layers[-1].block: lambda m, x: store.__setitem__(("resid", len(layers)), x)}
    extra = [(part, parts) for parts in layers] + [("cross", parts) for parts in table.get("cross", [])]
    for which, parts in extra:
        pre[parts.out_proj] = lambda m, x, k=(which, parts.layer): store.__setitem__(("z",) + k, x)
        post[parts.attention] = lambda m, x, k=(which, parts.layer): store.__setitem__(("attn",) + k, x)
        if which == part and parts.mlp is not None:
            post[parts.mlp] = lambda m, x, n=parts.layer: store.__setitem__(("mlp", n), x)
    with torch.inference_mode(), hooks(pre, post, lock=model._lock):
        logits = last_logits(model, p.ids, p.decoder_ids)
    width = store[("resid", 0)].shape[-1]
    resid = torch.stack([store[("resid", n)].reshape(-1, width) for n in range(len(layers) + 1)]).float()
    return layers, resid, store, logits[0]


def _checked(model: LoadedModel, lens: Unembedding, resid: torch.Tensor, logits: torch.Tensor) -> None:
    with torch.inference_mode():
        mine = lens.logits(resid[-1, -1:])[0]
    if not torch.allclose(mine, logits, rtol=1e-4, atol=1e-4 * float(logits.abs().max())):
        raise ConfigError(
            f"{model.name}: its last layer's output through the final norm and the LM head does not give "
            "its own logits (an unembedding attndesk does not know): the logit lens is not available"
        )


@dataclass
class LogitLens:
    """``top_ids`` / ``top_probs`` [N+1, L, k] and ``top_tokens``: per residual stream (``labels``:
    entering layer 0..N-1, then the output) and position; ``answer_prob`` [N+1, L] when asked."""

    tokens: list[str]
    labels: list[str]
    top_ids: np.ndarray
    top_probs: np.ndarray
    top_tokens: list[list[list[str]]]
    answer: str | None = None
    answer_prob: np.ndarray | None = None
    answer_rank: np.ndarray | None = None


def logit_lens(
    model: LoadedModel, text: str, *, k: int = 5, answer: str | int | None = None, target: str | None = None
) -> LogitLens:
    """Each layer's residual stream through the final norm and the unembedding (see the module docstring)."""
    lens = unembedding(model)
    answer_id = None if answer is None else token_id(model, answer, "answer")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be a positive number of tokens, got {k!r}")
    p = prompt(model, text, target)
    layers, resid, _, logits = _residuals(model, p)
    _checked(model, lens, resid, logits)
    ids, probs, answer_prob, rank = [], [], [], []
    with torch.inference_mode():
        for level in resid:  # one layer at a time: [L, V] logits, never [N+1, L, V]
            logp = torch.log_softmax(lens.logits(level), dim=-1)
            top = torch.topk(logp, min(k, logp.shape[-1]))
            ids.append(top.indices.cpu().numpy())
            probs.append(top.values.exp().cpu().numpy())
            if answer_id is not None:
                answer_prob.append(logp[:, answer_id].exp().cpu().numpy())
                rank.append((logp > logp[:, answer_id : answer_id + 1]).sum(-1).cpu().numpy())
    top_ids = np.stack(ids)
    names = [[id_texts(model.tokenizer, row.tolist()) for row in level] for level in top_ids]
    tokens = list(p.decoder_tokens) if p.decoder_ids is not None else list(p.tokens)
    labels = [f"layer {n} in" for n in range(len(layers))] + ["output"]
    return LogitLens(
        tokens,
        labels,
        top_ids,
        np.stack(probs),
        names,
        None if answer_id is None else _token(model, answer_id),
        None if answer_id is None else np.stack(answer_prob),
        None if answer_id is None else np.stack(rank),
    )


def frozen_norm(norm: nn.Module | None, x: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """(c -> the norm's linear part at ``x`` [E] with its scale frozen, the norm's bias [E]):
    norm(x) = frozen(x) + bias exactly. LayerNorm centres and divides by the std; RMSNorm divides
    by the root mean square; the gain is ``weight`` (or ``1 + weight``, Gemma's), whichever
    reproduces the module's own output."""
    if norm is None:
        return (lambda c: c), torch.zeros_like(x)
    centred = isinstance(norm, nn.LayerNorm)
    eps = next((float(getattr(norm, n)) for n in ("eps", "variance_epsilon") if hasattr(norm, n)), 1e-6)
    weight = getattr(norm, "weight", None)
    bias = getattr(norm, "bias", None)
    bias = torch.zeros_like(x) if bias is None else bias.detach().float()
    centre = (lambda c: c - c.mean(-1, keepdim=True)) if centred else (lambda c: c)
    scale = torch.sqrt((centre(x) ** 2).mean() + eps)
    with torch.inference_mode():
        actual = norm(x[None])[0].float()
    for gain in [torch.ones_like(x)] if weight is None else [weight.detach().float(), 1.0 + weight.detach().float()]:
        if torch.allclose(centre(x) / scale * gain + bias, actual, rtol=1e-4, atol=1e-5 * float(actual.abs().max())):
            return (lambda c, g=gain: centre(c) / scale * g), bias
    raise ConfigError(
        f"the final norm ({type(norm).__name__}) is neither a LayerNorm nor an RMSNorm attndesk knows: "
        "direct logit attribution needs its scale"
    )


@dataclass
class DirectLogitAttribution:
    """Direct contributions to ``metric`` (the answer's logit, or answer - wrong) at the last
    position: ``heads[part]`` [N, H], ``head_bias[part]`` [N] (the output projections' biases),
    ``mlp`` [N], ``embed`` and ``norm_bias``. ``total`` is the model's own value; ``error`` the
    relative gap between it and the sum of all parts (0 up to rounding where blocks add their
    outputs to the residual stream directly)."""

    answer: str
    wrong: str | None
    heads: dict[str, np.ndarray]
    head_bias: dict[str, np.ndarray]
    mlp: np.ndarray
    embed: float
    norm_bias: float
    total: float
    error: float
    notices: list[str] = field(default_factory=list)

    @property
    def reconstructed(self) -> float:
        parts = sum(float(h.sum()) for h in self.heads.values()) + sum(float(b.sum()) for b in self.head_bias.values())
        return parts + float(self.mlp.sum()) + self.embed + self.norm_bias


def _head_outputs(parts: LayerParts, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's per-head outputs [H, E] at one position from its context z [H*d], and the bias [E]."""
    h, d = parts.heads, parts.head_dim
    blocks = torch.zeros(h, h * d, dtype=z.dtype, device=z.device)
    for head in range(h):
        blocks[head, head * d : (head + 1) * d] = z[head * d : (head + 1) * d]
    with torch.inference_mode():
        bias = parts.out_proj(torch.zeros(1, h * d, dtype=z.dtype, device=z.device))[0]
        return parts.out_proj(blocks) - bias, bias


def direct_logit_attribution(
    model: LoadedModel, text: str, answer: str | int, wrong: str | int | None = None, *, target: str | None = None
) -> DirectLogitAttribution:
    """Each head's direct effect on the answer's logit (see the module docstring)."""
    lens = unembedding(model)
    answer_id = token_id(model, answer, "answer")
    wrong_id = None if wrong is None else token_id(model, wrong, "wrong token")
    p = prompt(model, text, target)
    layers, resid, store, logits = _residuals(model, p)
    _checked(model, lens, resid, logits)
    final = resid[-1, -1]
    linear, norm_bias = frozen_norm(lens.norm, final)

    def direct(vectors: torch.Tensor) -> np.ndarray:  # [K, E] -> [K] contribution to the metric
        with torch.inference_mode():
            out = (
                lens.after_norm(linear(vectors.float())).double()
                - lens.after_norm(torch.zeros_like(final)[None]).double()
            )
        out = out.double()  # the answer's and the wrong token's logits are close: subtract in float64
        value = out[:, answer_id] - (out[:, wrong_id] if wrong_id is not None else 0.0)
        return value.cpu().numpy()

    heads, biases, parts_sum = {}, {}, resid[0, -1].clone()
    for part in [k[1] for k in store if k[0] == "z" and k[2] == 0]:
        group = layer_parts(model)[part]
        outs = [
            _head_outputs(parts, store[("z", part, parts.layer)].reshape(-1, parts.heads * parts.head_dim)[-1].float())
            for parts in group
        ]
        heads[part] = np.stack([direct(o) for o, _ in outs])
        biases[part] = direct(torch.stack([b for _, b in outs]))
        parts_sum += sum(o.sum(0) + b for o, b in outs)
    mlp_out = [
        store[("mlp", n)].reshape(-1, final.shape[-1])[-1].float() for n in range(len(layers)) if ("mlp", n) in store
    ]
    parts_sum += sum(mlp_out) if mlp_out else 0.0
    mlp = direct(torch.stack(mlp_out)) if mlp_out else np.zeros(0)
    with torch.inference_mode():
        zero = lens.after_norm(torch.zeros_like(final)[None])[0].double()
    constant = float(zero[answer_id] - (zero[wrong_id] if wrong_id is not None else 0.0))
    with torch.inference_mode():
        pre_cap = lens.after_norm(lens.norm(final[None]) if lens.norm is not None else final[None])[0].double()
    total = float(pre_cap[answer_id] - (pre_cap[wrong_id] if wrong_id is not None else 0.0))
    result = DirectLogitAttribution(
        _token(model, answer_id),
        None if wrong_id is None else _token(model, wrong_id),
        heads,
        biases,
        mlp,
        float(direct(resid[0, -1:])[0]),
        float(direct(norm_bias[None])[0]) + constant,
        total,
        0.0,
    )
    _flag_approximate(result, total, float((parts_sum - final).norm() / final.norm()), model.name)
    return result


def _flag_approximate(result: DirectLogitAttribution, total: float, gap: float, name: str) -> None:
    """Set ``result.error`` (how far the parts' sum is from ``total``); where it, or ``gap`` (how far
    the parts miss the residual stream), is over 0.1%, a notice says the attributions are approximate."""
    result.error = abs(result.reconstructed - total) / max(abs(total), 1e-12)
    if gap > 1e-3 or result.error > 1e-3:
        result.notices.append(
            f"{name}'s blocks do not add their outputs straight to the residual stream "
            f"(the parts miss it by {gap:.1%}): these direct attributions are approximate"
        )


def _token(model: LoadedModel, token: int) -> str:
    return id_texts(model.tokenizer, [token])[0]


__all__ = [
    "DirectLogitAttribution",
    "LogitLens",
    "Unembedding",
    "direct_logit_attribution",
    "frozen_norm",
    "logit_lens",
    "unembedding",
]
