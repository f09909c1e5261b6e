"""Weight-only views of a trained toy decoder's heads (Elhage et al., "A Mathematical Framework for
Transformer Circuits"), in float64, in the row-vector convention (a residual row x reads x W_Q):

- the OV circuit W_OV = W_V W_O (E x E) and the QK circuit W_QK = W_Q W_K^T (E x E) of each head;
  a query head reads its group's K/V weights (grouped heads are indexed, never copied out);
- the OV copying score: the eigenvalues l of the full OV circuit W_E W_OV W_U (vocab x vocab),
  sum(l) / sum(|l|), from the E x E product W_OV W_U W_E, which has the same non-zero eigenvalues;
  1 for a head that copies each token to itself;
- the positional QK circuit P W_QK P^T [L, L] over the position table P (learned or sinusoidal
  positions), and its previous-token score: the causal softmax of scale P W_QK P^T, averaged over
  queries i >= 1, at key i - 1;
- the composition scores between a head h1 of layer l1 and a head h2 of a later layer l2:
  Q: ||W_OV^h1 W_QK^h2|| / (||W_OV^h1|| ||W_QK^h2||), K: the same with W_QK^h2 transposed, V:
  with W_OV^h2 (Frobenius norms); zero where l1 >= l2.

A pre-LayerNorm's gain is folded into the weights that read through it (W_Q, W_K, W_V by ln1, W_U
by the final norm), as TransformerLens' fold_ln does; the centring and the per-token scale are
what no weight-only view can hold. Biases are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attndesk.errors import ConfigError
from attndesk.models.loader import LoadedModel, output_embeddings

from .anatomy import hidden_size, input_embeddings, layer_parts
from .score_terms import _decoder_of, _norm_of

MODES = ("Q", "K", "V")


@dataclass(frozen=True)
class HeadWeights:
    """q [L, H, E, d], k and v [L, KV, E, d], o [L, H, d, E] (float64): query head h reads K/V head
    h // (H / KV)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor

    @property
    def group(self) -> int:
        return self.q.shape[1] // self.k.shape[1]

    def ov(self) -> torch.Tensor:
        """[L, H, E, E]: W_V (of the head's group) W_O."""
        return torch.einsum("lhed,lhdf->lhef", self.v.repeat_interleave(self.group, dim=1), self.o)

    def qk(self) -> torch.Tensor:
        """[L, H, E, E]: W_Q W_K^T (of the head's group)."""
        return torch.einsum("lhed,lhfd->lhef", self.q, self.k.repeat_interleave(self.group, dim=1))


def _decoder(model):
    return _decoder_of(model)


@dataclass(frozen=True)
class ModelWeights:
    """What the views read: the heads, W_E [V, E], W_U [E, V] (the final norm's gain folded in)
    and the position table [P, E] added to the embeddings (None without one; ``positions`` names
    the scheme for the refusal)."""

    heads: HeadWeights
    embed: torch.Tensor
    unembed: torch.Tensor | None  # None: a checkpoint without its LM head
    table: torch.Tensor | None
    positions: str


def _read(weight: torch.Tensor, heads: int, gain: torch.Tensor | None) -> torch.Tensor:
    """[E, heads d] (x @ W) -> [heads, E, d], the norm's gain folded into the rows."""
    w = weight.double()
    if gain is not None:
        w = gain[:, None] * w
    return w.reshape(w.shape[0], heads, -1).permute(1, 0, 2)


def _toy_weights(decoder) -> ModelWeights:
    qs, ks, vs, os_ = [], [], [], []
    for block in decoder.blocks:
        attn = block.attn
        gain = block.ln1.weight.detach().double() if block.ln1 is not None else None
        qs.append(_read(attn.q_proj.weight.detach().T, attn.heads, gain))
        ks.append(_read(attn.k_proj.weight.detach().T, attn.kv_heads, gain))
        vs.append(_read(attn.v_proj.weight.detach().T, attn.kv_heads, gain))
        os_.append(attn.out_proj.weight.detach().double().T.reshape(attn.heads, attn.head_dim, -1))  # [H, d, E]
    unembed = decoder.unembed.weight.detach().double().T  # [E, V]
    if decoder.ln_f is not None:
        unembed = decoder.ln_f.weight.detach().double()[:, None] * unembed
    table = None
    if decoder.pos is not None:
        table = decoder.pos.weight.detach().double()
    elif decoder.cfg.position == "sinusoidal":
        table = decoder.sinusoid.double()
    heads = HeadWeights(torch.stack(qs), torch.stack(ks), torch.stack(vs), torch.stack(os_))
    return ModelWeights(heads, decoder.embed.weight.detach().double(), unembed, table, decoder.cfg.position)


