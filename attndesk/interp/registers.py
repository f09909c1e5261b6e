"""Registers and high-norm tokens of a vision transformer (Qt-free), after Darcet et al., 2024,
"Vision Transformers Need Registers": a model without registers repurposes a few background
patches as stores of global information; their output norms stand out and attention gathers on
them. With registers, the registers take that role.

Both functions read arrays only: ``weights [layers, heads, N, N]`` (one image's attention) and
``norms [layers, N]`` (each layer's output token norms), with the token names as
``run_pretrained`` gives them: ``"[CLS]"``, ``"[DIST]"``, ``"[REG0]"``, ..., ``"(r,c)"`` for patches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.errors import ConfigError

HIGH_NORM_RATIO = 2.0  # a token stands out when its norm exceeds this many times the layer's median patch norm


def _is_patch(name: str) -> bool:
    return name.startswith("(") and name.endswith(")")


def _kinds(tokens: list[str]) -> tuple[list[int], list[int], list[int]]:
    """(register positions, class-token positions, patch positions) of a token list."""
    registers = [i for i, t in enumerate(tokens) if t.startswith("[REG")]
    cls = [i for i, t in enumerate(tokens) if t == "[CLS]"]
    patches = [i for i, t in enumerate(tokens) if _is_patch(t)]
    return registers, cls, patches


@dataclass(frozen=True)
class RegisterShares:
    """Per layer and head, the mean weight a patch query puts on each register
    (``registers [layers, heads, R]``), on the class token (``cls [layers, heads]``) and on the
    ``top`` patches the head attends to most on average (``top_patches [layers, heads]``: the
    shares of the patch keys that gather attention)."""

    register_names: list[str]
    registers: np.ndarray
    cls: np.ndarray
    top_patches: np.ndarray
    top: int


def register_shares(weights, tokens: list[str], *, top: int = 1) -> RegisterShares:
    """Where a vision transformer's patches look: see ``RegisterShares``. Averaged over the patch
    queries (the rows of the image's patches), in float64."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2] or w.shape[-1] != len(tokens):
        raise ConfigError(f"weights must be [layers, heads, N, N] with N = {len(tokens)} tokens, got shape {w.shape}")
    registers, cls, patches = _kinds(tokens)
    if not patches:
        raise ConfigError("no patch tokens '(r,c)' among the tokens")
    rows = w[:, :, patches, :].mean(axis=2)  # [layers, heads, N]: the mean patch query's weights
    on_patches = np.sort(rows[:, :, patches], axis=-1)[:, :, ::-1]
    return RegisterShares(
        [tokens[i] for i in registers],
        rows[:, :, registers],
        rows[:, :, cls].sum(axis=-1),
        on_patches[:, :, : max(1, top)].sum(axis=-1),
        max(1, top),
    )


@dataclass(frozen=True)
class HighNorm:
    """Per layer, the median norm of the patch tokens and the tokens (any kind) whose norm
    exceeds ``ratio`` times it, as (layer, token name, norm, norm / median)."""

    median: np.ndarray
    ratio: float
    outliers: list[tuple[int, str, float, float]]


def high_norm_tokens(norms, tokens: list[str], *, ratio: float = HIGH_NORM_RATIO) -> HighNorm:
    """The tokens whose output norm stands out in each layer (see ``HighNorm``)."""
    n = np.asarray(norms, dtype=np.float64)
    if n.ndim != 2 or n.shape[-1] != len(tokens):
        raise ConfigError(f"norms must be [layers, N] with N = {len(tokens)} tokens, got shape {n.shape}")
    if not ratio > 1.0:
        raise ConfigError(f"ratio must exceed 1, got {ratio}")
    _, _, patches = _kinds(tokens)
    if not patches:
        raise ConfigError("no patch tokens '(r,c)' among the tokens")
    median = np.median(n[:, patches], axis=-1)
    outliers = [
        (layer, tokens[i], float(n[layer, i]), float(n[layer, i] / median[layer]))
        for layer in range(n.shape[0])
        for i in range(n.shape[1])
        if median[layer] > 0 and n[layer, i] > ratio * median[layer]
    ]
    return HighNorm(median, ratio, outliers)


def vision_registers(result, *, top: int = 1, ratio: float = HIGH_NORM_RATIO) -> tuple[RegisterShares, HighNorm]:
    """Both measures on one image's run of a vision model (``run_pretrained``'s ``VisionResult``:
    its weights, token names and every layer's output hidden states)."""
    hidden = getattr(result, "hidden_states", None)
    if hidden is None or getattr(result, "window_weights", None) is not None:
        raise ConfigError("registers and token norms need a vision run with one token grid and its hidden states")
    norms = np.linalg.norm(np.asarray(hidden, dtype=np.float64)[1:], axis=-1)  # each layer's output, [layers, N]
    return register_shares(result.weights, list(result.tokens), top=top), high_norm_tokens(
        norms, list(result.tokens), ratio=ratio
    )


__all__ = ["HIGH_NORM_RATIO", "HighNorm", "RegisterShares", "high_norm_tokens", "register_shares", "vision_registers"]
