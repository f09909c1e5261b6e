"""The decoder the trainer trains, built from attndesk's own ``MultiHeadAttention``.

Each block: (LayerNorm) -> causal multi-head attention (rope / alibi / window / soft-cap / a
softmax sink as the layer does them; a learned sink is a parameter [H] of the block) -> residual; then, with ``mlp``, (LayerNorm) -> 4x GELU MLP -> residual.
Sinusoidal or learned positions are added to the token embeddings; ``none`` adds nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from attndesk.attention.kernel import MultiHeadAttention
from attndesk.attention.masks import causal_mask
from attndesk.attention.positional import sinusoidal_encoding
from attndesk.attention.sinks import sink_parameter

from .config import TrainConfig


class Block(nn.Module):
    """One decoder block around attndesk's attention layer."""

    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.cfg = cfg
        self.attn = MultiHeadAttention(cfg.embed_dim, cfg.heads, kv_heads=cfg.kv_heads)
        sinks = sink_parameter(cfg.sink, cfg.heads)
        if isinstance(sinks, nn.Parameter):
            self.sinks: torch.Tensor | None = sinks  # learned with the rest
        else:  # fixed (off-by-one) or none: not in the checkpoints
            self.register_buffer("sinks", sinks, persistent=False)
        self.ln1 = nn.LayerNorm(cfg.embed_dim) if cfg.layernorm else None
        self.ln2 = nn.LayerNorm(cfg.embed_dim) if cfg.layernorm and cfg.mlp else None
        self.mlp = None
        if cfg.mlp:
            self.mlp = nn.Sequential(
                nn.Linear(cfg.embed_dim, 4 * cfg.embed_dim), nn.GELU(), nn.Linear(4 * cfg.embed_dim, cfg.embed_dim)
            )

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        keep: dict | None = None,
        head_mask: torch.Tensor | None = None,
        query_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, E] -> (x [B, L, E], weights [B, H, L, L]); ``keep`` (a dict) receives the
        attention layer's input as ``embeddings`` and every stage of the layer (``attention.kernel``);
        ``head_mask`` [H] scales each head's context (0 ablates it), ``query_mask`` [H, L] each
        head's query rows (0: the row weighs its keys uniformly)."""
        position = self.cfg.position if self.cfg.position in ("rope", "alibi") else "none"
        h = x if self.ln1 is None else self.ln1(x)
        if keep is not None:
            keep["embeddings"] = h
        out, weights = self.attn(
            h,
            mask=mask,
            position=position,
            window=self.cfg.window,
            softcap=self.cfg.softcap,
            sinks=self.sinks,
            head_mask=head_mask,
            query_mask=query_mask,
            keep=keep,
        )
        x = x + out
        if self.mlp is not None:
            x = x + self.mlp(x if self.ln2 is None else self.ln2(x))
        return x, weights


class Decoder(nn.Module):
    """Token embedding (+ positions) -> ``layers`` blocks -> (LayerNorm) -> unembedding."""

    sinusoid: torch.Tensor  # a buffer [seq_len, embed_dim], registered when position is sinusoidal

    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.embed_dim)
        self.pos = nn.Embedding(cfg.length, cfg.embed_dim) if cfg.position == "learned" else None
        if cfg.position == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_encoding(cfg.length, cfg.embed_dim), persistent=False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.embed_dim) if cfg.layernorm else None
        self.unembed = nn.Linear(cfg.embed_dim, cfg.vocab, bias=False)

    def forward(
        self,
        ids: torch.Tensor,
        keeps: list[dict] | None = None,
        head_mask: torch.Tensor | None = None,
        query_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids int64 [B, L] (L <= seq_len) -> (logits [B, L, vocab], per-layer weights [B, H, L, L]);
        ``keeps`` (one dict per layer) receive each layer's stages (``Block.forward``);
        ``head_mask`` [layers, H] scales each head's context (0 ablates it), ``query_mask``
        [layers, H, L] each head's query rows (0 zeroes the row's query: uniform weights)."""
        length = ids.shape[-1]
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos.weight[:length]
        elif self.cfg.position == "sinusoidal":
            x = x + self.sinusoid[:length]
        mask = causal_mask(length, device=ids.device)
        weights = []
        for i, block in enumerate(self.blocks):
            keep = None if keeps is None else keeps[i]
            heads = None if head_mask is None else head_mask[i]
            x, w = block(x, mask, keep, heads, None if query_mask is None else query_mask[i])
            weights.append(w)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.unembed(x), weights


def head_norms(model: Decoder) -> torch.Tensor:
    """The group-lasso penalty on heads: the sum over every layer of each K/V head's value weights'
    norm (its rows of ``v_proj``, bias included) and each query head's output weights' norm (its
    columns of ``out_proj``). A group's norm has its kink at the group's zero, so the penalty
    drives whole heads to zero rather than single weights (group lasso, Yuan and Lin 2006); both
    ends of the head's OV path are held, so neither can grow to make up for the other shrinking."""
    total = torch.zeros(())
    for attn in (m for m in model.modules() if isinstance(m, MultiHeadAttention)):
        d = attn.head_dim
        value = attn.v_proj.weight.reshape(attn.kv_heads, d, -1)
        if attn.v_proj.bias is not None:
            value = torch.cat([value, attn.v_proj.bias.reshape(attn.kv_heads, d, 1)], dim=-1)
        output = attn.out_proj.weight.reshape(attn.embed_dim, attn.num_heads, d)
        total = total + torch.linalg.vector_norm(value, dim=(1, 2)).sum()
        total = total + torch.linalg.vector_norm(output, dim=(0, 2)).sum()
    return total


def build_model(cfg: TrainConfig, seed: int | None = None) -> Decoder:
    """A decoder with its initial weights from ``seed`` (default ``cfg.seed``), leaving the
    caller's RNG as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed if seed is None else seed)
        return Decoder(cfg)
