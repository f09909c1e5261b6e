"""The ``attndesk`` command: the window by default, ``attndesk render`` for headless figures.

``attndesk render`` runs the same core as the window and writes the same figures (Qt offscreen,
no display needed), so heatmaps can be scripted and ``make run`` has a fallback without a
display. Every failure the user can fix ends in one line on stderr and a non-zero exit code,
before anything is written; the files of one command are written all-or-nothing.

This module loads no torch when imported (the commands' modules are imported inside functions),
so ``main`` and ``launch_app`` set torch's environment before it loads
(``attndesk.set_torch_environment``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attndesk import set_torch_environment

if TYPE_CHECKING:
    from attndesk.render.figure import HeatmapFigure

EXIT_USAGE = 2
EXIT_FAILURE = 1
LONG_RUN_S = 2.0  # a run planned longer than this (or memory-bounded) prints its plan and progress


class CliError(Exception):
    """A problem to report in one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage block) and never exits itself."""

    def error(self, message: str):
        raise CliError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            print(message.rstrip("\n"), file=sys.stderr if status else sys.stdout)
        raise SystemExit(status)


def sample_text() -> str:
    """The window's sample sentence: the state model's default text (one source of truth)."""
    from attndesk.app.state import AppState

    return str(AppState.model_fields["text"].default)


def read_text_file(path: str | os.PathLike) -> str:
    """A UTF-8 text file's contents (the core's reader, the same rules as File > Open text);
    ValueError (a ConfigError) with a one-line reason for anything else."""
    from attndesk.core.textfile import read_text_file as core_read_text_file

    return core_read_text_file(path)


# ---------------------------------------------------------------------------------------------
# argument types (each raises argparse.ArgumentTypeError -> one line)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _size(text: str) -> tuple[int, int]:
    parts = text.lower().replace("\u00d7", "x").split("x")
    try:
        width, height = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels such as 1600x1200, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"width and height must be positive, got {text!r}")
    return width, height


def _bytes(text: str) -> int:
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in units and raw[-1:] else ""
    number = raw[: len(raw) - len(unit)]
    try:
        value = int(float(number) * units[unit])
    except (ValueError, OverflowError):  # not a number, or inf
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 2G or 512M, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


def _list_of(choices: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(bad) or repr(text)}; choose from {', '.join(choices)}"
            )
        return list(dict.fromkeys(items))

    return parse


def _which(text: str) -> list[str | int]:
    items: list[str | int] = []
    for part in (t.strip().lower() for t in text.split(",")):
        if part in ("all", "mean"):
            items.append(part)
        elif part.isdigit():
            items.append(int(part))
        else:
            raise argparse.ArgumentTypeError(f"expected all, mean or a head number (comma-separated), got {part!r}")
    if not items:
        raise argparse.ArgumentTypeError("expected all, mean or a head number")
    return list(dict.fromkeys(items))


def _region(text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    try:
        q, k = text.split(",")
        q0, q1 = (int(v) for v in q.split(":"))
        k0, k1 = (int(v) for v in k.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected Q0:Q1,K0:K1 (token index ranges, end exclusive), got {text!r}"
        ) from None
    if q0 < 0 or k0 < 0:
        raise argparse.ArgumentTypeError(
            f"token positions count from 0 (not from the end), so a range cannot start below 0; got {text!r}"
        )
    if not (q0 < q1 and k0 < k1):
        raise argparse.ArgumentTypeError(f"each range must satisfy 0 <= start < end (end exclusive), got {text!r}")
    return (q0, q1), (k0, k1)


_DASH_VALUE = re.compile(r"-([\d.]|nan|inf)", re.IGNORECASE)  # "-1:2,0:2", "-.5", "-inf": a value, not a flag


def attach_dash_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """argparse takes a value that starts with '-' for a flag ('--region -1:2,0:2' gives "expected
    one argument"): join such a value to its option as '--region=-1:2,0:2', so that the option's
    own check explains what is wrong with it. Plain negative numbers argparse already accepts."""
    takes_value = {
        opt
        for action in _all_actions(parser)
        if action.nargs is None and action.option_strings
        for opt in action.option_strings
    }
    out: list[str] = []
    argv = list(argv)
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] in takes_value and i + 1 < len(argv) and _DASH_VALUE.match(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions and those of its subcommands."""
    actions = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                actions += _all_actions(sub)
    return actions


# ---------------------------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:

    parser = _Parser(
        prog="attndesk",
        description="See inside transformer attention. Without a command, opens the desktop window.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.add_parser("app", help="open the desktop window (the default)", description="Open the desktop window.")
    render = sub.add_parser(
        "render",
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
            "  attndesk render --model ~/models/t5-small --text 'Hello world' --target 'Hallo Welt' --out t5"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _input_arguments(render)
    _real_model_arguments(render)
    from attndesk.cli_train import add_render_argument

    add_render_argument(render)  # --trained PATH
    from attndesk.cli_store_page import add_render_arguments

    add_render_arguments(render)  # --store DIR, --texts, --metric
    _model_arguments(render)
    _output_arguments(render)
    for command in _commands():
        command.add_parser(sub)
    return parser


# Further subcommands, each a module with ``NAME``, ``add_parser(sub)`` (adds its subparser) and
# ``run(args) -> int`` (raises CliError / ConfigError for bad input). Adding one = one line here.
_COMMAND_MODULES: tuple[str, ...] = (
    "attndesk.cli_bundle",
    "attndesk.cli_reproduce",
    "attndesk.cli_interp",
    "attndesk.cli_attribute",
    "attndesk.cli_train",
    "attndesk.cli_corpus",
)


def _commands() -> list:
    import importlib

    return [importlib.import_module(name) for name in _COMMAND_MODULES]


def _input_arguments(render: argparse.ArgumentParser) -> None:
    text = render.add_argument_group("input")
    source = text.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text to attend over (default: the app's sample sentence)")
    source.add_argument("--text-file", metavar="PATH", help="read the text from a UTF-8 file (at most 1 MiB)")
    keys = text.add_mutually_exclusive_group()
    keys.add_argument("--key-text", help="cross-attention: keys/values come from this second text")
    keys.add_argument(
        "--key-text-file", metavar="PATH", help="cross-attention: read the key/value text from a UTF-8 file"
    )


def _real_model_arguments(render: argparse.ArgumentParser) -> None:
    real = render.add_argument_group("a real model (instead of the toy model)")
    real.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="a local transformers folder (config.json, weights, tokenizer): draws its own attention, "
        "one figure per layer; encoder-decoders also their decoder and cross-attention",
    )
    real.add_argument(
        "--target",
        metavar="TEXT",
        default=None,
        help="with --model: an encoder-decoder's decoder text (T5, BART, Marian)",
    )
    real.add_argument(
        "--layer",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="with --model: only layer N (from 0; default every layer)",
    )


def _model_arguments(render: argparse.ArgumentParser, fields=None) -> None:
    """One flag per field of the spec (``core.config.FIELDS``): its dest is the field, its default,
    choices, type and help come from the spec. ``--no-positional`` is the old name of ``--position none``."""
    from attndesk.core.config import FIELDS

    model = render.add_argument_group("model parameters (as in the window's panel)")
    for spec in FIELDS if fields is None else fields:
        if spec.kind is bool:
            model.add_argument(spec.flag, dest=spec.dest, action=spec.cli_action(), help=spec.help())
            continue
        extra = {"choices": spec.choices} if spec.choices else {"type": _arg_type(spec), "metavar": spec.metavar}
        model.add_argument(spec.flag, dest=spec.dest, default=spec.default, action=_Given, help=spec.help(), **extra)
    model.add_argument(
        "--no-positional",
        dest="positional",
        action="store_const",
        const=False,
        default=None,
        help="no positional encoding (the same as --position none)",
    )
    render.set_defaults(given=())


class _Given(argparse.Action):
    """Stores the value and records that the flag was given (``args.given``), so that a flag equal
    to its default still counts (``--no-positional --position sinusoidal`` contradicts itself)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = (*getattr(namespace, "given", ()), self.dest)


def _arg_type(spec):
    """A field's argument type: sizes for bytes, whole numbers (positive when the field's are), numbers."""
    if spec.unit == "bytes":
        return _bytes
    if spec.kind is int:
        return _positive_int if (spec.low or 0) >= 1 else _int
    return _float


def _output_arguments(render: argparse.ArgumentParser) -> None:
    from attndesk.render.colormaps import COLORMAPS

    out = render.add_argument_group("output")
    out.add_argument(
        "--out",
        default="render-out",
        metavar="DIR",
        help="folder to write into, created if missing (default %(default)s)",
    )
    out.add_argument(
        "--format",
        type=_list_of(("png", "svg", "pdf", "html"), "format"),
        default=["png"],
        metavar="FMT",
        help="png, svg, pdf or html (one self-contained interactive page per run, every head and "
        "layer); comma-separated for several (default png)",
    )
    out.add_argument(
        "--page-precision",
        choices=("auto", "float16", "float32"),
        default="auto",
        help="how an html page stores the weights: float32 (exact), float16 (within 5e-4, half the "
        "size) or auto: float32 when that page fits in 4 MB, else float16 (default %(default)s)",
    )
    out.add_argument(
        "--page-overview",
        action="store_true",
        help="for a run too large for a page: the html page holds the overview of the whole input "
        "(tile maxima, as the long-document view) plus the exact weights of --region (default: the "
        "first 128 x 128 tokens), within 4 MB",
    )
    out.add_argument(
        "--which",
        type=_which,
        default=["all", "mean"],
        metavar="WHICH",
        help="all (every head in a grid), mean (over heads) or a head number; comma-separated for several figures (default all,mean)",
    )
    out.add_argument(
        "--colormap",
        choices=COLORMAPS,
        default="viridis",
        help="colour map (default %(default)s); CET-L1 is a perceptual grey",
    )
    out.add_argument(
        "--per-head-scale",
        dest="shared_scale",
        action="store_false",
        help="scale each head's colours to its own range (default: one shared scale)",
    )
    out.add_argument("--vmin", type=_float, default=None, help="weight at the bottom of the colour scale (default 0)")
    out.add_argument(
        "--vmax",
        type=_float,
        default=None,
        help="weight at the top of the colour scale (default: the largest weight); larger weights saturate, e.g. --vmax 0.05 for long causal runs",
    )
    out.add_argument(
        "--size",
        type=_size,
        default=None,
        metavar="WxH",
        help="image size in pixels, e.g. 1600x1200 (default: fits the number of heads)",
    )
    out.add_argument(
        "--dpi",
        type=_float,
        default=96.0,
        help="dots per inch: PNG metadata and the physical size of SVG/PDF; text scales with it (default %(default)g)",
    )
    out.add_argument(
        "--weights",
        choices=("npy", "csv", "none"),
        default="none",
        help="also write the raw weights: npy (all selected heads, exact) or csv (one matrix per file, with token labels)",
    )
    out.add_argument(
        "--region",
        type=_region,
        default=None,
        metavar="Q0:Q1,K0:K1",
        help="only this block of query rows Q0..Q1-1 and key columns K0..K1-1 (exact values)",
    )


# ---------------------------------------------------------------------------------------------
# commands


def config_from_args(args: argparse.Namespace):
    """The validated config the flags describe: the window's state model built from them (each
    model flag's ``dest`` is the config field it sets, so there is no second field list here)."""
    from attndesk.app.state import state_from_flags
    from attndesk.core.errors import ConfigError

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


def render_command(args: argparse.Namespace, echo: bool = True) -> list[Path]:
    """Run the core and write every requested file, all or nothing; returns the paths written.

    Everything that can be refused is refused before the run (inputs, colour limits, sizes) or
    before the first file is written (heads, regions); the files are written into a staging
    folder and moved into ``--out`` together, so a failure or Ctrl+C leaves ``--out`` as it was.
    With ``echo`` each path is printed on stdout once the set is in place."""
    if getattr(args, "store", None) is not None:  # a corpus store's page
        return _store_page(args, echo)
    text, key_text = _read_inputs(args)
    _check_output_options(args)
    _trained_weights(args)
    if args.trained is not None:
        from attndesk.cli_train import render_trained

        try:
            maps, page = render_trained(args)
        except ValueError as exc:  # ConfigError: not a trained model, another format version
            raise CliError(str(exc), EXIT_USAGE) from None
    elif args.model is not None:
        maps, page = _model_maps(args, text)
    else:
        if args.target is not None or args.layer is not None:
            raise CliError("--target and --layer go with --model (a real model's folder)", EXIT_USAGE)
        result, said = _compute(args, text, key_text)
        for notice in result.notices:
            if notice not in said:
                print(f"attndesk: note: {notice}", file=sys.stderr)
        maps = [result.attention_map()]
        page = _toy_page(result, maps[0])
    if "html" in args.format:
        _check_page(args, page)
    drawn = [(amap, _figures(args, amap)) for amap in maps]  # every figure exists before the first file is written
    written = _write_outputs(args, drawn, page)
    for path in written:
        _echo(path, echo)
    return written


def _store_page(args: argparse.Namespace, echo: bool) -> list[Path]:
    """``--store DIR``: the corpus store's page (``cli_store_page``); bad input exits 2."""
    from attndesk.cli_store_page import render_store
    from attndesk.render.export import ExportError
    from attndesk.render.page import PageTooLarge

    try:
        return render_store(args, build_parser().parse_args(["render"]), echo)
    except ValueError as exc:  # ConfigError: bad input
        raise CliError(str(exc), EXIT_USAGE) from None
    except ExportError as exc:  # PageTooLarge is bad input; anything else could not be written
        raise CliError(str(exc), EXIT_USAGE if isinstance(exc, PageTooLarge) else EXIT_FAILURE) from None


def _read_inputs(args: argparse.Namespace) -> tuple[str, str | None]:
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
    from attndesk.render.export import ExportError, check_image_memory, check_size

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


def _compute(args: argparse.Namespace, text: str, key_text: str | None):
    """Validate, plan (printed on stderr when the run is long), run with a progress line;
    returns (result, the lines already printed, which its notices need not repeat)."""
    from attndesk.cli_progress import ProgressLine
    from attndesk.core import run_attention
    from attndesk.core.pipeline import prepare_text

    try:
        config = config_from_args(args)
        prepared = prepare_text(config, text, key_text)  # tokenized and memory-checked once, for the run too
        plan = prepared.plan
        _check_selection(args, plan)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    long_run = plan.blocked or (plan.seconds or 0.0) >= LONG_RUN_S
    if long_run:  # the line the window shows before a long run
        print(f"attndesk: plan: {plan.describe()}", file=sys.stderr, flush=True)
    with ProgressLine() as progress:
        try:
            result = run_attention(
                config, text, key_text=key_text, prepared=prepared, progress=progress.update if long_run else None
            )
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    return result, ({plan.describe(eta=False)} if long_run else set())


def _model_maps(args: argparse.Namespace, text: str) -> tuple[list, dict]:
    """The maps of ``--model`` and its page: flags checked, the folder loaded and run (ConfigError: one line)."""
    from attndesk.cli_model import check_model_flags, model_page, model_run

    try:
        check_model_flags(args, build_parser().parse_args(["render"]))
        run = model_run(args, text)
        page = model_page(run, args)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    for notice in run.notices:
        print(f"attndesk: note: {notice}", file=sys.stderr)
    return [pm.map for pm in page["maps"]], page


def _toy_page(result, amap) -> dict:
    """What the toy run's html page holds: its map, caption, parameters and file name."""
    from attndesk.render.export import default_filename

    return {
        "maps": [amap],
        "summary": amap.summary,
        "settings": result.config.to_dict(),
        "run": result,
        "name": default_filename(amap, "all", "html"),
    }


def _check_page(args: argparse.Namespace, page: dict) -> None:
    """A run too large for a page is refused before any file is written, naming what fits."""
    from attndesk.render.page import PageTooLarge, check_page_size

    if getattr(args, "page_overview", False):  # sized when it is built: the overview takes the room the region leaves
        return
    try:
        check_page_size(page["maps"], args.page_precision, args.region)
    except PageTooLarge as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _figures(args: argparse.Namespace, amap) -> list[tuple[str | int, HeatmapFigure]]:
    """(which, figure) for every --which, with the colour limits checked against the data."""
    from attndesk.render.figure import figure_from_map

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
    from attndesk.core.errors import ConfigError
    from attndesk.core.memory import format_bytes
    from attndesk.core.select import parse_which

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
    from attndesk.render.figure import finite_range

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
    from attndesk.render import ensure_gui_app
    from attndesk.render.export import ExportError, OutputSet

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
    """The files of one --which; the numbers are the figure's matrices, which core.select chose."""
    from attndesk.render.export import default_filename, export_figure, export_weights

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
    from attndesk.render.page import PageTooLarge, write_page
    from attndesk.render.page_overview import write_overview_page

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


def launch_app(argv: Sequence[str] | None = None) -> int:
    """Open the window; without a display (or without the app), render the sample headless."""
    set_torch_environment()  # before anything below loads torch
    from attndesk.render import display_problem, has_display

    if not has_display():
        print(
            "attndesk: no display found (neither DISPLAY nor WAYLAND_DISPLAY is set); "
            "rendering the sample heatmaps headless instead",
            flush=True,
        )
        return headless_fallback()
    problem = display_problem()
    if problem:
        print(f"attndesk: {problem}; rendering the sample heatmaps headless instead", flush=True)
        return headless_fallback()
    try:
        from attndesk.app.main_window import (
            main as app_main,  # optional: without Qt widgets, render instead
        )
    except ImportError as exc:
        print(
            f"attndesk: the window is not available ({exc}); rendering the sample heatmaps headless instead", flush=True
        )
        return headless_fallback()
    return int(app_main(list(argv) if argv is not None else None) or 0)


def headless_fallback(out: str = "render-out") -> int:
    """Render the sample sentence with default settings (all heads + mean, PNG) into ``out``
    and print the folder's path."""

    def run() -> int:
        args = build_parser().parse_args(["render", "--out", out])
        render_command(args, echo=False)
        print(Path(out).resolve(), flush=True)
        return 0

    return _guarded(run)


def _guarded(run) -> int:
    """Call ``run()``; turn every failure into one line on stderr and an exit code."""
    try:
        return int(run() or 0)
    except CliError as exc:
        print(f"attndesk: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("attndesk: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("attndesk: error: out of memory; try a shorter text, fewer heads or --memory-budget", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug or a device failure: still one line, never a traceback
        if os.environ.get("ATTNDESK_DEBUG"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"attndesk: error: {type(exc).__name__}: {message[:500]}", file=sys.stderr)
        return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attndesk`` console script and ``python -m attndesk``."""
    set_torch_environment()  # before the commands' modules load torch
    argv = list(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        parser = build_parser()
        try:
            args = parser.parse_args(attach_dash_values(argv, parser))
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.command in (None, "app"):
            return launch_app()
        for command in _commands():
            if args.command == command.NAME:
                return int(command.run(args) or 0)
        render_command(args)
        return 0

    return _guarded(run)


if __name__ == "__main__":
    # the importable module's main, so that command modules raising attndesk.cli.CliError meet the
    # same class that _guarded catches (python -m runs this file as a second module, __main__)
    from attndesk.cli import main as _main

    sys.exit(_main())
