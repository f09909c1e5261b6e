"""scripts/screenshot.py takes a picture of the real window without a display."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="offscreen screenshot checked on Linux")
def test_screenshot_script_writes_the_window(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["HOME"] = str(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # QSettings land here, not in the user's config
    out = tmp_path / "shot.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshot.py"), str(out), "--size", "1000x700"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert Path(proc.stdout.strip()) == out.resolve()
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1000, 700)
    # a real window, not a blank image: many distinct colours (heatmaps, widgets, text)
    colours = {image.pixel(x, y) for x in range(0, 1000, 7) for y in range(0, 700, 7)}
    assert len(colours) > 50
