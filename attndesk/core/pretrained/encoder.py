"""A BERT encoder whose every attention is attndesk's own ``MultiHeadAttention``.

    x = LayerNorm(word[ids] + position[0..L) + token_type[types])
    per layer:  a = LayerNorm(x + MHA(x))          (post-norm, as BERT)
                x = LayerNorm(a + W2 GELU(W1 a))

Checkpoint tensors (Hugging Face BERT names) map one to one onto our modules; see ``load_weights``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention
from ..timing import NULL_TIMER
from .checkpoint import BertSpec


class Embeddings(nn.Module):
    def __init__(self, spec: BertSpec):
        super().__init__()
        e = spec.hidden_size
        self.word = nn.Embedding(spec.vocab_size, e)
        self.position = nn.Embedding(spec.max_positions, e)
        self.token_type = nn.Embedding(spec.type_vocab_size, e)
        self.norm = nn.LayerNorm(e, eps=spec.layer_norm_eps)

    def forward(self, ids: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, L] -> [B, L, E]."""
        positions = torch.arange(ids.shape[1], device=ids.device)  # [L], broadcast over the batch
        if token_types is None:
            token_types = torch.zeros_like(ids)
        return self.norm(self.word(ids) + self.position(positions) + self.token_type(token_types))


class EncoderLayer(nn.Module):
    def __init__(self, spec: BertSpec):
        super().__init__()
        e = spec.hidden_size
        self.attention = MultiHeadAttention(e, spec.num_heads, dropout=0.0, bias=True)
        self.attention_norm = nn.LayerNorm(e, eps=spec.layer_norm_eps)
        self.ffn_in = nn.Linear(e, spec.intermediate_size)
        self.ffn_out = nn.Linear(spec.intermediate_size, e)
        self.ffn_norm = nn.LayerNorm(e, eps=spec.layer_norm_eps)
        self.gelu = spec.gelu

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        *,
        scale: float | None = None,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, E] -> (x [B, L, E], weights [B, H, L, L])."""
        attended, weights = self.attention(x, mask=mask, scale=scale, head_mask=head_mask)
        x = self.attention_norm(x + attended)
        x = self.ffn_norm(x + self.ffn_out(F.gelu(self.ffn_in(x), approximate=self.gelu)))
        return x, weights


class BertEncoder(nn.Module):
    """Embeddings plus ``spec.num_layers`` encoder layers; no pooler (we mean-pool)."""

    def __init__(self, spec: BertSpec):
        super().__init__()
        self.spec = spec
        self.embeddings = Embeddings(spec)
        self.layers = nn.ModuleList(EncoderLayer(spec) for _ in range(spec.num_layers))

    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        scale: float | None = None,
        head_masks: list[torch.Tensor | None] | None = None,
        timer=NULL_TIMER,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """ids [B, L] -> (hidden states: L+1 tensors [B, L, E], weights: one [B, H, L, L] per layer).

        ``timer`` gets the stages "embed" and "layer 0", "layer 1", ...
        """
        with timer.stage("embed"):
            x = self.embeddings(ids)
        hidden, weights = [x], []
        for n, layer in enumerate(self.layers):
            with timer.stage(f"layer {n}"):
                x, w = layer(x, mask, scale=scale, head_mask=None if head_masks is None else head_masks[n])
            hidden.append(x)
            weights.append(w)
        return hidden, weights


def checkpoint_names(spec: BertSpec) -> dict[str, str]:
    """Our parameter name -> the checkpoint's (Hugging Face BERT) tensor name."""
    names = {
        "embeddings.word.weight": "embeddings.word_embeddings.weight",
        "embeddings.position.weight": "embeddings.position_embeddings.weight",
        "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "embeddings.LayerNorm.weight",
        "embeddings.norm.bias": "embeddings.LayerNorm.bias",
    }
    parts = {
        "attention.q_proj": "attention.self.query",
        "attention.k_proj": "attention.self.key",
        "attention.v_proj": "attention.self.value",
        "attention.out_proj": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "ffn_in": "intermediate.dense",
        "ffn_out": "output.dense",
        "ffn_norm": "output.LayerNorm",
    }
    for n in range(spec.num_layers):
        for ours, theirs in parts.items():
            for kind in ("weight", "bias"):
                names[f"layers.{n}.{ours}.{kind}"] = f"encoder.layer.{n}.{theirs}.{kind}"
    return names


def build_encoder(spec: BertSpec, tensors: dict[str, torch.Tensor], device: torch.device | str = "cpu") -> BertEncoder:
    """The encoder with the checkpoint's tensors as its parameters, in eval mode, frozen.

    The loaded tensors replace the initial ones (assign=True, no copy). Not built on the meta
    device: its first use costs ~1 s of one-time setup, five times the random init it would save.
    """
    encoder = BertEncoder(spec)
    state = {ours: tensors[theirs] for ours, theirs in checkpoint_names(spec).items()}
    encoder.load_state_dict(state, strict=True, assign=True)
    return encoder.to(device).eval().requires_grad_(False)
