"""Vision presets: small models trained on the image tasks and shipped in
``attndesk/resources/vision/<name>/``, each an ordinary transformers folder (``config.json``,
``model.safetensors``, ``preprocessor_config.json``) with ``run.json``, the run's record: the
spec, the split, each epoch's loss and test accuracy, the hash of the weights, the thread count,
the time it took and the fingerprint of the machine that trained it (``attndesk.system.machine``).

Reproducible means what it means for the text presets (``attndesk.train.presets``): where this
machine's fingerprint matches the recorded one, re-training gives the same weights (the hash);
elsewhere kernels round differently and a re-trained model reaches the recorded test accuracy
within ``RETRAIN_TOL``. A shipped model evaluates to its recorded accuracy within
``EVAL_TOL`` of one test image on any machine (a prediction on the edge may flip).

Run as ``python -m attndesk.train.images.presets [--check] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

import attndesk
from attndesk.errors import ConfigError
from attndesk.files.atomic import StagedFolder, current_umask
from attndesk.system.machine import fingerprint_differences, machine_fingerprint

from ..presets import PRESET_THREADS, preset_machine, preset_threads, weights_sha256
from .models import VisionSpec
from .trainer import VisionRun, accuracy, evaluation_set, split_record, train_vision

FORMAT = "attndesk-vision-run"
FORMAT_VERSION = 1
RECORD = "run.json"
MODEL_FILES = ("config.json", "model.safetensors", "preprocessor_config.json")

RETRAIN_TOL = {"digits": 0.02, "shapes": 0.03}  # a re-train on another machine: test accuracy, absolute
EVAL_TOL_IMAGES = 1  # the shipped weights on another machine: this many test images may flip

VISION_PRESETS: dict[str, VisionSpec] = {
    "digits-vit": VisionSpec(task="digits", arch="vit", epochs=30),
    "shapes-vit": VisionSpec(task="shapes", arch="vit", epochs=40),
    "shapes-dinov2": VisionSpec(task="shapes", arch="dinov2", epochs=40),
    "shapes-dinov2-registers": VisionSpec(task="shapes", arch="dinov2-registers", registers=4, epochs=40),
}
ABOUT = {
    "digits-vit": "ViT, class token, 2x2 patches, 2 layers: scikit-learn's 8x8 digits",
    "shapes-vit": "ViT, class token, 2x2 patches, 2 layers: which shape is drawn (masks known)",
    "shapes-dinov2": "DINOv2 without registers, 2 layers: the shapes",
    "shapes-dinov2-registers": "DINOv2 with 4 registers, 2 layers: the shapes",
}


def vision_dir() -> Path:
    return Path(str(resources.files("attndesk.resources").joinpath("vision")))


def preset_folder(name: str) -> Path:
    """The shipped folder of vision preset ``name`` (ConfigError: unknown or not shipped)."""
    if name not in VISION_PRESETS:
        raise ConfigError(f"no vision preset {name!r}; presets: {', '.join(VISION_PRESETS)}")
    folder = vision_dir() / name
    if not (folder / RECORD).is_file():
        raise ConfigError(f"vision preset {name!r} is not shipped in {folder}; run make vision-presets")
    return folder


def read_record(folder: str | Path) -> dict[str, Any]:
    """``run.json`` of a vision run's folder, checked for its format (ConfigError in one line)."""
    path = Path(folder) / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ConfigError(f"{path} is not an attndesk vision run (no format {FORMAT!r})")
    if record.get("format_version") != FORMAT_VERSION:
        raise ConfigError(
            f"{path} has format_version {record.get('format_version')}, this attndesk reads {FORMAT_VERSION}"
        )
    return record


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers without its progress bars and warnings (the loader's, the PIL processors')."""
    from transformers.utils import logging

    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if bars:
            logging.enable_progress_bar()


def load_vision_run(folder: str | Path) -> tuple[Any, Any, dict[str, Any]]:
    """(model with eager attention, image processor, record) of a saved vision run, offline."""
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    folder = Path(folder)
    record = read_record(folder)
    missing = [n for n in MODEL_FILES if not (folder / n).is_file()]
    if missing:
        raise ConfigError(f"{folder} is not a vision run: {', '.join(missing)} missing")
    with _quiet_transformers():
        model = AutoModelForImageClassification.from_pretrained(
            folder, local_files_only=True, attn_implementation="eager"
        )
        processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
    model.eval()
    return model, processor, record


def run_record(run: VisionRun, name: str | None = None) -> dict[str, Any]:
    """What a saved run records (see the module's docstring)."""
    import transformers

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "preset": name,
        "spec": run.spec.to_dict(),
        "classes": list(run.model.config.id2label[i] for i in range(run.model.config.num_labels)),
        "split": split_record(run.spec),
        "test_accuracy": run.accuracy,
        "history": run.history,
        "weights_sha256": weights_sha256(run.model.state_dict()),
        "threads": run.threads,
        "seconds": run.seconds,
        "machine": machine_fingerprint(run.threads),
        "versions": {
            "attndesk": attndesk.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }


def save_vision_run(run: VisionRun, folder: str | Path, name: str | None = None) -> Path:
    """Write the run's folder all or nothing: the model's files and ``run.json``."""
    folder = Path(folder)
    state = {k: v.detach().contiguous() for k, v in run.model.state_dict().items()}
    run.model.config.architectures = [type(run.model).__name__]  # what load_pretrained builds
    with StagedFolder(folder) as stage:
        run.model.config.to_json_file(stage.path("config.json"))
        save_file(state, str(stage.path("model.safetensors")), metadata={"format": "pt"})  # transformers' own
        os.chmod(stage.path("model.safetensors"), 0o666 & ~current_umask())  # safetensors writes it private
        run.processor.to_json_file(stage.path("preprocessor_config.json"))
        stage.path(RECORD).write_text(json.dumps(run_record(run, name), indent=1) + "\n", encoding="utf-8")
    return folder


def train_preset(name: str) -> VisionRun:
    """Train vision preset ``name`` from its seed on ``PRESET_THREADS`` threads."""
    with preset_threads():
        return train_vision(VISION_PRESETS[name])


def evaluate_preset(name: str) -> tuple[float, float, int]:
    """(recorded test accuracy, the shipped weights' test accuracy now, the number of test images)."""
    model, processor, record = load_vision_run(preset_folder(name))
    test = evaluation_set(VISION_PRESETS[name])
    return float(record["test_accuracy"]), accuracy(model, processor, test), len(test)


def check_preset(name: str, *, machine: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Re-train preset ``name`` and compare with the shipped record: the weights' hash where
    ``machine`` (default: this one) matches the recorded fingerprint, else the test accuracy
    within ``RETRAIN_TOL``. (ok, one line saying what was compared)."""
    record = read_record(preset_folder(name))
    run = train_preset(name)
    differs = fingerprint_differences(record.get("machine"), preset_machine() if machine is None else machine)
    recorded, now = float(record["test_accuracy"]), run.accuracy
    tol = RETRAIN_TOL[VISION_PRESETS[name].task]
    timing = f"{run.seconds['wall']:.0f} s wall, {run.seconds['cpu']:.0f} s CPU on {PRESET_THREADS} thread(s)"
    if not differs:
        same = weights_sha256(run.model.state_dict()) == record["weights_sha256"]
        verdict = "reproduced bit for bit" if same else "DIFFER: the weights' hash differs on a matching machine"
        return same, f"{name}: {verdict}; test accuracy {now:.4f} (recorded {recorded:.4f}); {timing}"
    ok = abs(now - recorded) <= tol
    verdict = "reproduced within tolerance" if ok else "DIFFER"
    return ok, (
        f"{name}: {verdict}: test accuracy {now:.4f}, recorded {recorded:.4f}, tolerance {tol:g} "
        f"(not bit for bit, this machine differs: {'; '.join(differs)}); {timing}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attndesk.train.images.presets", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="re-train and compare with the shipped presets")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(VISION_PRESETS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in VISION_PRESETS]
    if unknown:
        parser.error(f"no vision preset {', '.join(unknown)}; presets: {', '.join(VISION_PRESETS)}")
    failures = 0
    for name in args.names or list(VISION_PRESETS):
        if args.check:
            ok, line = check_preset(name)
            failures += not ok
            print(line, flush=True)
        else:
            run = train_preset(name)
            save_vision_run(run, vision_dir() / name, name)
            print(
                f"{name}: test accuracy {run.accuracy:.4f}, {run.seconds['wall']:.0f} s wall, "
                f"{run.seconds['cpu']:.0f} s CPU -> {vision_dir() / name}",
                flush=True,
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
