"""``attndesk train``: train a small decoder on a toy task and write the model, its learning
curves, the final heatmaps and an animation of the heatmaps across checkpoints, all or nothing.
The flags are declared here, the work is ``train_job``."""

from __future__ import annotations

import argparse

from attndesk.cli.arguments import add_fields, at_least
from attndesk.cli.base import empty_out

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


def run(args: argparse.Namespace) -> int:
    """Train, then write everything into --out together (``train_job``); Ctrl+C stops between
    steps and keeps what was trained so far."""
    from attndesk.cli import train_job

    empty_out(args.out)
    return train_job.train_command(args)
