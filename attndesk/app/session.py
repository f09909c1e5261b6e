"""Moved to ``attndesk.session.file`` (Qt-free, shared with the command line); re-exported here."""

from attndesk.session.file import *  # noqa: F403
