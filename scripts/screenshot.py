"""Take a screenshot of the real attndesk window (for the README): ``python scripts/screenshot.py [OUT.png]``.

Works on a display, under Xvfb (``xvfb-run python scripts/screenshot.py``) and with no display at
all (Qt offscreen). The window starts from defaults (the sample sentence), not from the user's
last session, and the user's settings are left alone. It waits until the heatmaps are drawn.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "resources" / "screenshot.png"), help="PNG to write (default resources/screenshot.png)")
    parser.add_argument("--size", default="1400x900", help="window size WxH (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the first heatmaps (default %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        print(f"screenshot: --size must be WxH, got {args.size!r}", file=sys.stderr)
        return 2
    # keep the user's QSettings (last session, layout) out of the picture and untouched
    os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-screenshot")
    from attndesk.render import has_display

    if not os.environ.get("QT_QPA_PLATFORM") and not has_display():
        os.environ["QT_QPA_PLATFORM"] = "offscreen"

    from PySide6.QtCore import QBuffer, QByteArray, QEventLoop, QIODevice, QTimer
    from PySide6.QtWidgets import QApplication

    from attndesk.app import MainWindow
    from attndesk.render.export import ExportError, atomic_write

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("attndesk")
    window = MainWindow(restore=False)
    window.resize(width, height)

    loop = QEventLoop()
    shown = []
    window.resultDisplayed.connect(lambda result: (shown.append(result), loop.quit()))
    timer = QTimer(singleShot=True)
    timer.timeout.connect(loop.quit)
    window.show()
    if window.displayed_result() is None:
        timer.start(int(args.timeout * 1000))
        loop.exec()
    if window.displayed_result() is None:
        print(f"screenshot: no heatmaps after {args.timeout:g} s; status: {window.statusLabel.text()}", file=sys.stderr)
        window.close()
        return 1
    # let pending paints (pyqtgraph items, docks) settle before grabbing
    settle = QTimer(singleShot=True)
    settle.timeout.connect(loop.quit)
    settle.start(500)
    loop.exec()

    pixmap = window.grab()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    ok = pixmap.save(buffer, "PNG")
    buffer.close()
    window.close()
    app.processEvents()
    if not ok:
        print("screenshot: PNG encoding failed", file=sys.stderr)
        return 1
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, bytes(data))
    except (OSError, ExportError) as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return 1
    print(out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
