"""Moved to ``attndesk.session.status`` (Qt-free, shared with the command line); re-exported here."""

from attndesk.session.status import *  # noqa: F403
