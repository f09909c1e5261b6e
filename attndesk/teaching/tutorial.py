"""TEACHING CODE, NOT A MASK TO USE: the padding mask of the tutorial attndesk grew from, kept
exactly as written there, next to the masks it should have been, and the numbers of its effect.

The tutorial (a Chinese blog post on single- and multi-head self-attention in PyTorch) builds
its padding mask with ``create_padding_mark`` (1.0 on real tokens, 0.0 on padding, shaped
[B, 1, L, 1]) and applies it as ``attention_prob += mask * -1e5`` right before the softmax over
the last (key) axis. ``EXPLANATION`` says what that really does; ``tutorial_effect`` measures
it on given scores, and tests/test_tutorial.py checks every claim in float64 and float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attndesk.attention.kernel import masked_softmax
from attndesk.attention.masks import padding_mask

PENALTY = 1e5  # the tutorial's constant

EXPLANATION = """\
The tutorial's padding mask is a bug: it masks nothing.

What it does. create_padding_mark gives mask = 1.0 on real tokens and 0.0 on padding, shaped
[B, 1, L, 1], and the tutorial adds mask * -1e5 to the scores [B, H, L, L] before the softmax.
The size-1 axes broadcast over heads and over the LAST axis, so the mask runs along the QUERY
axis: every score of a real token's query row gets the same -1e5; padded query rows get 0.

Softmax ignores it. softmax(x + c) = softmax(x) for any constant c added to a whole row
(exp(x_j + c) / sum_k exp(x_k + c): the e^c cancels). The rows that get -1e5 get it in every
column, so in exact arithmetic the weights do not change at all: real queries still attend to
the padded keys exactly as much as without a mask, and padded query rows are untouched.

What float rounding adds. x - 1e5 is rounded to the grid of floats near 1e5, whose spacing
(ulp) is 2^16 * eps: 2^-7 = 0.0078125 in float32, 2^-36 (about 1.5e-11) in float64 and 512 in
bfloat16. So the scores of every real query row are rounded to a multiple of that spacing
before the softmax. Each score moves by at most half a step, so each weight changes by a factor
between exp(-step) and exp(step): at most about 0.8 % in float32, about 1.5e-11 in float64. In bfloat16 every score with
|x| < 256 collapses onto the same value and the row becomes nearly uniform. Noise, not a mask.

What it should have been. The same 0/1 mask laid along the KEY axis ([B, 1, 1, L]) with the
right sign, scores + (mask - 1) * 1e5, puts -1e5 on the padded keys only: exp(-1e5) underflows
to 0, so it is a real (soft: a finite penalty) padding mask and agrees with the boolean one
(masked_fill with -inf). Along the key axis with the tutorial's sign (mask * -1e5), it would
push the REAL keys down instead, and real queries would attend to nothing but padding.
"""


def create_padding_mark(seq: torch.Tensor) -> torch.Tensor:
    """The tutorial's mask, as written: ids [B, L] -> float [B, 1, L, 1], 1.0 on real tokens."""
    mask = torch.not_equal(seq, 0).float()
    mask = torch.unsqueeze(mask, dim=-1)
    mask = torch.unsqueeze(mask, dim=1)
    return mask


def tutorial_masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The tutorial's masking step, as written: ``attention_prob += mask * -1e5`` then softmax.

    ``scores`` [B, H, L, L]; ``mask`` from create_padding_mark. In place on a copy, so the sum
    is rounded to the scores' own dtype (as the tutorial's ``+=`` does).
    """
    attention_prob = scores.clone()
    attention_prob += mask * -PENALTY
    return torch.softmax(attention_prob, dim=-1)


def tutorial_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The tutorial's per-head attention from split q/k/v [B, H, L, d]: note it never scales by
    sqrt(d). Returns (attention_score [B, H, L, d], attention_prob [B, H, L, L])."""
    attention_prob = torch.matmul(query, key.transpose(-2, -1))
    attention_prob = tutorial_masked_softmax(attention_prob, mask)
    return torch.matmul(attention_prob, value), attention_prob


def key_axis_mask(mask: torch.Tensor) -> torch.Tensor:
    """The fix: the tutorial's [B, 1, L, 1] 0/1 mask moved to the key axis with the right sign,
    an additive [B, 1, 1, L] that is 0 on real keys and -1e5 on padded keys."""
    return (mask.transpose(-1, -2) - 1.0) * PENALTY


def rounding_step(dtype: torch.dtype) -> float:
    """Spacing of the floats around 1e5 in ``dtype`` (2^16 * eps since 2^16 <= 1e5 < 2^17)."""
    return 2.0**16 * torch.finfo(dtype).eps


