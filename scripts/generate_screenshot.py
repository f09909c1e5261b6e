"""The user guide's picture of the generation stepper: ``xvfb-run -a python scripts/generate_screenshot.py
[OUT.png]`` (or Qt offscreen). No decoder's weights ship with attndesk, so it builds a random-weight
LLaMA-shaped checkpoint (4 layers x 8 heads sharing 2 K/V heads, the packaged WordPiece tokenizer):
the words it writes are nonsense, the attention rows and probabilities are exactly the model's."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests", ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

TEXT = "The cat sat on the mat because it was tired."
LAYOUT = {
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "max_position_embeddings": 512,
    "initializer_range": 0.25,
}  # wider weights: sharper rows than 0.02's


def main(out: str = "resources/generate.png", steps: int = 8) -> Path:
    from pretrained_models import build
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication
    from screenshot import open_window, png_bytes, settle, wait_for

    app = QApplication.instance() or QApplication([])
    folder = build("llama", Path(tempfile.mkdtemp()) / "random-llama", seed=3, **LAYOUT)
    window = open_window()
    window.state.text = TEXT
    if not wait_for(window, lambda: window.pretrained.open_folder(folder)):
        raise RuntimeError(f"the model did not run: {window.status_text()}")
    window.state.view.tab = "generate"
    from attndesk.app.tabs.generate.presenter import GENERATE_TAB, GenerationTab

    tab = window.tab_widget(GENERATE_TAB).findChild(GenerationTab)
    tab.view.countSpin.setValue(steps)
    tab.view.samplingCombo.setCurrentIndex(
        tab.view.samplingCombo.findData("sample")
    )  # the chosen bar is not always the top one
    tab.view.temperatureSpin.setValue(0.8)
    tab.view.seedSpin.setValue(7)
    tab.run(steps)
    loop = QEventLoop()
    tab.view.stepList.model().rowsInserted.connect(lambda *_a: len(tab.view.steps()) >= steps and loop.quit())
    QTimer.singleShot(60_000, loop.quit)
    loop.exec()
    tab.view.select_step(steps - 1)
    settle(500)
    target = Path(out)
    target.write_bytes(png_bytes(window))
    window.close()
    app.processEvents()
    return target


if __name__ == "__main__":
    print(main(*sys.argv[1:2]))
