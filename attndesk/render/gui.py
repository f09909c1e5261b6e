"""The Qt application a renderer needs, and whether a display is there to show a window.

``ensure_gui_app`` creates a QApplication when none runs (fonts need one), choosing the
offscreen platform when there is no display, so Qt never aborts looking for an X server.
"""

from __future__ import annotations

import os
import socket
import sys

from PySide6.QtCore import QCoreApplication
from PySide6.QtGui import QGuiApplication


def has_display() -> bool:
    """False on Linux/BSD when neither X11 nor Wayland is reachable through the environment."""
    if not sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def display_problem() -> str | None:
    """Why the X display in $DISPLAY cannot be used, or None when it answers (or is not X/local).

    Qt aborts the process when it cannot open the display, so a stale DISPLAY (an SSH session
    without forwarding, a stopped Xvfb) is checked first by connecting to the X server's socket.
    """
    if not sys.platform.startswith("linux") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    display = os.environ.get("DISPLAY", "")
    host, _, rest = display.rpartition(":")
    number = rest.split(".")[0]
    if host not in ("", "unix") or not number.isdigit():
        return None  # a remote or unusual display: let Qt try
    path = f"/tmp/.X11-unix/X{number}"
    for address in (path, "\0" + path):  # the socket file, then Linux's abstract namespace
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(1.0)
            sock.connect(address)
            return None
        except OSError:
            continue
        finally:
            sock.close()
    return f"DISPLAY={display} is set but no X server answers there"


def ensure_gui_app(*, headless: bool = False):
    """Return the running QGuiApplication, creating one (a QApplication) if needed: fonts need it.

    Without a display (or with ``headless``) the offscreen platform is chosen before the
    application exists, so Qt never aborts looking for an X server. An explicit
    QT_QPA_PLATFORM set by the user is respected.
    """

    app = QCoreApplication.instance()
    if app is not None:
        if not isinstance(app, QGuiApplication):
            raise RuntimeError("a QCoreApplication without GUI support is running; rendering needs a QGuiApplication")
        return app
    if not os.environ.get("QT_QPA_PLATFORM") and (headless or not has_display()):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    argv = sys.argv[:1] or ["attndesk"]
    try:
        # a QApplication (a QGuiApplication that also allows widgets), so that a window or a
        # pytest-qt test created later in the same process still works
        from PySide6.QtWidgets import QApplication
    except ImportError:
        return QGuiApplication(argv)
    return QApplication(argv)
