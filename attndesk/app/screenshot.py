"""Save screenshots of the window without a display: ``python -m attndesk.app.screenshot OUT.png``.

Used for the README image (resources/screenshot.png) and for looking at the layout in CI.
Options: ``--heads N``, ``--mask KIND``, ``--text TEXT``, ``--size WxH``, ``--view all|mean|N``.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attndesk.app.screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--mask", default="causal")
    parser.add_argument("--text", default="The cat sat on the mat because it was tired.")
    parser.add_argument("--size", default="1400x900")
    parser.add_argument("--view", default="all")
    parser.add_argument("--hover", default="3,2", help="query,key cell to hover (empty: none)")
    args = parser.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size must look like 1400x900, got {args.size!r}")

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # a throw-away settings organisation: a screenshot never reads or changes the user's layout
    os.environ["ATTNDESK_SETTINGS_ORG"] = "attndesk-screenshot"
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from attndesk.app.main_window import MainWindow, app_settings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = MainWindow(restore=False)
    try:
        window.resize(width, height)
        window.show()
        window.tokensPanel.set_texts(args.text, None, False)
        window.parametersPanel.set_values({"num_heads": args.heads, "embed_dim": args.embed_dim, "mask": args.mask})
        loop = QEventLoop()
        window.resultDisplayed.connect(loop.quit)
        QTimer.singleShot(60000, loop.quit)
        window.compute_now()
        loop.exec()
        if window.displayed_result() is None:
            print(f"no result: {window.status_text()}", file=sys.stderr)
            return 1
        view = args.view if args.view in ("all", "mean") else int(args.view)
        window.heatmapPanel.set_view_target(view)
        for _ in range(5):
            app.processEvents()
        if args.hover:
            q, k = (int(v) for v in args.hover.split(","))
            window.heatmapPanel.hover_cell(q, k)
            app.processEvents()
        if not window.grab().save(args.out):
            print(f"cannot write {args.out}", file=sys.stderr)
            return 1
    finally:
        window.close()
        app_settings().clear()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
