"""The toy mode's requests for trained weights: each hand-over of a model from the Train tab is a
new run, even when it is the same object at the same step (a freed run's id() can be reused);
a toy run's thread count, by its work."""

from __future__ import annotations

import pytest

from attndesk.app.modes.toy import ToyMode, preset_run
from attndesk.session.state import AppState


def test_each_hand_over_is_a_new_request_and_a_preset_keeps_its_key():
    state = AppState()
    state.config = state.config.replace(weights_from="trained")
    mode, run = ToyMode(), preset_run("previous-token")
    mode.set_trained("first", run)
    first = mode.request(state).key
    assert mode.request(state).key == first  # asked again, nothing handed over: the same run
    mode.set_trained("again", run)  # same object, same step
    assert mode.request(state).key != first
    state.config = state.config.replace(weights_from="induction")
    assert mode.request(state).key == ToyMode().request(state).key  # a preset is the same run anywhere


@pytest.mark.parametrize(("words", "expected"), [(8, 1), (2000, 3)])
def test_a_toy_run_takes_threads_by_its_work_then_restores_the_count(monkeypatch, words, expected):
    import torch

    from attndesk.app.modes import toy
    from attndesk.runs.config import AttentionConfig
    from attndesk.system import threads

    seen: list[int] = []
    run_attention = toy.run_attention

    def spy(*args, **kwargs):  # the real run, noting the count it runs on
        seen.append(torch.get_num_threads())
        return run_attention(*args, **kwargs)

    monkeypatch.setattr(toy, "run_attention", spy)
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: 0.0)  # an idle machine
    before = torch.get_num_threads()
    toy.toy_run(AttentionConfig(num_heads=2, embed_dim=64), " ".join(["the cat sat on the mat"] * (words // 6 + 1)))
    assert seen == [expected]
    assert torch.get_num_threads() == before
