"""Every background job channel is declared once (``app/jobs/channels.py``) and belongs to exactly
one place: the window's own (``WINDOW``) or one tab's ``TabSpec.channels``; channel names are
unique, and the channels that never wait for the side jobs' turn are the ones that must not."""

from __future__ import annotations

from collections import Counter

from attndesk.app.jobs import channels
from attndesk.app.tabs.registry import DOCK_TABS, TABS
from attndesk.jobs.executor import Channel

DECLARED = [value for value in vars(channels).values() if isinstance(value, Channel)]


def test_every_channel_is_listed_once_by_the_window_or_one_tab():
    listed = list(channels.WINDOW) + [c for tab in TABS + DOCK_TABS for c in tab.channels]
    assert Counter(listed) == Counter(DECLARED)
    assert len({c.name for c in DECLARED}) == len(DECLARED)


def test_the_unturned_channels_are_the_run_its_chores_and_the_jobs_of_minutes():
    unturned = {c.name for c in DECLARED if not c.takes_turn}
    chores = {"present", "memory", "models", "hub-cache", "files", "derived", "checkpoints", "image-samples"}
    assert unturned == {"run", "corpus", "corpus-query", "train"} | chores
