"""Moved to ``attndesk.session.plans`` (Qt-free, shared with the command line); re-exported here."""

from attndesk.session.plans import *  # noqa: F403
