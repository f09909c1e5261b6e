"""Moved to ``attndesk.render.bundle`` (shared with ``attndesk bundle``); re-exported here."""

from attndesk.render.bundle import *  # noqa: F403
