"""``attndesk bundle``: run a text through the toy model or a model folder (the flags of ``attndesk
render``) and write one reproducible ``.zip``: the session (every parameter), the input texts, the
model's identity, the versions, the exact weights as NPY, and the figures (a PNG of every map's
heads and the interactive page). ``attndesk reproduce`` computes it again (``cli.reproduce``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from attndesk.cli import render
from attndesk.cli.base import EXIT_USAGE, CliError

NAME = "bundle"


def register(sub: Any) -> argparse.ArgumentParser:
    from attndesk.render.colormaps import COLORMAPS

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
            "  attndesk reproduce smol.zip"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render.input_arguments(parser)
    render.real_model_arguments(parser)
    render.model_arguments(parser)
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


def _check_out(path: Path) -> None:
    if path.suffix.lower() != ".zip":
        raise CliError(f"--out {path}: a bundle ends in .zip", EXIT_USAGE)
    folder = path.parent
    if not folder.is_dir():
        raise CliError(f"cannot write {path}: the folder {folder} does not exist", EXIT_USAGE)
    if path.is_dir():
        raise CliError(f"cannot write {path}: a folder of that name exists", EXIT_USAGE)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(f"cannot write {path}: the folder {folder} is not writable", EXIT_USAGE)


def _state(args: argparse.Namespace, text: str, key_text: str | None, folder: Path | None):
    """The window's state these flags describe: the session a bundle stores."""
    from attndesk.core.pretrained import packaged_model_dir
    from attndesk.session.state import PACKAGED, ModeId, state_from_flags

    state = state_from_flags(vars(args), text=text, key_text=key_text)
    if folder is not None:
        packaged = folder.resolve() == Path(packaged_model_dir()).resolve()
        state.mode = PACKAGED if packaged else ModeId(kind="pretrained", path=str(folder.resolve()))
        state.target_text = args.target or ""
        if args.layer is not None:
            state.pretrained.layer = args.layer
    return state


def run(args: argparse.Namespace) -> int:
    """Compute, then write the bundle all at once; CliError (one line) for anything refused."""
    from attndesk.core.bundle import BundleError
    from attndesk.render.bundle import save_bundle
    from attndesk.session.file import SessionError

    out = Path(args.out).expanduser()
    _check_out(out)
    text, key_text = render.read_inputs(args)
    if args.model is not None:
        _, page = render.model_maps(args, text)
    else:
        if args.target is not None or args.layer is not None:
            raise CliError("--target and --layer go with --model (a real model's folder)", EXIT_USAGE)
        result, _ = render.compute(args, text, key_text)
        page = render.toy_page(result, result.attention_map())
    try:
        state = _state(args, text, key_text, None if args.model is None else Path(args.model).expanduser())
        path = save_bundle(
            state, page["run"], out, colormap=args.colormap, layer=args.layer, memory_budget=args.memory_budget
        )
    except (BundleError, SessionError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    print(path, flush=True)
    return 0
