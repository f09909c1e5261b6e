"""The toy mode's requests for trained weights: each hand-over of a model from the Train tab is a
new run, even when it is the same object at the same step (a freed run's id() can be reused)."""

from __future__ import annotations

from attndesk.app.modes.toy import ToyMode, preset_run
from attndesk.app.state import AppState


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
