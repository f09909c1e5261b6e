"""What ``attndesk train`` does once its flags are parsed (``cli.train`` holds the flags and imports
this module in its ``run``): the config from a preset and the flags, the run with its progress line
and Ctrl+C, and the files written all or nothing. Also ``render_trained``: what ``attndesk render
--trained PATH`` draws (each layer's heads on the task's probe input, the same figures as the toy
render)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from attndesk.cli.base import EXIT_FAILURE, EXIT_USAGE
from attndesk.cli.progress import ProgressLine
from attndesk.errors import ConfigError
from attndesk.files.atomic import StagedFolder
from attndesk.render import ensure_gui_app
from attndesk.render.export import ExportError
from attndesk.render.page import PageMap
from attndesk.render.training import layer_maps, write_animation, write_curves, write_final_figures
from attndesk.train import Trainer, load_trained
from attndesk.train.config import TRAIN_FIELDS, TrainConfig
from attndesk.train.presets import PRESETS, load_preset
from attndesk.train.store import write_run_files


def _error(message: str, code: int) -> int:
    """One line on stderr and the exit code (the CLI's convention; see attndesk.cli)."""
    print(f"attndesk: error: {message}", file=sys.stderr)
    return code


def config_from_args(args: argparse.Namespace):
    """The TrainConfig the flags describe (a preset's, with the flags given on top), validated."""
    base = PRESETS[args.preset].to_dict() if args.preset else {}
    given = {spec.name: getattr(args, spec.name) for spec in TRAIN_FIELDS if getattr(args, spec.name, None) is not None}
    if base and given.get("task", base["task"]) != base["task"]:
        raise ConfigError(f"--preset {args.preset} trains the {base['task']} task: drop --task or --preset")
    merged = base | given
    return TrainConfig(**merged).validate()


class _Progress:
    """The progress line of a run: step, loss, accuracy and pattern score."""

    def __init__(self, line, pattern: str):
        self.line, self.pattern = line, pattern
        self.accuracy = self.score = None

    def __call__(self, report) -> None:
        if report.accuracy is not None:
            self.accuracy, self.score = report.accuracy, report.pattern
        text = f"step {report.step:,}/{report.steps:,}, loss {report.loss:.4f}"
        if self.accuracy is not None:
            text += f", accuracy {self.accuracy:.3f}, {self.pattern} {self.score:.3f}"
        rate = report.step / report.elapsed_s if report.elapsed_s > 0 else 0.0
        self.line.update(report.step / report.steps, f"{text}, {rate:.0f} steps/s")


def train_command(args: argparse.Namespace) -> int:
    """Train, then write everything into --out together; Ctrl+C stops between steps and keeps
    what was trained so far."""
    out = Path(args.out).expanduser()
    try:
        cfg = config_from_args(args)
        trainer = Trainer(cfg, threads=args.threads or "auto")
    except (ValueError, TypeError) as exc:  # ConfigError included
        return _error(str(exc), EXIT_USAGE)
    result = _train(trainer, ProgressLine)
    if result.status != "finished":
        print(f"attndesk: note: {result.message}", file=sys.stderr)
    try:
        written = write_outputs(result, out, args.curves, args.animation)
    except (OSError, ValueError) as exc:  # ExportError and ConfigError included
        return _error(str(exc), EXIT_FAILURE)
    for path in written:
        print(path, flush=True)
    return 0 if result.status == "finished" else EXIT_FAILURE


def _train(trainer, progress_line):
    """Run the trainer with a progress line; Ctrl+C sets the stop event (the step in flight ends)."""
    stop = threading.Event()
    previous = (
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        with progress_line(prefix="attndesk train") as line:
            progress = _Progress(line, trainer.task.pattern)
            for report in trainer.steps(stop=stop):
                progress(report)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return trainer.run


def write_outputs(result, out: Path, curves: list[str], animation: str) -> list[Path]:
    """The model folder's files, the curves, the final figures and the animation, together."""
    ensure_gui_app(headless=True)
    try:
        with StagedFolder(out) as stage:
            write_run_files(result, stage.path)
            for fmt in curves:
                write_curves(result, stage.path(f"curves.{fmt}"))
            write_final_figures(result, stage.path)
            if animation != "none" and len(result.checkpoints.steps) > 1:
                write_animation(result, stage.path(f"learning.{animation}"))
    except OSError as exc:
        if isinstance(exc, ExportError):
            raise
        raise ExportError(f"cannot write into {out}: {exc.strerror or exc}") from None
    return stage.committed


def render_trained(args: argparse.Namespace) -> tuple[list, dict]:
    """The AttentionMaps ``attndesk render --trained PATH`` draws, one per layer, and the page that
    holds them all (``--format html``: a layer picker, the training config as its settings);
    ConfigError, one line, for a folder that is not a trained model or flags that do not go with it."""
    if args.model is not None or args.text is not None or args.text_file is not None:
        raise ConfigError("--trained draws the model on its task's probe input: drop --model, --text and --text-file")
    path = Path(args.trained).expanduser()
    run = load_preset(args.trained) if args.trained in PRESETS and not path.exists() else load_trained(path)
    maps = layer_maps(run)
    page = {
        "maps": [PageMap(amap, layer=n) for n, amap in enumerate(maps)],
        "summary": maps[0].summary,
        "settings": {**run.cfg.to_dict(), "step": run.step},
        "run": run,
        "name": f"attn_trained_{run.cfg.task}_step{run.step}.html",
    }
    return maps, page
