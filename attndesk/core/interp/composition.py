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

from ..errors import ConfigError
from .score_terms import _decoder_of

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
    inner = _decoder_of(model)
    if inner is None:
        raise ConfigError(f"weight-only views read a trained toy decoder, not a {type(model).__name__}")
    return inner


def head_weights(model) -> HeadWeights:
    """Every head's W_Q, W_K, W_V, W_O of a trained run (or its decoder), ln1's gain folded in."""
    decoder = _decoder(model)
    qs, ks, vs, os_ = [], [], [], []
    with torch.no_grad():
        for block in decoder.blocks:
            attn = block.attn
            gain = block.ln1.weight.double() if block.ln1 is not None else None
            d = attn.head_dim

            def read(linear, heads: int, gain=gain, d=d) -> torch.Tensor:
                w = linear.weight.double().T  # [E, heads d]
                if gain is not None:
                    w = gain[:, None] * w
                return w.reshape(w.shape[0], heads, d).permute(1, 0, 2)  # [heads, E, d]

            qs.append(read(attn.q_proj, attn.heads))
            ks.append(read(attn.k_proj, attn.kv_heads))
            vs.append(read(attn.v_proj, attn.kv_heads))
            os_.append(attn.out_proj.weight.double().T.reshape(attn.heads, d, -1))  # [H, d, E]
    return HeadWeights(torch.stack(qs), torch.stack(ks), torch.stack(vs), torch.stack(os_))


def composition_scores(model, mode: str) -> np.ndarray:
    """[L, H, L, H]: how much head (l1, h1)'s output feeds head (l2, h2)'s query ("Q"), key ("K")
    or value ("V"); zero unless l1 < l2."""
    if mode not in MODES:
        raise ConfigError(f"the composition is one of {', '.join(MODES)}, got {mode!r}")
    w = head_weights(model)
    left = w.ov()  # [L, H, E, E]
    right = w.ov() if mode == "V" else w.qk() if mode == "Q" else w.qk().transpose(-2, -1)
    products = torch.einsum("ahef,bifg->ahbieg", left, right)  # [L, H, L, H, E, E]
    norms = torch.linalg.matrix_norm(products)  # [L, H, L, H]
    scores = norms / torch.linalg.matrix_norm(left)[:, :, None, None] / torch.linalg.matrix_norm(right)[None, None]
    layers = scores.shape[0]
    later = torch.arange(layers)[:, None] < torch.arange(layers)[None, :]  # l1 < l2
    return (scores * later[:, None, :, None]).numpy()


def _unembedding(decoder) -> torch.Tensor:
    w = decoder.unembed.weight.double().T  # [E, V]
    if decoder.ln_f is not None:
        w = decoder.ln_f.weight.double()[:, None] * w
    return w


def ov_copying_scores(model) -> np.ndarray:
    """[L, H]: sum(l) / sum(|l|) over the eigenvalues l of W_E W_OV W_U (see the module docstring)."""
    decoder = _decoder(model)
    with torch.no_grad():
        embed, unembed = decoder.embed.weight.double(), _unembedding(decoder)  # [V, E], [E, V]
        small = head_weights(model).ov() @ (unembed @ embed)  # [L, H, E, E]
        values = torch.linalg.eigvals(small)
    return (values.sum(-1).real / values.abs().sum(-1)).numpy()


def positional_table(model) -> torch.Tensor:
    """[L, E] the positions added to the token embeddings (learned or sinusoidal), float64."""
    decoder = _decoder(model)
    if decoder.pos is not None:
        return decoder.pos.weight.detach().double()
    if decoder.cfg.position == "sinusoidal":
        return decoder.sinusoid.double()
    raise ConfigError(
        f"this model's positions are {decoder.cfg.position!r}: the positional QK circuit needs a "
        "position table added to the embeddings (learned or sinusoidal)"
    )


def qk_positional(model) -> tuple[np.ndarray, np.ndarray]:
    """(circuits [Ls, H, P, P] = P W_QK P^T per head, previous-token scores [Ls, H]) over the first
    layer-input position table P (see the module docstring)."""
    table = positional_table(model)
    w = head_weights(model)
    circuits = table @ w.qk() @ table.T  # [Ls, H, P, P]
    scale = 1.0 / math.sqrt(w.q.shape[-1])
    length = table.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    weights = torch.softmax((circuits * scale).masked_fill(~causal, float("-inf")), dim=-1)
    previous = weights[..., torch.arange(1, length), torch.arange(0, length - 1)].mean(-1)
    return circuits.numpy(), previous.numpy()


__all__ = ["MODES", "HeadWeights", "composition_scores", "head_weights", "ov_copying_scores", "qk_positional"]
