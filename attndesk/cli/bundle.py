"""``attndesk bundle``: run a text through the toy model or a model folder (the flags of ``attndesk
render``) and write one reproducible ``.zip``: the session (every parameter), the input texts, the
model's identity, the versions, the exact weights as NPY, and the figures (a PNG of every map's
heads and the interactive page). ``attndesk reproduce`` computes it again (``cli.reproduce``)."""

from __future__ import annotations

import argparse
from typing import Any

from attndesk.cli import render_flags
from attndesk.cli.base import command_parser

NAME = "bundle"


def register(sub: Any) -> argparse.ArgumentParser:
    from attndesk.render.colormaps import COLORMAPS
    from attndesk.runs.config import FIELDS

    parser = sub.add_parser(
        NAME,
        help="write a reproducible bundle (.zip): session, texts, model identity, versions, weights, figures",
        description=(
            "Run the attention core as 'attndesk render' does and write one .zip that 'attndesk reproduce' "
            "can recompute and check: the session, the input texts, the model's identity (folder, config, "
            "weights hash), attndesk's and torch's versions, the weights as NPY and the figures."
        ),
        epilog=(
            "examples:\n  attndesk bundle --text 'the cat sat' --heads 4 --mask causal --out cat.zip\n"
            "  attndesk bundle --model ~/models/SmolLM-135M --text 'The cat sat' --out smol.zip\n"
            "  attndesk bundle --model ~/models/vit-base --image cat.png --out vit.zip\n"
            "  attndesk reproduce smol.zip"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render_flags.input_arguments(parser)
    render_flags.real_model_arguments(parser)
    render_flags.image_arguments(parser)  # --image FILE: a vision model's run, its image and overlays
    render_flags.model_arguments(parser, FIELDS)
    parser.add_argument(
        "--circuit",
        action="append",
        default=[],
        metavar="CIRCUIT.json",
        help="an edge circuit of the --model ('attndesk circuit''s circuit.json; repeat for more): stored "
        "in the bundle, its faithfulness measured again by 'attndesk reproduce'",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out", default="attndesk-bundle.zip", metavar="BUNDLE.zip", help="the bundle to write (default %(default)s)"
    )
    out.add_argument(
        "--colormap", choices=COLORMAPS, default="viridis", help="colour map of the figures (default %(default)s)"
    )
    # what render_command's checks read: every head, exact weights, the whole matrix
    parser.set_defaults(
        which=["all"],
        weights="npy",
        region=None,
        format=["png"],
        shared_scale=True,
        vmin=None,
        vmax=None,
        size=None,
        dpi=96.0,
        page_precision="auto",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Compute, then write the bundle all at once (``bundle_job``); CliError (one line) for anything refused."""
    from attndesk.cli import bundle_job

    return bundle_job.bundle_command(args, command_parser(register).parse_args([]))
