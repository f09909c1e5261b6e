"""Every claim of attndesk.teaching.tutorial.EXPLANATION, checked numerically in float64 and float32."""

from __future__ import annotations

import math

import pytest
import torch

from attndesk.attention.kernel import masked_softmax
from attndesk.attention.masks import padding_mask
from attndesk.teaching.tutorial import (
    EXPLANATION,
    create_padding_mark,
    float32_relative_bound,
    key_axis_mask,
    rounding_step,
    tutorial_attention,
    tutorial_effect,
    tutorial_masked_softmax,
)

IDS = torch.tensor([[5, 7, 9, 4, 0, 0], [3, 8, 0, 0, 0, 0]])  # two sequences, padded with 0


def scores(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (3.0 * torch.randn(2, 3, 6, 6, generator=g, dtype=torch.float64)).to(dtype)


def test_create_padding_mark_is_the_tutorials_shape_and_values():
    mark = create_padding_mark(IDS)
    assert mark.shape == (2, 1, 6, 1) and mark.dtype == torch.float32
    assert mark[0, 0, :, 0].tolist() == [1, 1, 1, 1, 0, 0]
    assert mark[1, 0, :, 0].tolist() == [1, 1, 0, 0, 0, 0]


def test_it_acts_along_the_query_axis_adding_one_constant_per_row():
    s = torch.zeros(2, 3, 6, 6, dtype=torch.float64)
    added = s.clone()
    added += create_padding_mark(IDS) * -1e5
    # real query rows: -1e5 in every column; padded query rows: 0 everywhere
    assert torch.all(added[0, :, :4, :] == -1e5) and torch.all(added[0, :, 4:, :] == 0)
    assert torch.all(added[1, :, :2, :] == -1e5) and torch.all(added[1, :, 2:, :] == 0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_softmax_is_shift_invariant_so_nothing_is_masked(dtype):
    x = scores(dtype)
    w = tutorial_masked_softmax(x, create_padding_mark(IDS))
    plain = torch.softmax(x, dim=-1)
    # real queries still put weight on the padded keys, as much as without any mask
    on_padding = w[0, :, :4, 4:].sum(-1)
    assert torch.all(on_padding > 1e-3)
    torch.testing.assert_close(on_padding, plain[0, :, :4, 4:].sum(-1), rtol=0.01, atol=0)
    # a real padding mask gives exactly 0 there
    correct = masked_softmax(x, padding_mask(IDS))
    assert torch.all(correct[0, :, :, 4:] == 0)


def test_float64_changes_weights_by_at_most_the_tiny_rounding():
    x = scores(torch.float64)
    w = tutorial_masked_softmax(x, create_padding_mark(IDS))
    plain = torch.softmax(x, dim=-1)
    step = rounding_step(torch.float64)
    assert step == 2.0**-36
    rel = ((w - plain).abs() / plain).max().item()
    assert rel <= math.expm1(step) + 1e-15
    assert 0 < (w - plain).abs().max().item() < 1e-10


def test_float32_rounds_scores_to_multiples_of_2_pow_minus_7():
    x = scores(torch.float32)
    mark = create_padding_mark(IDS)
    assert rounding_step(torch.float32) == 2.0**-7 == 0.0078125
    shifted = x + mark * -1e5  # what the softmax of a real row sees
    real = mark.expand_as(x).bool()
    back = (shifted + 1e5)[real]  # exact in float32: a multiple of 2^-7 well inside float32's range
    assert torch.all(back * 128 == torch.round(back * 128))  # on the 2^-7 grid
    assert (back.double() - x[real].double()).abs().max().item() <= 2.0**-8
    assert (back.double() - x[real].double()).abs().max().item() > 2.0**-10  # really rounded
    # and the variant's weights are exactly the softmax of those rounded scores
    rounded = torch.where(real, shifted + 1e5, x)
    w = tutorial_masked_softmax(x, mark)
    assert torch.equal(w, torch.softmax(rounded, dim=-1))


def test_float32_perturbation_is_visible_but_bounded():
    x = scores(torch.float32)
    w = tutorial_masked_softmax(x, create_padding_mark(IDS)).double()
    exact = torch.softmax(x.double(), dim=-1)
    diff = (w - exact).abs()
    assert diff.max().item() > 1e-4  # far above float32 softmax noise (~1e-7)
    assert torch.all(diff <= exact * float32_relative_bound() + 1e-7)
    assert float32_relative_bound() == pytest.approx(0.00784, abs=1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_padded_query_rows_are_untouched(dtype):
    x = scores(dtype)
    w = tutorial_masked_softmax(x, create_padding_mark(IDS))
    plain = torch.softmax(x, dim=-1)
    assert torch.equal(w[0, :, 4:], plain[0, :, 4:])
    assert torch.equal(w[1, :, 2:], plain[1, :, 2:])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_same_mask_on_the_key_axis_with_the_right_sign_is_a_real_padding_mask(dtype):
    x = scores(dtype)
    mark = create_padding_mark(IDS)
    additive = key_axis_mask(mark)
    assert additive.shape == (2, 1, 1, 6)
    assert additive[0, 0, 0].tolist() == [0, 0, 0, 0, -1e5, -1e5]
    w = torch.softmax(x + additive, dim=-1)
    correct = masked_softmax(x, padding_mask(IDS))
    assert torch.all(w[0, :, :, 4:] == 0)  # exp(-1e5) underflows to exactly 0
    torch.testing.assert_close(w, correct, rtol=0, atol=1e-7 if dtype == torch.float32 else 1e-15)


def test_key_axis_with_the_tutorials_sign_attends_only_to_padding():
    x = scores(torch.float64)
    wrong = torch.softmax(x + create_padding_mark(IDS).transpose(-1, -2) * -1e5, dim=-1)
    assert torch.all(wrong[0, :, :, :4] < 1e-12)  # the real keys are pushed away
    torch.testing.assert_close(wrong[0].sum(-1), torch.ones(3, 6, dtype=torch.float64))


def test_bfloat16_collapses_real_rows_towards_uniform():
    x = torch.tensor([[[[0.5, -1.0, 2.0, 1.5]]]], dtype=torch.bfloat16)
    w = tutorial_masked_softmax(x, torch.ones(1, 1, 1, 1))
    assert rounding_step(torch.bfloat16) == 512.0
    assert torch.all(w == w[..., :1])  # every score landed on the same bfloat16 near -1e5


def test_tutorial_attention_is_unscaled_and_matches_manual():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out, prob = tutorial_attention(q, k, v, create_padding_mark(IDS))
    manual = torch.softmax(q @ k.transpose(-2, -1) + create_padding_mark(IDS).double() * -1e5, dim=-1)
    torch.testing.assert_close(prob, manual)
    torch.testing.assert_close(out, manual @ v)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tutorial_effect_numbers(dtype):
    effect = tutorial_effect(scores(dtype), IDS)
    assert effect.has_padding and effect.padded_rows_unchanged
    assert effect.padded_key_share_correct == 0.0
    assert effect.padded_key_share > 0.05  # the variant leaves padding attended
    assert effect.max_vs_correct > 0.05
    assert effect.max_key_axis_vs_correct <= (1e-7 if dtype == torch.float32 else 1e-15)
    if dtype == torch.float64:
        assert effect.max_vs_unmasked < 1e-10
    else:
        assert 1e-4 < effect.max_vs_unmasked < float32_relative_bound()
    text = effect.summary()
    assert f"{effect.max_vs_unmasked:.3g}" in text


def test_explanation_says_the_facts():
    for phrase in ("QUERY", "KEY axis", "softmax(x + c) = softmax(x)", "2^-7", "masks nothing"):
        assert phrase in EXPLANATION


def test_float32_valued_scores_in_float64_are_not_rounded_at_all():
    # every bit of a float32 score (|x| >= 2^-13) fits the float64 grid next to 1e5 (step 2^-36):
    # x - 1e5 is exact, and the variant's weights equal the unmasked ones bit for bit
    x = scores(torch.float32).double()
    assert torch.all(x.abs() >= 2.0**-13)
    w = tutorial_masked_softmax(x, create_padding_mark(IDS))
    assert torch.equal(w, torch.softmax(x, dim=-1))
    effect = tutorial_effect(x, IDS)
    assert effect.max_vs_unmasked == 0 and "survived x - 1e5 exactly" in effect.summary()
