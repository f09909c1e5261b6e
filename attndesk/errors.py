"""Exceptions the core raises on purpose; everything else is a bug."""

from __future__ import annotations

from attndesk.jobs.context import Cancelled as Cancelled  # declared with the job model; raised by ``JobContext.check``


class ConfigError(ValueError):
    """A value the user chose cannot work; the message says what to change. ``field`` names the
    configuration field at fault when there is one (so a window can show the message next to
    its control), else None."""

    def __init__(self, message: str = "", *, field: str | None = None):
        super().__init__(message)
        self.field = field


class ConfigTypeError(ConfigError, TypeError):
    """A value of the wrong type (text=None, scaled="no"): a ConfigError for callers that report
    settings, and a TypeError for callers that expect Python's usual exception for a wrong type."""


NO_LM_HEAD = "this checkpoint has no LM head"


class NoLMHead(ConfigError):
    """A next-token feature (generation, the next-token distribution, an ablation's KL divergence)
    asked of a decoder or encoder-decoder saved without its LM head (a bare base model, an
    embedding model built on a decoder). Its attention is all there; only these features are off."""

    def __init__(self, name: str, what: str = "next-token features"):
        super().__init__(f"{what} off: {NO_LM_HEAD} ({name} is a bare base model; its attention views all work)")
