"""Pictures of the modern-attention variants in the real window (docs/user-guide.md, "Modern attention in the window").

``python scripts/variant_screens.py [OUT_DIR]`` writes, from the sample sentence:

- ``variants.png``: the whole window, 8 query heads sharing 2 K/V heads, a causal sliding window
  of 4 tokens (the user guide's picture, copied to resources/ by hand);
- ``variants_panel.png``: the parameters panel with those choices;
- ``variants_rope_steps.png``: the step-through of a RoPE + soft-cap run, one weight hovered.

It warns about any overlap in the heatmap grid (the screenshot test's check). Works under Xvfb
(``xvfb-run -a``) or with no display (Qt offscreen); the user's settings are left alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshot import layout_problems, open_window, png_bytes, settle, show_values

GQA_WINDOW = {"num_heads": 8, "kv_heads": 2, "window": 4, "mask": "causal"}
ROPE_STEPS = {"num_heads": 4, "kv_heads": 2, "window": None, "mask": "padding", "position": "rope", "softcap": 1.0}


def wait_drawn(signal, timeout_ms: int = 60000) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".")
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-screenshot")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0]])
    window = open_window()
    show_values(window, GQA_WINDOW)
    for problem in layout_problems(window.heatmapPanel):
        print(f"variant_screens: warning: {problem}", file=sys.stderr)
    (out / "variants.png").write_bytes(png_bytes(window))
    (out / "variants_panel.png").write_bytes(png_bytes(window.parametersDock))
    show_values(window, ROPE_STEPS)
    view = window.tab_widget("step-through")
    window.state.view.tab = "step-through"
    wait_drawn(window.tab_presenter("step-through").shownResult)
    settle(500)
    view.hover_weight(5, 2)
    (out / "variants_rope_steps.png").write_bytes(png_bytes(view))
    window.compute.shutdown()
    window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
