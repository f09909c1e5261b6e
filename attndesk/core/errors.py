"""Exceptions the core raises on purpose; everything else is a bug."""


class ConfigError(ValueError):
    """A value the user chose cannot work; the message says what to change."""


class Cancelled(RuntimeError):
    """A long computation was stopped by its caller (``should_cancel`` returned True)."""
