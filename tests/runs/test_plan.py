"""The plan: full weights when they fit, float16 when asked and it fits, else the pyramid;
an over-budget run never allocates the full matrix."""

from __future__ import annotations

import numpy as np
import pytest
from torch.profiler import ProfilerActivity, profile

from attndesk.core import AttentionConfig, ConfigError, run_attention
from attndesk.runs.pipeline import plan_text
from attndesk.runs.plan import plan_run

GIB = 2**30
TEXT = " ".join(["the cat sat on the mat and the dog barked at it"] * 25)  # 300 tokens


def test_the_issue_example_line():
    config = AttentionConfig(embed_dim=512, num_heads=8, memory_budget=2 * GIB)
    plan = plan_run(config, 16384)
    assert plan.kind == "pyramid" and plan.factor == 8 and plan.overview_px == 2048
    assert plan.describe().startswith(
        "8 heads x 16,384 tokens: full weights 8.0 GiB exceed the 2.0 GiB budget, "
        "keeping a 2048 px overview + exact on demand"
    )
    assert plan.weights_bytes == 8 * GIB
    assert plan.peak_bytes < 3 * GIB  # what the plan will allocate, far below the 16 GiB of the full path
    assert plan.block_rows % plan.factor == 0 and plan.block_rows * 16384 * 4 <= 16 * 2**20


def test_in_budget_runs_keep_the_full_path():
    config = AttentionConfig(embed_dim=512, num_heads=8, memory_budget=2 * GIB)
    plan = plan_run(config, 4096)
    assert plan.kind == "full" and not plan.blocked and plan.storage == "float32"
    assert "fit the 2.0 GiB budget" in plan.describe()
    result = run_attention(AttentionConfig(num_heads=2, embed_dim=8), "the cat sat")
    assert result.plan.kind == "full" and result.pyramid is None and result.exact is None
    assert result.exact_weights and result.weights.shape == (2, 3, 3)


def test_weights_fit_but_the_full_peak_does_not():
    # 8 x 8192^2 x 4 = 2 GiB of weights fit a 2 GiB budget; the full path's peak does not
    plan = plan_run(AttentionConfig(embed_dim=512, num_heads=8, memory_budget=2 * GIB), 8192)
    assert plan.kind == "pyramid"
    assert "the full path needs 4.2 GiB (weights 2.0 GiB), over the 2.0 GiB budget" in plan.describe()


def test_half_storage_when_asked_and_it_fits():
    config = AttentionConfig(embed_dim=32, num_heads=4, mask="padding", pad_to=1100)
    text = TEXT * 3  # 900 tokens, padded to 1100
    full = run_attention(config, text)
    # the full path (peak ~39 MiB) exceeds 32 MiB; float16 weights (9.2 MiB) + a 367 px overview fit
    small = config.replace(memory_budget=32 * 2**20)
    plan = plan_text(small, text, half_storage="float16")
    assert plan.kind == "blocked" and plan.storage == "float16" and plan.factor == 3
    assert "keeping every weight as float16" in plan.describe()
    half = run_attention(small, text, half_storage="float16")
    assert half.weights.dtype == np.float16 and half.weights.shape == full.weights.shape
    assert not half.exact_weights and half.pyramid is not None and half.pyramid.factor == 3
    np.testing.assert_allclose(half.weights.astype(np.float32), full.weights, atol=1e-3)
    # hover stays exact though the storage is not
    assert half.weight_at(1, 800, 17) == pytest.approx(float(full.weights[1, 800, 17]), abs=2e-7)
    # without the option the same budget gives the pyramid
    assert plan_text(small, text).kind == "pyramid"


def test_a_small_budget_shrinks_the_overview():
    config = AttentionConfig(embed_dim=512, num_heads=8)
    roomy = plan_run(config.replace(memory_budget=2 * GIB), 16384)
    tight = plan_run(config.replace(memory_budget=600 * 2**20), 16384)
    assert tight.kind == "pyramid" and tight.overview_px < roomy.overview_px
    assert tight.peak_bytes <= 600 * 2**20


def test_plan_text_matches_what_the_run_does():
    config = AttentionConfig(embed_dim=16, num_heads=2, pad_to=300, memory_budget=64 * 1024)
    plan = plan_text(config, TEXT)
    result = run_attention(config, TEXT)
    assert result.plan == plan and plan.kind == "pyramid"
    with pytest.raises(ConfigError, match="type some text"):
        plan_text(config, "   ")


def test_bad_plan_options_are_config_errors():
    config = AttentionConfig()
    with pytest.raises(ConfigError, match="half storage"):
        plan_run(config, 10, half_storage="int8")
    with pytest.raises(ConfigError, match="plan kind"):
        plan_run(config, 10, force="sideways")


def _largest_allocation(config: AttentionConfig) -> tuple[int, object]:
    """Bytes of the largest single CPU allocation any torch op makes during the run."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run_attention(config, TEXT)
    return max(e.cpu_memory_usage for e in prof.events()), result


@pytest.mark.slow  # a fresh interpreter or a large allocation: make test, not test-fast
def test_over_budget_chooses_the_pyramid_and_never_allocates_the_full_matrix():
    heads, length = 4, 620  # long enough that even the smallest overview is under one head's matrix
    config = AttentionConfig(embed_dim=16, num_heads=heads, mask="padding", pad_to=length)
    one_head = length * length * 4
    # the measurement can fail: the full path's largest tensor is the whole [H, L, L] matrix
    largest_full, full = _largest_allocation(config)
    assert full.plan.kind == "full" and largest_full >= heads * one_head
    largest, bounded = _largest_allocation(config.replace(memory_budget=800_000))  # ~20-row blocks
    assert bounded.plan.kind == "pyramid"
    assert bounded.plan.block_rows < length
    assert largest < one_head  # not even one head's full matrix, let alone all of them
    np.testing.assert_allclose(bounded.output, full.output, atol=2e-6)


def test_a_bounded_run_that_still_exceeds_the_budget_says_so():
    # 200k tokens (a 1 MiB document): Q, K and V alone take more than 2 GiB
    plan = plan_run(AttentionConfig(embed_dim=512, num_heads=8, memory_budget=2 * GIB), 200_000)
    assert plan.kind == "pyramid" and plan.peak_bytes > 2 * GIB
    assert plan.overview_px >= 1024 and plan.block_rows < plan.factor  # tiles taller than a block
    assert plan.describe().endswith("over the budget") and "min)" in plan.describe()


def test_a_finished_runs_plan_notice_has_no_time_estimate():
    # the core's FLOP-only estimate said "under a second" next to "done in 9.6 s" for a 13k-token run
    from attndesk.core import AttentionConfig, run_attention
    from attndesk.runs.pipeline import plan_text

    config = AttentionConfig(memory_budget=3 * 2**20)
    text = " ".join(["the cat sat on the mat and the dog barked at it"] * 25)
    plan = plan_text(config, text)
    assert plan.kind == "pyramid" and plan.seconds is not None
    assert "(under a second)" in plan.describe()  # before a run the estimate is part of the line
    result = run_attention(config, text)
    assert result.notices[0] == plan.describe(eta=False)
    assert "under a second" not in result.notices[0] and "(about" not in result.notices[0]
