"""``attndesk bundle``: run a text through the toy model or a model folder (the flags of ``attndesk
render``) and write one reproducible ``.zip``: the session (every parameter), the input texts, the
model's identity, the versions, the exact weights as NPY, and the figures (a PNG of every map's
heads and the interactive page). ``attndesk reproduce`` computes it again (``cli.reproduce``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from attndesk.cli import render, render_image
from attndesk.cli.base import EXIT_USAGE, CliError, command_parser

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
            "  attndesk bundle --model ~/models/vit-base --image cat.png --out vit.zip\n"
            "  attndesk reproduce smol.zip"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render.input_arguments(parser)
    render.real_model_arguments(parser)
    render_image.add_arguments(parser)  # --image FILE: a vision model's run, its image and overlays
    render.model_arguments(parser)
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


def _circuits(args: argparse.Namespace) -> dict[str, bytes]:
    """The --circuit files as the bundle stores them (circuits/NAME), each checked: a circuit that
    records the question its faithfulness was measured on, of a real model's folder."""
    from attndesk.core.errors import ConfigError
    from attndesk.core.interp import load_circuit

    if not args.circuit:
        return {}
    if args.model is None:
        raise CliError("--circuit goes with --model (the model folder the circuit was found in)", EXIT_USAGE)
    out: dict[str, bytes] = {}
    for given in args.circuit:
        path = Path(given).expanduser()
        try:
            load_circuit(path)
        except ConfigError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document.get("question"), dict) or "faithfulness" not in document:
            raise CliError(
                f"--circuit {path}: it does not record its question and faithfulness (write it with "
                "'attndesk circuit')",
                EXIT_USAGE,
            )
        name = path.name if path.name not in out else f"{len(out)}-{path.name}"
        out[name] = path.read_bytes()
    return out


def _image_bundle(args: argparse.Namespace, out: Path) -> Path:
    """A vision run as a bundle: the image (inputs/image.png, as decoded), the exact weights, the
    overlay figures and the page (when it fits); ``attndesk reproduce`` runs the image again."""
    import io

    from attndesk.core.bundle import BundleError, model_identity, run_weights, write_bundle
    from attndesk.core.pretrained.vision import read_image
    from attndesk.render import ensure_gui_app
    from attndesk.render.export import render_bytes
    from attndesk.render.overlays import overlay_painter
    from attndesk.render.page import page_html
    from attndesk.session.file import SessionError, session_json

    try:
        figures, result, stem = render_image.image_figures(args, command_parser(register).parse_args([]))
        picture = io.BytesIO()
        read_image(args.image).save(picture, format="PNG")
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    ensure_gui_app(headless=True)
    files = {f"{name}.png": render_bytes(overlay_painter(f), "png", f.size(), args.dpi) for name, f in figures}
    try:
        files[f"{stem}.html"] = page_html(render_image.page_document(args, result, figures)).encode("utf-8")
    except CliError:
        pass  # a page over its limit: the weights and figures are in the bundle anyway
    folder = Path(args.model).expanduser()
    try:
        state = _state(args, render.sample_text(), None, folder)
        return write_bundle(
            out,
            session=session_json(state),
            texts={},
            model=model_identity(folder),
            weights=run_weights(result, args.layer),
            figures=files,
            run={"kind": "pretrained", "layer": args.layer, "memory_budget": args.memory_budget, "image": "image.png"},
            inputs={"image.png": picture.getvalue()},
        )
    except (BundleError, SessionError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def run(args: argparse.Namespace) -> int:
    """Compute, then write the bundle all at once; CliError (one line) for anything refused."""
    from attndesk.core.bundle import BundleError
    from attndesk.render.bundle import save_bundle
    from attndesk.session.file import SessionError

    out = Path(args.out).expanduser()
    _check_out(out)
    if args.image is not None:
        if args.circuit:
            raise CliError("--circuit goes with a text model's run, not --image", EXIT_USAGE)
        print(_image_bundle(args, out), flush=True)
        return 0
    stray = render_image.image_flags_given(args, command_parser(register).parse_args([]))
    if stray:
        raise CliError(f"{stray[0]} goes with --image (a vision model over an image)", EXIT_USAGE)
    text, key_text = render.read_inputs(args)
    circuits = _circuits(args)
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
            state,
            page["run"],
            out,
            colormap=args.colormap,
            layer=args.layer,
            memory_budget=args.memory_budget,
            circuits=circuits,
        )
    except (BundleError, SessionError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    print(path, flush=True)
    return 0
