"""What ``attndesk render`` does once its flags are parsed (``cli.render`` holds the flags and
imports this module in its ``run``): the toy model's run with its plan and progress line, a real
model's or a trained model's maps, an image's or a corpus store's files, the figures and the page,
written all or nothing. ``attndesk bundle`` and the window's headless fallback run through it too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attndesk.cli import progress, render_image, render_model, render_store, train_job
from attndesk.cli.base import EXIT_FAILURE, EXIT_USAGE, CliError
from attndesk.cli.render_flags import image_flags_given
from attndesk.errors import ConfigError
from attndesk.files.textfile import read_text_file
from attndesk.render import ensure_gui_app
from attndesk.render.export import (
    ExportError,
    OutputSet,
    check_image_memory,
    check_size,
    default_filename,
    export_figure,
    export_weights,
)
from attndesk.render.figure import HeatmapFigure, figure_from_map, finite_range
from attndesk.render.page import PageTooLarge, check_page_size, write_page
from attndesk.render.page_overview import write_overview_page
from attndesk.runs.pipeline import prepare_text, run_attention
from attndesk.runs.select import parse_which
from attndesk.session.state import AppState, state_from_flags
from attndesk.system.free_memory import format_bytes

PLAN_LINE_S = 2.0  # a run planned longer than this (or memory-bounded) prints its plan and progress


def sample_text() -> str:
    """The window's sample sentence: the state model's default text (one source of truth)."""
    return str(AppState.model_fields["text"].default)


def config_from_args(args: argparse.Namespace):
    """The validated config the flags describe: the window's state model built from them (each
    model flag's ``dest`` is the config field it sets, so there is no second field list here)."""
    flags = dict(vars(args))
    if flags.pop("positional", None) is False:
        if "position" in getattr(args, "given", ()) and args.position != "none":
            raise ConfigError(f"--no-positional contradicts --position {args.position}: give one of them")
        flags["position"] = "none"
    return state_from_flags(flags).config.validate()


def _trained_weights(args: argparse.Namespace) -> None:
    """``--weights-from NAME`` (a shipped trained preset) draws that preset, as ``--trained NAME`` does."""
    weights = getattr(args, "weights_from", "random")
    if weights in (None, "random"):
        return
    if weights == "trained":
        raise CliError(
            "--weights-from trained is the model open in the window's Train tab; here give --trained DIR "
            "(a folder saved by attndesk train) or a preset's name",
            EXIT_USAGE,
        )
    if args.trained is not None and args.trained != weights:
        raise CliError(f"--weights-from {weights} and --trained {args.trained} name two models: give one", EXIT_USAGE)
    args.trained = weights


def render_command(args: argparse.Namespace, defaults: argparse.Namespace, echo: bool = True) -> list[Path]:
    """Run the core and write every requested file, all or nothing; returns the paths written.

    Everything that can be refused is refused before the run (inputs, colour limits, sizes) or
    before the first file is written (heads, regions); the files are written into a staging
    folder and moved into ``--out`` together, so a failure or Ctrl+C leaves ``--out`` as it was.
    With ``echo`` each path is printed on stdout once the set is in place."""
    if getattr(args, "store", None) is not None:  # a corpus store's page
        return _store_page(args, defaults, echo)
    if getattr(args, "image", None) is not None:  # a vision model over an image
        return render_image.render_image(args, defaults, echo)
    stray = image_flags_given(args, defaults)
    if stray:
        raise CliError(f"{stray[0]} goes with --image (a vision model over an image)", EXIT_USAGE)
    text, key_text = read_inputs(args)
    _check_output_options(args)
    _trained_weights(args)
    if args.trained is not None:
        try:
            maps, page = train_job.render_trained(args)
        except ValueError as exc:  # ConfigError: not a trained model, another format version
            raise CliError(str(exc), EXIT_USAGE) from None
    elif args.model is not None:
        maps, page = model_maps(args, defaults, text)
    else:
        if args.target is not None or args.layer is not None:
            raise CliError("--target and --layer go with --model (a real model's folder)", EXIT_USAGE)
        result, said = compute(args, text, key_text)
        for notice in result.notices:
            if notice not in said:
                print(f"attndesk: note: {notice}", file=sys.stderr)
        maps = [result.attention_map()]
        page = toy_page(result, maps[0])
    if "html" in args.format:
        _check_page(args, page)
    drawn = [(amap, _figures(args, amap)) for amap in maps]  # every figure exists before the first file is written
    written = _write_outputs(args, drawn, page)
    for path in written:
        _echo(path, echo)
    return written


