"""Where the window keeps what outlives a session file: geometry, dock layout, the last session,
the export dialog's last choices (QSettings, per organisation; tests set their own)."""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings

SETTINGS_APP = "attndesk"


def settings_org() -> str:
    """QSettings organisation: ATTNDESK_SETTINGS_ORG (tests set it) or "attndesk"."""
    return os.environ.get("ATTNDESK_SETTINGS_ORG") or "attndesk"


def app_settings() -> QSettings:
    return QSettings(settings_org(), SETTINGS_APP)
