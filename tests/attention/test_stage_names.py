"""The step-through's stage names are declared once, in ``attention.types``, and read by the window's
step-through and the trainer's stacked stages."""

from __future__ import annotations

from attndesk.app.widgets import stages as view_stages
from attndesk.attention.types import BASE_STAGES, KV_STAGES, LAYER_STAGES, PER_HEAD_STAGES, SHOWN_STAGES, Intermediates
from attndesk.train import stages as train_stages


def test_the_shown_stages_are_the_intermediates_in_computation_order() -> None:
    fields = [name for name in Intermediates.names() if name != "sink_logit"]
    assert [name for name in SHOWN_STAGES if name != "angles"] == fields
    assert SHOWN_STAGES.index("k_raw") < SHOWN_STAGES.index("angles") < SHOWN_STAGES.index("q")
    positions = [SHOWN_STAGES.index(name) for name in BASE_STAGES]
    assert positions == sorted(positions), "the 2017 stages keep the computation's order"


def test_per_head_layer_and_kv_stages_partition_what_is_shown() -> None:
    assert PER_HEAD_STAGES | set(LAYER_STAGES) | {"angles"} == set(SHOWN_STAGES)
    assert not PER_HEAD_STAGES & set(LAYER_STAGES)
    assert KV_STAGES <= PER_HEAD_STAGES


def test_the_window_and_the_trainer_read_the_one_declaration() -> None:
    assert view_stages.STAGES is BASE_STAGES
    assert view_stages.ALL_STAGES is SHOWN_STAGES
    assert view_stages.PER_HEAD is PER_HEAD_STAGES
    assert view_stages.KV_STAGES is KV_STAGES
    assert train_stages.LAYER_STAGES is LAYER_STAGES
    stacked = set(train_stages.HEAD_STAGES) | set(LAYER_STAGES) | {"bias"}
    assert stacked == set(Intermediates.names())
