"""Screenshots of the real attndesk window, and the check that nothing in its heatmaps overlaps.

``python scripts/screenshot.py [OUT.png]`` (``make screenshot``) writes the README picture;
``--grid OUT.png`` also writes the pretrained layers x heads picture. Works on a display, under
Xvfb (``xvfb-run python scripts/screenshot.py``) and with no display at all (Qt offscreen). The
window starts from defaults (the sample sentence), not from the user's last session, and the
user's settings are left alone. It waits until the heatmaps are drawn.

The screenshot tests use the same functions: ``open_window`` / ``show_values`` drive the real
window, ``layout_problems`` lists every pair of heatmap items (titles, maps, label bands, group
headers, colour bar, footer lines) whose rectangles overlap or leave the panel, and ``png_bytes``
grabs what is on screen.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

README_SIZE = (1400, 900)


def wait_for(window, action=None, timeout_s: float = 60.0) -> bool:
    """Run ``action`` and spin the event loop until the window's ``resultDisplayed`` (or the
    timeout); without an action, wait only when nothing is displayed yet. True when shown."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    seen: list[int] = []

    def on_shown(*_args) -> None:
        seen.append(1)
        loop.quit()

    window.resultDisplayed.connect(on_shown)
    timer = QTimer(singleShot=True)
    timer.timeout.connect(loop.quit)
    timer.start(int(timeout_s * 1000))
    if action is not None:
        action()
    if not seen and (action is not None or window.displayed_result() is None):
        loop.exec()
    timer.stop()
    window.resultDisplayed.disconnect(on_shown)
    return bool(seen) or (action is None and window.displayed_result() is not None)


def settle(ms: int = 300) -> None:
    """Let pending paints and layout passes run before grabbing."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def open_window(size: tuple[int, int] = README_SIZE, timeout_s: float = 60.0):
    """A shown ``MainWindow`` of ``size`` with its first result drawn (or RuntimeError)."""
    from attndesk.app import MainWindow

    window = MainWindow(restore=False)
    window.resize(*size)
    window.show()
    if not wait_for(window, timeout_s=timeout_s):
        status = window.statusLabel.text()
        window.close()
        raise RuntimeError(f"no heatmaps after {timeout_s:g} s; status: {status}")
    return window


def show_values(window, values: dict, timeout_s: float = 60.0) -> None:
    """Set parameter values (e.g. {"num_heads": 16}) and wait for their result on screen."""
    if not wait_for(window, lambda: window.state.set_config(**values), timeout_s):
        raise RuntimeError(f"no result for {values} after {timeout_s:g} s: {window.statusLabel.text()}")
    settle()


def layout_problems(panel) -> list[str]:
    """Every overlap between the heatmap panel's items, and every item outside its canvas."""
    from PySide6.QtCore import QRectF

    from attndesk.render.layout import Rect

    def rect(r: QRectF) -> Rect:
        return Rect(r.x(), r.y(), r.width(), r.height())

    items = [(f"{kind} {index}", rect(r)) for kind, index, r in panel.geometry()]
    canvas = Rect(0, 0, panel.canvas.width(), panel.canvas.height())
    problems = [f"{name} {r} leaves the canvas {canvas}" for name, r in items if not canvas.contains(r, tol=1.0)]
    for i, (a, ra) in enumerate(items):
        for b, rb in items[i + 1 :]:
            if ra.intersects(rb, tol=1.0):
                problems.append(f"{a} {ra} overlaps {b} {rb}")
    problems += _missing_labels(panel, items)
    problems += _footer_problems(panel)
    return problems


def _missing_labels(panel, items) -> list[str]:
    """Maps on the grid's outer edges must show their token labels, in a band of real size."""
    layout = panel.grid_layout()
    if layout is None:
        return []
    out = []
    for kind, labelled in (("key labels", layout.x_labelled), ("query labels", layout.y_labelled)):
        want = {i for i in range(len(panel.displayed_heads())) if labelled(i)}
        have = {int(name.rsplit(" ", 1)[1]) for name, r in items if name.startswith(kind) and r.w > 1 and r.h > 1}
        out += [f"map {i} shows no {kind}" for i in sorted(want - have)]
    return out


def _footer_problems(panel) -> list[str]:
    readout, note = panel.readout, panel.note
    out = []
    if note.isVisible() and note.text() and readout.geometry().intersects(note.geometry()):
        out.append(f"footer read-out {readout.geometry()} overlaps the note {note.geometry()}")
    for label in (readout, note):
        shown = label.shown_text()
        if label.isVisible() and label.fontMetrics().horizontalAdvance(shown) > label.contentsRect().width() + 1:
            out.append(f"footer text {shown!r} is wider than its label")
    return out


def png_bytes(widget) -> bytes:
    """What ``widget`` shows now, as PNG bytes."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    ok = widget.grab().save(buffer, "PNG")
    buffer.close()
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return bytes(data)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out",
        nargs="?",
        default=str(ROOT / "resources" / "screenshot.png"),
        help="PNG to write (default resources/screenshot.png)",
    )
    parser.add_argument("--size", default="1400x900", help="window size WxH (default %(default)s)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the first heatmaps (default %(default)s)"
    )
    parser.add_argument(
        "--grid", default=None, metavar="PNG", help="also write the pretrained layers x heads picture here"
    )
    return parser.parse_args(argv)


def _write(path: Path, data: bytes) -> None:
    from attndesk.render.export import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


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
    from PySide6.QtWidgets import QApplication

    from attndesk.render.export import ExportError

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("attndesk")
    try:
        window = open_window((width, height), args.timeout)
    except RuntimeError as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return 1
    settle(500)
    problems = layout_problems(window.heatmapPanel)
    data = png_bytes(window)
    window.close()
    app.processEvents()
    for problem in problems:
        print(f"screenshot: warning: {problem}", file=sys.stderr)
    try:
        _write(Path(args.out), data)
        if args.grid:
            from attndesk.app.modes.pretrained.mode import write_grid_png

            write_grid_png(args.grid)
    except (OSError, ExportError) as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return 1
    print(Path(args.out).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
