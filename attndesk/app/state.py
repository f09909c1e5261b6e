"""Moved to ``attndesk.session.state`` (Qt-free, shared with the command line); re-exported here."""

from attndesk.session.state import *  # noqa: F403
