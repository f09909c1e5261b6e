"""Pictures of the pretrained mode for every family, from small random-weight checkpoints
(tests/pretrained_models.py, with a larger initialisation so the heads' patterns are sharp):
a Mistral-shaped decoder (grouped-query heads, a sliding window, log colours) and a T5
encoder-decoder's cross-attention with a target text, plus a LLaMA, a Gemma 2 grid and BART.

    xvfb-run -a .venv/bin/python scripts/pretrained_screens.py OUT_DIR [--readme]

``--readme`` also writes resources/pretrained_decoder.png and resources/pretrained_seq2seq.png.
The weights are random: the pictures show what the window draws (masks, groups, bands, parts),
not what a trained model attends to.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from PySide6.QtWidgets import QApplication  # noqa: E402

TEXT = "The animal didn't cross the street because it was too tired."
TARGET = "L'animal n'a pas traversé la rue parce qu'il était trop fatigué."
SHARP = {"initializer_range": 0.5}
MODELS = {  # name -> (base config, changes)
    "mistral": ("mistral", {"num_key_value_heads": 2, "sliding_window": 5, **SHARP}),
    "llama": ("llama", SHARP),
    "gemma2": ("gemma2", SHARP),
    "t5": ("t5", SHARP),
    "bart": ("bart", {"init_std": 0.5}),
}
# picture -> (model, state changes, tab)
SHOTS = {
    "decoder_mistral": ("mistral", {"view.log_scale": True, "pretrained.layer": 1}, "heatmaps"),
    "decoder_llama_first_hidden": ("llama", {"view.hide_first_key": True}, "heatmaps"),
    "decoder_gemma2_grid": ("gemma2", {}, "all-layers"),
    "decoder_llama_step_through": ("llama", {"pretrained.layer": 1}, "step-through"),
    "seq2seq_t5_cross": ("t5", {"target_text": TARGET, "pretrained.part": "cross"}, "heatmaps"),
    "seq2seq_t5_decoder": ("t5", {"target_text": TARGET, "pretrained.part": "decoder"}, "heatmaps"),
    "seq2seq_bart_encoder": ("bart", {"target_text": TARGET}, "heatmaps"),
    "seq2seq_t5_rollout_cross": ("t5", {"target_text": TARGET, "pretrained.part": "cross"}, "rollout"),
}
README = {"decoder_mistral": "pretrained_decoder.png", "seq2seq_t5_cross": "pretrained_seq2seq.png"}


def settle(app, w, seconds: float = 60.0, quiet: float = 0.6) -> None:
    """Process events until nothing is computing or drawing for ``quiet`` seconds."""
    end, calm = time.time() + seconds, None
    while time.time() < end:
        app.processEvents()
        busy = w.compute.is_busy() or w.heatmapPanel.is_building() or w.status.busy
        calm = None if busy else (calm or time.time())
        if calm and time.time() - calm > quiet:
            return
        time.sleep(0.02)


def apply(state, changes: dict) -> None:
    for dotted, value in changes.items():
        *path, name = dotted.split(".")
        target = state
        for part in path:
            target = getattr(target, part)
        setattr(target, name, value)


def main(out: Path, readme: bool) -> None:
    from pretrained_models import build

    from attndesk.app import MainWindow

    app = QApplication.instance() or QApplication([])
    folder = Path(tempfile.mkdtemp(prefix="attndesk-screens-"))
    try:
        paths = {name: build(base, folder / name, **changes) for name, (base, changes) in MODELS.items()}
        out.mkdir(parents=True, exist_ok=True)
        for shot, (model, changes, tab) in SHOTS.items():
            w = MainWindow(restore=False)
            w.resize(1500, 920)
            w.show()
            settle(app, w)
            w.state.text = TEXT
            w.pretrained.open_folder(paths[model])
            settle(app, w)
            apply(w.state, changes)
            w.state.view.tab = tab
            settle(app, w)
            picture = out / f"{shot}.png"
            w.grab().save(str(picture))
            print(picture, "·", w.status_text()[:160])
            if readme and shot in README:
                shutil.copy(picture, ROOT / "resources" / README[shot])
            w.close()
            w.deleteLater()
            app.processEvents()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "screens"), "--readme" in sys.argv)