@dataclass(frozen=True)
class TutorialEffect:
    """The tutorial's variant next to no mask, the boolean padding mask and the key-axis fix.

    All weights [B, H, L, L] in the scores' dtype. The max_* numbers are floats.
    """

    tutorial: torch.Tensor
    unmasked: torch.Tensor
    correct: torch.Tensor
    key_axis: torch.Tensor
    query_is_real: torch.Tensor  # bool [B, L]
    dtype: torch.dtype
    step: float  # rounding step of x - 1e5 in this dtype
    max_vs_unmasked: float  # what the variant changed at all
    max_vs_correct: float  # how far it is from a real padding mask
    max_key_axis_vs_correct: float
    padded_key_share: float  # weight real queries still put on padded keys, tutorial variant (mean)
    padded_key_share_correct: float
    padded_rows_unchanged: bool  # padded query rows bitwise equal to no mask
    has_padding: bool

    def summary(self) -> str:
        """The measured numbers, one line each, for the view next to EXPLANATION."""
        name = str(self.dtype).replace("torch.", "")
        lines = [
            f"measured here ({name}, rounding step of x - 1e5 = {self.step:.3g}):",
            f"  max |tutorial - no mask|            = {self.max_vs_unmasked:.3g}",
            f"  max |tutorial - padding mask|       = {self.max_vs_correct:.3g}",
            f"  max |key-axis fix - padding mask|   = {self.max_key_axis_vs_correct:.3g}",
            f"  weight real queries put on padding: tutorial {self.padded_key_share:.4f}, "
            f"padding mask {self.padded_key_share_correct:.4f}",
            f"  padded query rows unchanged by the variant: {'yes' if self.padded_rows_unchanged else 'no'}",
        ]
        if self.max_vs_unmasked == 0:
            lines.append(
                "  (0: every score here survived x - 1e5 exactly, its bits fit the grid next to 1e5 "
                "in this dtype, e.g. float32-stored scores in float64)"
            )
        if not self.has_padding:
            lines.append("  (this input has no padding: set a pad length to see the difference)")
        return "\n".join(lines)


def tutorial_effect(scores: torch.Tensor, token_ids: torch.Tensor) -> TutorialEffect:
    """Apply the tutorial's variant, no mask, the boolean padding mask and the key-axis fix to the
    same ``scores`` [B, H, L, L] (or [H, L, L]) of the self-attention over ``token_ids`` [B, L]
    (padding id 0, as the tutorial and attndesk's tokenizer both use)."""
    if scores.dim() == 3:
        scores = scores.unsqueeze(0)
    if token_ids.dim() == 1:
        token_ids = token_ids.unsqueeze(0)
    mark = create_padding_mark(token_ids).to(scores.device)
    tutorial = tutorial_masked_softmax(scores, mark)
    unmasked = torch.softmax(scores, dim=-1)
    correct = masked_softmax(scores, padding_mask(token_ids).to(scores.device))
    fixed = scores.clone()
    fixed += key_axis_mask(mark)
    key_axis = torch.softmax(fixed, dim=-1)
    real = token_ids != 0  # [B, L]
    pad_keys = (~real)[:, None, None, :]  # [B, 1, 1, L]
    real_rows = real[:, None, :, None]  # [B, 1, L, 1]

    def share(w: torch.Tensor) -> float:
        on_pad = (w.double() * pad_keys).sum(-1, keepdim=True)  # [B, H, L, 1]
        rows = real_rows.expand_as(on_pad)
        return float(on_pad[rows].mean()) if bool(rows.any()) else 0.0

    def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0

    padded_rows = (~real)[:, None, :].expand(tutorial.shape[:-1])  # [B, H, L]
    return TutorialEffect(
        tutorial=tutorial,
        unmasked=unmasked,
        correct=correct,
        key_axis=key_axis,
        query_is_real=real,
        dtype=scores.dtype,
        step=rounding_step(scores.dtype),
        max_vs_unmasked=max_abs(tutorial, unmasked),
        max_vs_correct=max_abs(tutorial, correct),
        max_key_axis_vs_correct=max_abs(key_axis, correct),
        padded_key_share=share(tutorial),
        padded_key_share_correct=share(correct),
        padded_rows_unchanged=bool(torch.equal(tutorial[padded_rows], unmasked[padded_rows])),
        has_padding=bool((~real).any()),
    )


def float32_relative_bound() -> float:
    """Largest relative change of a float32 weight from the rounding: |delta_j| <= step/2 per score
    moves w_j by a factor in [exp(-step), exp(step)]."""
    return math.expm1(rounding_step(torch.float32))


__all__ = [
    "EXPLANATION",
    "PENALTY",
    "TutorialEffect",
    "create_padding_mark",
    "float32_relative_bound",
    "key_axis_mask",
    "rounding_step",
    "tutorial_attention",
    "tutorial_effect",
    "tutorial_masked_softmax",
]
