"""``attndesk train``: train a small decoder on a toy task and write the model, its learning
curves, the final heatmaps and an animation of the heatmaps across checkpoints, all or nothing.

Also ``render_trained``: what ``attndesk render --trained PATH`` draws (each layer's heads on
the task's probe input, the same figures as the toy render)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from attndesk.cli.arguments import add_fields, at_least
from attndesk.cli.base import EXIT_FAILURE, EXIT_USAGE, empty_out

NAME = "train"
_ANIMATIONS = ("gif", "mp4", "none")


def register(sub) -> argparse.ArgumentParser:
    from attndesk.train.config import TRAIN_FIELDS
    from attndesk.train.presets import PRESETS

    p = sub.add_parser(
        NAME,
        help="train a small decoder on a toy task and write the model, curves and heatmaps",
        description="Train a small decoder built from attndesk's attention on a seeded toy task (deterministic "
        "on the CPU for a seed). Writes into --out: the model (model.safetensors, config.json, "
        "checkpoints, history), curves.png, each layer's final heatmaps and learning.gif; "
        "'attndesk render --trained DIR' draws it again.",
        epilog="examples:\n  attndesk train --task induction --layers 2 --heads 4 --steps 600 --out ind\n"
        "  attndesk train --preset reverse --out rev\n"
        "  attndesk train --task text --text-file book.txt --level word --steps 500 --out text",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="start from a preset's settings (flags given override them)",
    )
    add_fields(p, [spec for spec in TRAIN_FIELDS if spec.flag], unset=True)
    p.add_argument(
        "--threads",
        type=at_least(1),
        default=None,
        help="CPU threads (default: chosen by the model's size and how busy the machine is, checked again "
        "during the run; give a number to repeat a run bit for bit)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write into (created if missing)")
    p.add_argument("--curves", type=_curve_formats, default=["png"], metavar="FMT", help="png and/or svg (default png)")
    p.add_argument(
        "--animation", choices=_ANIMATIONS, default="gif", help="the heatmaps across checkpoints (default gif)"
    )
    return p


def _curve_formats(text: str) -> list[str]:
    formats = [part.strip().lower() for part in text.split(",") if part.strip()]
    bad = [f for f in formats if f not in ("png", "svg")]
    if bad or not formats:
        raise argparse.ArgumentTypeError(f"curve formats are png and svg, got {text!r}")
    return formats


def _error(message: str, code: int) -> int:
    """One line on stderr and the exit code (the CLI's convention; see attndesk.cli)."""
    print(f"attndesk: error: {message}", file=sys.stderr)
    return code


def config_from_args(args: argparse.Namespace):
    """The TrainConfig the flags describe (a preset's, with the flags given on top), validated."""
    from attndesk.core.errors import ConfigError
    from attndesk.train.config import TRAIN_FIELDS, TrainConfig
    from attndesk.train.presets import PRESETS

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


def run(args: argparse.Namespace) -> int:
    """Train, then write everything into --out together; Ctrl+C stops between steps and keeps
    what was trained so far."""
    from attndesk.cli.progress import ProgressLine
    from attndesk.train import Trainer

    out = empty_out(args.out)
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
    from attndesk.core.atomic import StagedFolder
    from attndesk.render import ensure_gui_app
    from attndesk.render.export import ExportError
    from attndesk.render.training import (
        write_animation,
        write_curves,
        write_final_figures,
    )
    from attndesk.train.store import write_run_files

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


# --- attndesk render --trained PATH ------------------------------------------------------------


def add_render_argument(render: argparse.ArgumentParser) -> None:
    render.add_argument(
        "--trained",
        metavar="PATH",
        default=None,
        help="draw a model trained by 'attndesk train' (its folder, or a preset's name): each "
        "layer's heads on the task's probe input",
    )


def render_trained(args: argparse.Namespace) -> tuple[list, dict]:
    """The AttentionMaps ``attndesk render --trained PATH`` draws, one per layer, and the page that
    holds them all (``--format html``: a layer picker, the training config as its settings);
    ConfigError, one line, for a folder that is not a trained model or flags that do not go with it."""
    from attndesk.core.errors import ConfigError
    from attndesk.render.page import PageMap
    from attndesk.render.training import layer_maps
    from attndesk.train import load_trained
    from attndesk.train.presets import PRESETS, load_preset

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
