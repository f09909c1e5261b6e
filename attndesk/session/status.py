"""The status line as a small evented model: whoever has something to say sets it, the window's
status bar draws it. Nobody calls into the window to write a message."""

from __future__ import annotations

from psygnal import EventedModel
from pydantic import ConfigDict


class StatusModel(EventedModel):
    """``message`` (one line), whether it reports an ``error``, whether a run is ``busy`` and how far
    it is (``progress`` in [0, 1], None while unknown)."""

    model_config = ConfigDict(validate_assignment=False, extra="forbid")

    message: str = "ready"
    error: bool = False
    busy: bool = False
    progress: float | None = None

    def say(self, message: str, *, error: bool = False) -> None:
        """Show ``message`` (an error in red)."""
        self.update({"message": message, "error": error})

    def fail(self, message: str) -> None:
        self.say(message, error=True)

    def set_busy(self, busy: bool) -> None:
        self.update({"busy": busy, "progress": None})