_QKV = ("q_proj", "k_proj", "v_proj")
_INPUT_NORMS = ("ln_1", "input_layernorm", "self_attn_layer_norm")  # a block's norm before its attention
_FINAL_NORMS = ("ln_f", "norm", "final_layer_norm")  # the base model's last norm (OPT's under its decoder)
_POSITIONS_KEPT = 128  # the positional QK circuit over the first positions of a long table


def _gain(module: nn.Module | None, width: int) -> torch.Tensor | None:
    return None if module is None else _norm_of(module, width).weight


def _pretrained_weights(model: LoadedModel) -> ModelWeights:
    """GPT-2 (fused ``c_attn``) and LLaMA-shaped decoders (``q_proj``/``k_proj``/``v_proj``),
    each block's input norm's gain folded in; others are refused in one line."""
    if model.family != "decoder":
        raise ConfigError(f"weight-only views read one residual stream: {model.name} is {model.family}")
    width = hidden_size(model)
    heads, kv = model.num_heads, model.kv_heads
    qs, ks, vs, os_ = [], [], [], []
    for parts in layer_parts(model)["self"]:
        children = dict(parts.attention.named_children())
        if any(name in children for name in ("q_norm", "k_norm", "q_layernorm", "k_layernorm")):
            raise ConfigError(
                f"{model.name} normalises its queries and keys per token: its QK circuit is not its weights alone"
            )
        block = dict(parts.block.named_children())
        gain = _gain(next((block[n] for n in _INPUT_NORMS if n in block), None), width)
        with torch.no_grad():
            if "c_attn" in children:  # GPT-2's Conv1D: x @ W, W [E, 3E]
                q, k, v = children["c_attn"].get_parameter("weight").detach().split(width, dim=1)
                kv_count = heads
            elif all(name in children for name in _QKV):
                q, k, v = (children[name].get_parameter("weight").detach().T for name in _QKV)
                kv_count = kv
            else:
                raise ConfigError(
                    f"weight-only views read GPT-2's c_attn or q_proj/k_proj/v_proj; {type(parts.attention).__name__} has neither"
                )
            qs.append(_read(q, heads, gain))
            ks.append(_read(k, kv_count, gain))
            vs.append(_read(v, kv_count, gain))
            out = parts.out_proj.get_parameter("weight").detach().double()
            os_.append((out if hasattr(parts.out_proj, "nf") else out.T).reshape(heads, -1, width))
    base = model.model.base_model
    final = next(
        (m for name, m in base.named_modules() if name.split(".")[-1] in _FINAL_NORMS and name.count(".") <= 1), None
    )
    head = output_embeddings(model.model)
    unembed = None if head is None or model.headless else head.get_parameter("weight").detach().double().T  # [E, V]
    gain = _gain(final, width)
    if gain is not None and unembed is not None:
        unembed = gain[:, None] * unembed
    wpe = getattr(base, "wpe", None)
    table = None if wpe is None else wpe.weight.detach().double()[:_POSITIONS_KEPT]
    heads_w = HeadWeights(torch.stack(qs), torch.stack(ks), torch.stack(vs), torch.stack(os_))
    embed = input_embeddings(model).weight.detach().double()
    return ModelWeights(heads_w, embed, unembed, table, "learned" if wpe is not None else model.spec.positions)


def model_weights(model) -> ModelWeights:
    """The views' weights of a trained run (or its decoder) or a loaded pretrained decoder."""
    decoder = _decoder(model)
    if decoder is not None:
        return _toy_weights(decoder)
    if isinstance(model, LoadedModel):
        return _pretrained_weights(model)
    raise ConfigError(
        f"weight-only views read a trained toy decoder or a pretrained decoder, not a {type(model).__name__}"
    )


def head_weights(model) -> HeadWeights:
    """Every head's W_Q, W_K, W_V, W_O (its block's input-norm gain folded in)."""
    return model_weights(model).heads