def _store_page(args: argparse.Namespace, defaults: argparse.Namespace, echo: bool) -> list[Path]:
    """``--store DIR``: the corpus store's page (``render_store``); bad input exits 2."""
    try:
        return render_store.render_store(args, defaults, echo)
    except ValueError as exc:  # ConfigError: bad input
        raise CliError(str(exc), EXIT_USAGE) from None
    except ExportError as exc:  # PageTooLarge is bad input; anything else could not be written
        raise CliError(str(exc), EXIT_USAGE if isinstance(exc, PageTooLarge) else EXIT_FAILURE) from None


def read_inputs(args: argparse.Namespace) -> tuple[str, str | None]:
    try:
        text = (
            read_text_file(args.text_file)
            if args.text_file
            else (args.text if args.text is not None else sample_text())
        )
        key_text = read_text_file(args.key_text_file) if args.key_text_file else args.key_text
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return text, key_text


def _check_output_options(args: argparse.Namespace) -> None:
    """Colour limits, image size and dpi, before anything is computed."""
    if getattr(args, "page_overview", False) and "html" not in args.format:
        raise CliError("--page-overview shapes the html page: add --format html", EXIT_USAGE)
    if getattr(args, "store", None) is None and (
        getattr(args, "texts", [0]) != [0] or getattr(args, "metric", "entropy") != "entropy"
    ):
        raise CliError("--texts and --metric go with --store (a corpus store's page)", EXIT_USAGE)
    if args.vmin is not None and args.vmax is not None and not args.vmin < args.vmax:
        raise CliError(f"--vmin {args.vmin:g} must be below --vmax {args.vmax:g}", EXIT_USAGE)
    if args.vmin is None and args.vmax is not None and args.vmax <= 0:
        raise CliError(
            f"--vmax {args.vmax:g} is at or below the bottom of the colour scale (0, the smallest weight); "
            "give a positive --vmax, or a --vmin below it",
            EXIT_USAGE,
        )
    try:
        width, height, _ = check_size(args.size if args.size is not None else (100, 100), args.dpi)
        if args.size is not None and "png" in args.format:
            check_image_memory(width, height)
    except ExportError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def compute(args: argparse.Namespace, text: str, key_text: str | None):
    """Validate, plan (printed on stderr when the run is long), run with a progress line;
    returns (result, the lines already printed, which its notices need not repeat)."""
    try:
        config = config_from_args(args)
        prepared = prepare_text(config, text, key_text)  # tokenized and memory-checked once, for the run too
        plan = prepared.plan
        _check_selection(args, plan)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    long_run = plan.blocked or (plan.seconds or 0.0) >= PLAN_LINE_S
    if long_run:  # the line the window shows before a long run
        print(f"attndesk: plan: {plan.describe()}", file=sys.stderr, flush=True)
    with progress.ProgressLine() as line:
        try:
            result = run_attention(
                config, text, key_text=key_text, prepared=prepared, progress=line.update if long_run else None
            )
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    return result, ({plan.describe(eta=False)} if long_run else set())


def model_maps(args: argparse.Namespace, defaults: argparse.Namespace, text: str) -> tuple[list, dict]:
    """The maps of ``--model`` and its page: flags checked, the folder loaded and run (ConfigError: one line)."""

    try:
        render_model.check_model_flags(args, defaults)
        run = render_model.model_run(args, text)
        page = render_model.model_page(run, args)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    for notice in run.notices:
        print(f"attndesk: note: {notice}", file=sys.stderr)
    return [pm.map for pm in page["maps"]], page


def toy_page(result, amap) -> dict:
    """What the toy run's html page holds: its map, caption, parameters and file name."""
    return {
        "maps": [amap],
        "summary": amap.summary,
        "settings": result.config.to_dict(),
        "run": result,
        "name": default_filename(amap, "all", "html"),
    }


def _check_page(args: argparse.Namespace, page: dict) -> None:
    """A run too large for a page is refused before any file is written, naming what fits."""
    if getattr(args, "page_overview", False):  # sized when it is built: the overview takes the room the region leaves
        return
    try:
        check_page_size(page["maps"], args.page_precision, args.region)
    except PageTooLarge as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _figures(args: argparse.Namespace, amap) -> list[tuple[str | int, HeatmapFigure]]:
    """(which, figure) for every --which, with the colour limits checked against the data."""
    figures: list[tuple[str | int, HeatmapFigure]] = []
    for which in args.which:
        try:
            figure = figure_from_map(
                amap, which, colormap=args.colormap, shared_scale=args.shared_scale, region=args.region
            )
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        figure.vmin, figure.vmax = args.vmin, args.vmax
        _check_colour_limits(args, figure, which)
        figures.append((which, figure))
    return figures


