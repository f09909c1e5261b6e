"""The job model: a context's progress, cancel and reports; the one door from the older keywords;
the core, the trainer and the corpus pass driven through a context alone."""

from __future__ import annotations

import threading

import pytest

from attndesk.core import AttentionConfig, run_attention
from attndesk.errors import Cancelled as CoreCancelled
from attndesk.jobs import Cancelled, JobContext, Progress, job_context, plain_context


def test_progress_goes_to_the_callback_and_is_kept_as_a_value():
    seen = []
    ctx = plain_context(lambda f, m: seen.append((f, m)))
    ctx.progress(0.25, "a quarter")
    assert seen == [(0.25, "a quarter")]
    assert ctx.last == Progress(0.25, "a quarter")


def test_check_raises_the_cores_cancelled_once_cancelled_from_any_thread():
    assert Cancelled is CoreCancelled
    ctx = plain_context()
    ctx.check()
    assert not ctx.cancelled
    other = threading.Thread(target=ctx.cancel)
    other.start()
    other.join()
    assert ctx.cancelled
    with pytest.raises(CoreCancelled):
        ctx.check()


def test_reports_reach_the_callback_in_order():
    items = []
    ctx = plain_context(report=items.append)
    for i in range(3):
        ctx.report(i)
    assert items == [0, 1, 2]


def test_the_door_keeps_a_context_and_wraps_the_older_keywords():
    ctx = JobContext()
    assert job_context(ctx) is ctx
    assert isinstance(job_context(), JobContext) and not job_context().cancelled
    stop = threading.Event()
    wrapped = job_context(cancel=stop)
    assert not wrapped.cancelled
    stop.set()
    assert wrapped.cancelled
    asked = [False]
    polled = job_context(should_cancel=lambda: asked[0])
    assert not polled.cancelled
    asked[0] = True
    assert polled.cancelled


def test_a_joined_flag_and_the_parent_both_cancel_the_child():
    seen, items = [], []
    parent = JobContext(lambda f, m: seen.append((f, m)), report=items.append)
    stop = threading.Event()
    child = job_context(parent, cancel=stop)
    child.progress(0.5, "half")
    child.report("item")
    assert seen == [(0.5, "half")] and items == ["item"]  # what the child does not handle goes up
    stop.set()
    assert child.cancelled and not parent.cancelled  # the Stop button stops the part only
    other = job_context(parent, cancel=threading.Event())
    parent.cancel()
    assert other.cancelled  # the job cancelled stops every part


def test_a_scaled_part_maps_its_fractions_and_prefixes_its_messages():
    seen = []
    ctx = JobContext(lambda f, m: seen.append((f, m)))
    part = ctx.scaled(0.5, 1.0, "loading: ")
    part.progress(0.5, "weights")
    ctx.quiet().progress(0.9, "nothing shown")
    assert seen == [(0.75, "loading: weights")]
    ctx.cancel()
    assert part.cancelled and ctx.quiet().cancelled


def test_run_attention_reports_and_stops_through_a_context():
    config = AttentionConfig(embed_dim=16, num_heads=2, mask="padding", pad_to=60, memory_budget=20_000)
    text = " ".join(["the cat sat on the mat"] * 9)
    seen: list[tuple[float, str]] = []
    result = run_attention(config, text, ctx=plain_context(lambda f, m: seen.append((f, m))))
    assert result.plan.kind == "pyramid"  # blocked: progress per block and head
    blocks = -(-60 // result.plan.block_rows)
    assert len([m for _, m in seen if m.startswith("block ")]) == blocks * 2
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0

    ctx = JobContext()
    blocks_seen = []

    def cancel_at_the_third_block(fraction: float, message: str) -> None:
        if message.startswith("block "):
            blocks_seen.append(message)
            if len(blocks_seen) == 3:
                ctx.cancel()

    with pytest.raises(CoreCancelled):
        run_attention(config, text, ctx=job_context(ctx, progress=cancel_at_the_third_block))
    assert len(blocks_seen) == 3  # checked before each head of each block: stopped at the next check


def test_on_cancel_wakes_a_listener_of_the_context_or_an_ancestor_until_it_stops_listening():
    parent = JobContext()
    child = JobContext(parent=parent)
    woken = []
    stop_listening = child.on_cancel(lambda: woken.append("woken"))
    child.cancel()
    parent.cancel()
    assert woken == ["woken", "woken"]
    stop_listening()
    parent.cancel()
    assert woken == ["woken", "woken"] and parent._wakers == [] and child._wakers == []


def test_a_paused_part_marks_the_job_and_its_ancestors_until_it_leaves():
    root = JobContext()
    part = job_context(root, cancel=threading.Event()).scaled(0.0, 0.5)
    other = root.quiet()
    assert not root.is_paused and not part.is_paused
    with part.paused():
        assert part.is_paused and root.is_paused and not other.is_paused
        with pytest.raises(RuntimeError), part.paused():
            raise RuntimeError("left by an exception")
        assert root.is_paused  # the outer pause still holds
    assert not root.is_paused and not part.is_paused and root._pauses == 0
