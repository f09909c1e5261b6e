"""What ``attndesk bundle`` does once its flags are parsed (``cli.bundle`` holds the flags and
imports this module in its ``run``): the run through ``render_job`` (a text) or ``render_image``
(an image), its session, the circuits given, and the ``.zip`` written all at once."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

from attndesk.cli import render_image, render_job
from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.cli.render_flags import image_flags_given
from attndesk.errors import ConfigError
from attndesk.interp import load_circuit
from attndesk.models import packaged_model_dir
from attndesk.models.vision import read_image
from attndesk.render import ensure_gui_app
from attndesk.render.bundle import save_bundle
from attndesk.render.page import page_html
from attndesk.session.bundle import BundleError, model_identity, run_weights, write_bundle
from attndesk.session.file import SessionError, session_json
from attndesk.session.state import PACKAGED, ModeId, state_from_flags


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


def _image_bundle(args: argparse.Namespace, defaults: argparse.Namespace, out: Path) -> Path:
    """A vision run as a bundle: the image (inputs/image.png, as decoded), the exact weights, the
    overlay figures and the page (when it fits); ``attndesk reproduce`` runs the image again."""
    try:
        figures, result, stem = render_image.image_figures(args, defaults)
        picture = io.BytesIO()
        read_image(args.image).save(picture, format="PNG")
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    ensure_gui_app(headless=True)
    pngs = render_image.figure_pngs(args, figures)
    files = {f"{name}.png": png for name, png in pngs.items()}
    try:
        files[f"{stem}.html"] = page_html(render_image.page_document(args, result, figures, pngs)).encode("utf-8")
    except CliError:
        pass  # a page over its limit: the weights and figures are in the bundle anyway
    folder = Path(args.model).expanduser()
    try:
        state = _state(args, render_job.sample_text(), None, folder)
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


def bundle_command(args: argparse.Namespace, defaults: argparse.Namespace) -> int:
    """Compute, then write the bundle all at once; CliError (one line) for anything refused."""
    out = Path(args.out).expanduser()
    _check_out(out)
    if args.image is not None:
        if args.circuit:
            raise CliError("--circuit goes with a text model's run, not --image", EXIT_USAGE)
        print(_image_bundle(args, defaults, out), flush=True)
        return 0
    stray = image_flags_given(args, defaults)
    if stray:
        raise CliError(f"{stray[0]} goes with --image (a vision model over an image)", EXIT_USAGE)
    text, key_text = render_job.read_inputs(args)
    circuits = _circuits(args)
    if args.model is not None:
        _, page = render_job.model_maps(args, defaults, text)
    else:
        if args.target is not None or args.layer is not None:
            raise CliError("--target and --layer go with --model (a real model's folder)", EXIT_USAGE)
        result, _ = render_job.compute(args, text, key_text)
        page = render_job.toy_page(result, result.attention_map())
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