def _check_selection(args: argparse.Namespace, plan) -> None:
    """--which, --region and --weights against the planned run, before it starts: a typo should
    not cost a five-minute run. A region of a memory-bounded run is recomputed exactly, so it
    must fit the budget."""
    for which in args.which:
        parse_which(which, plan.num_heads)
    if args.weights != "none" and args.region is None and plan.kind == "pyramid":
        raise ConfigError(
            "the full weights exceed the memory budget, so only an overview will be kept; "
            "write exact numbers of a part with --region Q0:Q1,K0:K1, or raise --memory-budget"
        )
    if args.region is None:
        return
    (q0, q1), (k0, k1) = args.region
    if q1 > plan.lq or k1 > plan.lk:
        raise ConfigError(f"region {q0}:{q1},{k0}:{k1} is outside the {plan.lq}x{plan.lk} weights")
    heads = plan.num_heads if "all" in args.which else 1
    need = 2 * heads * (q1 - q0) * (k1 - k0) * 4  # the exact weights and the figure's copy
    if plan.kind == "pyramid" and need > plan.budget:
        side = int((plan.budget / (2 * heads * 4)) ** 0.5)
        raise ConfigError(
            f"--region {q0}:{q1},{k0}:{k1} holds {(q1 - q0) * (k1 - k0):,} cells x {heads} head(s): "
            f"{format_bytes(need)} of exact weights, over the {format_bytes(plan.budget)} memory budget; "
            f"at most about {side:,} x {side:,} tokens fit"
        )


def _check_colour_limits(args: argparse.Namespace, figure, which) -> None:
    """A --vmin at or above the largest weight (with no --vmax) would paint every cell alike."""
    if args.vmin is None or args.vmax is not None:
        return
    top = finite_range(figure.matrices)[1]
    if args.vmin >= top:
        raise CliError(
            f"--vmin {args.vmin:g} is at or above the largest weight of --which {which} ({top:.4g}): every cell "
            "would get the same colour; lower --vmin or give a --vmax above it",
            EXIT_USAGE,
        )


def _write_outputs(args: argparse.Namespace, drawn: list, page: dict) -> list[Path]:
    """Write every (map, figures) file into a staging folder, then move them all into --out together."""
    out_dir = Path(args.out).expanduser()
    if out_dir.exists() and not out_dir.is_dir():  # mkdir would only say "File exists"
        raise CliError(f"--out {out_dir} is a file, not a folder: give a folder to write the images into")
    ensure_gui_app(headless=True)
    suffix = ""
    if args.region is not None:
        (q0, q1), (k0, k1) = args.region
        suffix = f"_q{q0}-{q1}_k{k0}-{k1}"
    try:
        with OutputSet(out_dir) as out:
            for amap, figures in drawn:
                for which, figure in figures:
                    _write_figure_files(args, amap, which, figure, out, suffix)
            if "html" in args.format:
                _write_page(args, page, out.path(Path(page["name"]).stem + suffix + ".html"))
    except ExportError as exc:
        raise CliError(str(exc)) from None
    return out.committed


def _write_figure_files(args: argparse.Namespace, amap, which, figure, out, suffix: str) -> None:
    """The files of one --which; the numbers are the figure's matrices, which runs.select chose."""

    def name(tag, ext: str) -> str:
        return default_filename(amap, tag, ext).removesuffix(f".{ext}") + suffix + f".{ext}"

    for fmt in (f for f in args.format if f != "html"):
        export_figure(figure, out.path(name(which, fmt)), size=args.size, dpi=args.dpi)
    if args.weights == "npy":
        matrix = figure.matrices if which == "all" else figure.matrices[0]  # [H, L, Lk] or [L, Lk]
        export_weights(matrix, figure.query_labels, figure.key_labels, out.path(name(which, "npy")))
    elif args.weights == "csv":
        # a CSV holds one labelled matrix: one file per head for "all"
        heads = range(figure.matrices.shape[0]) if which == "all" else [None]
        for h in heads:
            matrix = figure.matrices[0 if h is None else h]
            export_weights(
                matrix, figure.query_labels, figure.key_labels, out.path(name(which if h is None else h, "csv"))
            )


def _write_page(args: argparse.Namespace, page: dict, path: Path) -> None:
    write = write_overview_page if getattr(args, "page_overview", False) else write_page
    try:
        write(
            page["maps"],
            page["summary"],
            path,
            settings=page["settings"],
            colormap=args.colormap,
            shared_scale=args.shared_scale,
            precision=args.page_precision,
            region=args.region,
            title=page.get("title", ""),
        )
    except PageTooLarge as exc:  # an overview page's region too large to leave room: bad input
        raise CliError(str(exc), EXIT_USAGE) from None


def _echo(path: Path, echo: bool) -> None:
    if echo:
        print(path, flush=True)