def _factors(w: HeadWeights, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [L, H, E, d], B [L, H, d, E]) with the circuit = A B: OV = W_V W_O, QK = W_Q W_K^T, and
    its transpose W_K W_Q^T; a query head's K/V factors are its group's, by index."""
    group = torch.arange(w.q.shape[1]) // w.group
    if mode == "OV":
        return w.v[:, group], w.o
    if mode == "QK":
        return w.q, w.k[:, group].transpose(-2, -1)
    return w.k[:, group], w.q.transpose(-2, -1)  # QK^T


def composition_scores(model, mode: str, *, into: tuple[int, int] | None = None) -> np.ndarray:
    """[L, H, L, H]: how much head (l1, h1)'s output feeds head (l2, h2)'s query ("Q"), key ("K")
    or value ("V"); zero unless l1 < l2. Computed from the factors (d x d products, never E x E):
    ||A B A' B'||^2 = tr((B' B'^T) M^T (A^T A) M) with M = B A'. ``into`` (layer, head): only the
    scores into that head, [L, H] (every earlier head's)."""
    if mode not in MODES:
        raise ConfigError(f"the composition is one of {', '.join(MODES)}, got {mode!r}")
    w = head_weights(model)
    a, b = _factors(w, "OV")
    a2, b2 = _factors(w, {"Q": "QK", "K": "KQ", "V": "OV"}[mode])
    gram_a = a.transpose(-2, -1) @ a  # [L, H, d, d]
    gram_b2 = b2 @ b2.transpose(-2, -1)  # [L, H, d', d']
    left = torch.einsum("lhde,lhed->lh", gram_a, b @ b.transpose(-2, -1)).sqrt()  # ||A B||
    right = torch.einsum("lhde,lhed->lh", a2.transpose(-2, -1) @ a2, gram_b2).sqrt()
    layers, heads = w.q.shape[:2]
    scores = torch.zeros(layers, heads, layers, heads, dtype=torch.float64)
    pairs = [(a, c) for a in range(layers) for c in range(a + 1, layers) if into is None or c == into[0]]
    for first, second in pairs:
        m = torch.einsum("hde,gef->hgdf", b[first], a2[second])  # [H, H, d, d']
        inner = torch.einsum("hdk,hgkf->hgdf", gram_a[first], m)  # (A^T A) M
        square = torch.einsum("gfk,hgdk,hgdf->hg", gram_b2[second], m, inner)
        scores[first, :, second] = square.clamp_min(0).sqrt() / left[first][:, None] / right[second][None]
    return (scores if into is None else scores[:, :, into[0], into[1]]).numpy()


def ov_copying_scores(model) -> np.ndarray:
    """[L, H]: sum(l) / sum(|l|) over the eigenvalues l of W_E W_OV W_U (see the module docstring)."""
    weights = model_weights(model)
    if weights.unembed is None:
        raise ConfigError("the OV copying score reads the unembedding: this checkpoint has no LM head")
    with torch.no_grad():
        a, b = _factors(weights.heads, "OV")
        # the non-zero eigenvalues of W_E A B W_U are those of the d x d B W_U W_E A
        small = b @ (weights.unembed @ weights.embed) @ a
        values = torch.linalg.eigvals(small)
    return (values.sum(-1).real / values.abs().sum(-1)).numpy()


def positional_table(model) -> torch.Tensor:
    """[P, E] the positions added to the token embeddings (learned or sinusoidal), float64."""
    weights = model_weights(model)
    if weights.table is None:
        raise ConfigError(
            f"this model's positions are {weights.positions!r}: the positional QK circuit needs a "
            "position table added to the embeddings (learned or sinusoidal)"
        )
    return weights.table


def qk_positional(model) -> tuple[np.ndarray, np.ndarray]:
    """(circuits [Ls, H, P, P] = P W_QK P^T per head, previous-token scores [Ls, H]) over the first
    layer-input position table P (see the module docstring)."""
    table = positional_table(model)
    w = head_weights(model)
    q, k = _factors(w, "QK")
    circuits = (table @ q) @ (k @ table.T)  # [Ls, H, P, P]
    scale = 1.0 / math.sqrt(w.q.shape[-1])
    length = table.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    weights = torch.softmax((circuits * scale).masked_fill(~causal, float("-inf")), dim=-1)
    previous = weights[..., torch.arange(1, length), torch.arange(0, length - 1)].mean(-1)
    return circuits.numpy(), previous.numpy()


__all__ = [
    "MODES",
    "HeadWeights",
    "ModelWeights",
    "composition_scores",
    "head_weights",
    "model_weights",
    "ov_copying_scores",
    "qk_positional",
]
