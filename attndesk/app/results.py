"""Moved to ``attndesk.session.results`` (Qt-free, shared with the command line); re-exported here."""

from attndesk.session.results import *  # noqa: F403
