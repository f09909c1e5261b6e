"""The status line as a small evented model: whoever has something to say sets it, the window's
status bar draws it. Nobody calls into the window to write a message."""

from __future__ import annotations

from psygnal import EventedModel
from pydantic import ConfigDict


class StatusModel(EventedModel):
    """``message`` (one line), whether it reports an ``error``, the view tab it describes (``tab``,
    None: the whole window), whether a run is ``busy`` and how far it is (``progress`` in [0, 1],
    None while unknown)."""

    model_config = ConfigDict(validate_assignment=False, extra="forbid")

    message: str = "ready"
    error: bool = False
    tab: str | None = None
    busy: bool = False
    progress: float | None = None

    def say(self, message: str, *, error: bool = False, tab: str | None = None) -> None:
        """Show ``message`` (an error in red); ``tab``: the view tab it is about, whose leaving clears it."""
        self.update({"message": message, "error": error, "tab": tab})

    def fail(self, message: str, *, tab: str | None = None) -> None:
        self.say(message, error=True, tab=tab)

    def tab_shown(self, tab: str) -> None:
        """Another view tab is on screen: a message about a different tab no longer describes it."""
        if self.tab is not None and self.tab != tab:
            self.say("ready")

    def set_busy(self, busy: bool) -> None:
        self.update({"busy": busy, "progress": None})
