"""``attndesk render``: heatmaps to PNG/SVG/PDF/HTML without a window.

It runs the same core as the window and writes the same figures (Qt offscreen, no display
needed), so heatmaps can be scripted and ``make run`` has a fallback without a display. Every
failure the user can fix ends in one line on stderr and a non-zero exit code, before anything is
written; the files of one command are written all-or-nothing. ``attndesk bundle`` builds on its
inputs, flags and run. The flags are declared in ``render_flags``, the work is ``render_job``.
"""

from __future__ import annotations

import argparse
from typing import Any

from attndesk.cli import render_flags
from attndesk.cli.base import command_parser, empty_out

NAME = "render"


def register(sub: Any) -> argparse.ArgumentParser:
    from attndesk.corpus.metrics import METRICS
    from attndesk.render.colormaps import COLORMAPS
    from attndesk.runs.config import FIELDS

    render = sub.add_parser(
        NAME,
        help="render heatmaps to PNG/SVG/PDF without a window",
        description=(
            "Run the attention core on a text and write the heatmaps (and optionally the raw weights) "
            "to a folder, without a window (Qt offscreen). Prints the path of every file written."
        ),
        epilog=(
            "examples:\n"
            "  attndesk render --text 'the cat sat on the mat' --heads 8 --mask causal --out figs\n"
            "  attndesk render --text-file essay.txt --which mean --format pdf --out figs\n"
            "  attndesk render --text 'a b c d' --which 0,mean --weights csv --size 1200x1000 --dpi 150\n"
            "  attndesk render --heads 8 --kv-heads 2 --position rope --window 4 --softcap 30 --out figs\n"
            "  attndesk render --model ~/models/SmolLM-135M --text 'The cat sat' --layer 3 --weights npy\n"
            "  attndesk render --model ~/models/t5-small --text 'Hello world' --target 'Hallo Welt' --out t5\n"
            "  attndesk render --model ~/models/vit-base --image cat.png --format png,svg --out vit"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render_flags.input_arguments(render)
    render_flags.real_model_arguments(render)
    render_flags.image_arguments(render)  # --image FILE, --query, --maps, --opacity, --ig-steps
    render_flags.trained_argument(render)  # --trained PATH
    render_flags.store_arguments(render, METRICS)  # --store DIR, --texts, --metric
    render_flags.model_arguments(render, FIELDS)
    render_flags.output_arguments(render, COLORMAPS)
    return render


def defaults() -> argparse.Namespace:
    """``attndesk render``'s flags with nothing given."""
    return command_parser(register).parse_args([])


def run(args: argparse.Namespace) -> int:
    from attndesk.cli import render_job

    empty_out(args.out)
    render_job.render_command(args, defaults())
    return 0
