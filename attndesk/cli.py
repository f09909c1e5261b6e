"""The ``attndesk`` command: the window by default, ``attndesk render`` for headless figures.

``attndesk render`` runs the same core as the window and writes the same figures (Qt offscreen,
no display needed), so heatmaps can be scripted and ``make run`` has a fallback without a
display. Every failure the user can fix ends in one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from attndesk.qtfix import pin_singletons

# before any window or figure exists: PySide6 6.12 on Python 3.11 over-releases None (see there)
pin_singletons()

_FALLBACK_SAMPLE = "The cat sat on the mat because it was tired."
EXIT_USAGE = 2
EXIT_FAILURE = 1


class CliError(Exception):
    """A problem to report in one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage block) and never exits itself."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise CliError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            print(message.rstrip("\n"), file=sys.stderr if status else sys.stdout)
        raise SystemExit(status)


def sample_text() -> str:
    """The window's sample sentence (one source of truth), or the same words if it cannot load."""
    try:
        from attndesk.app.panels.tokens import SAMPLE_TEXT

        return str(SAMPLE_TEXT)
    except Exception:  # the app is optional for headless rendering
        return _FALLBACK_SAMPLE


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


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


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
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 2G or 512M, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return value


def _list_of(choices: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or repr(text)}; choose from {', '.join(choices)}")
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
        raise argparse.ArgumentTypeError(f"expected Q0:Q1,K0:K1 (token index ranges, end exclusive), got {text!r}") from None
    if not (0 <= q0 < q1 and 0 <= k0 < k1):
        raise argparse.ArgumentTypeError(f"each range must satisfy 0 <= start < end, got {text!r}")
    return (q0, q1), (k0, k1)


# ---------------------------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:
    from attndesk.core.config import MASK_KINDS, AttentionConfig
    from attndesk.core.devices import DEVICE_NAMES, DTYPES
    from attndesk.render.colormaps import COLORMAPS

    defaults = AttentionConfig()
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
            "  attndesk render --text 'a b c d' --which 0,mean --weights csv --size 1200x1000 --dpi 150"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    text = render.add_argument_group("input")
    source = text.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text to attend over (default: the app's sample sentence)")
    source.add_argument("--text-file", metavar="PATH", help="read the text from a UTF-8 file (at most 1 MiB)")
    keys = text.add_mutually_exclusive_group()
    keys.add_argument("--key-text", help="cross-attention: keys/values come from this second text")
    keys.add_argument("--key-text-file", metavar="PATH", help="cross-attention: read the key/value text from a UTF-8 file")

    model = render.add_argument_group("model parameters (as in the window's panel)")
    model.add_argument("--embed-dim", type=_positive_int, default=defaults.embed_dim, help="embedding dimension (default %(default)s)")
    model.add_argument("--hidden-dim", type=_positive_int, default=defaults.hidden_dim, help="hidden dim of the single-head case, --heads 1 (default %(default)s)")
    model.add_argument("--heads", type=_positive_int, default=defaults.num_heads, help="number of heads; must divide --embed-dim (default %(default)s)")
    model.add_argument("--mask", choices=MASK_KINDS, default=defaults.mask, help="which cells may not be attended (default %(default)s)")
    model.add_argument("--no-scale", action="store_true", help="do not divide the scores by sqrt(d_k)")
    model.add_argument("--no-positional", action="store_true", help="no sinusoidal positional encoding")
    model.add_argument("--dropout", type=_float, default=defaults.dropout, help="dropout on the weights, in [0, 1); acts only with --train (default %(default)s)")
    model.add_argument("--train", action="store_true", help="training mode (dropout active); default is eval mode")
    model.add_argument("--seed", type=_int, default=defaults.seed, help="seed of the random model weights (default %(default)s)")
    model.add_argument("--device", choices=DEVICE_NAMES, default=defaults.device, help="torch device; auto picks the best available (default %(default)s)")
    model.add_argument("--dtype", choices=tuple(DTYPES), default=defaults.dtype, help="compute precision (default %(default)s)")
    model.add_argument("--pad-to", type=_positive_int, default=None, metavar="N", help="pad the token sequence to N with [PAD]")
    model.add_argument("--vocab-size", type=_positive_int, default=defaults.vocab_size, help="vocabulary size of the word tokenizer (default %(default)s)")
    model.add_argument("--no-bias", action="store_true", help="Linear layers without bias")
    model.add_argument("--memory-budget", type=_bytes, default=None, metavar="BYTES", help="memory the weights may take, e.g. 2G (default: derived from RAM)")

    out = render.add_argument_group("output")
    out.add_argument("--out", default="render-out", metavar="DIR", help="folder to write into, created if missing (default %(default)s)")
    out.add_argument("--format", type=_list_of(("png", "svg", "pdf"), "format"), default=["png"], metavar="FMT", help="png, svg or pdf; comma-separated for several (default png)")
    out.add_argument("--which", type=_which, default=["all", "mean"], metavar="WHICH", help="all (every head in a grid), mean (over heads) or a head number; comma-separated for several figures (default all,mean)")
    out.add_argument("--colormap", choices=COLORMAPS, default="viridis", help="colour map (default %(default)s); CET-L1 is a perceptual grey")
    out.add_argument("--per-head-scale", action="store_true", help="scale each head's colours to its own range (default: one shared scale)")
    out.add_argument("--vmin", type=_float, default=None, help="weight at the bottom of the colour scale (default 0)")
    out.add_argument("--vmax", type=_float, default=None, help="weight at the top of the colour scale (default: the largest weight); larger weights saturate, e.g. --vmax 0.05 for long causal runs")
    out.add_argument("--size", type=_size, default=None, metavar="WxH", help="image size in pixels, e.g. 1600x1200 (default: fits the number of heads)")
    out.add_argument("--dpi", type=_float, default=96.0, help="dots per inch: PNG metadata and the physical size of SVG/PDF; text scales with it (default %(default)g)")
    out.add_argument("--weights", choices=("npy", "csv", "none"), default="none", help="also write the raw weights: npy (all selected heads, exact) or csv (one matrix per file, with token labels)")
    out.add_argument("--region", type=_region, default=None, metavar="Q0:Q1,K0:K1", help="only this block of query rows Q0..Q1-1 and key columns K0..K1-1 (exact values)")
    return parser


# ---------------------------------------------------------------------------------------------
# commands


def config_from_args(args: argparse.Namespace):
    from attndesk.core.config import AttentionConfig

    return AttentionConfig(
        embed_dim=args.embed_dim,
        hidden_dim=args.hidden_dim,
        num_heads=args.heads,
        mask=args.mask,
        scaled=not args.no_scale,
        positional=not args.no_positional,
        dropout=args.dropout,
        training=args.train,
        seed=args.seed,
        device=args.device,
        dtype=args.dtype,
        pad_to=args.pad_to,
        vocab_size=args.vocab_size,
        bias=not args.no_bias,
        memory_budget=args.memory_budget,
    ).validate()


def render_command(args: argparse.Namespace, echo: bool = True) -> list[Path]:
    """Run the core and write every requested file; returns the paths in the order written.

    With ``echo`` each path is printed on stdout as soon as its file exists."""
    from attndesk.core import run_attention
    from attndesk.core.errors import ConfigError
    from attndesk.render import ensure_gui_app
    from attndesk.core import select
    from attndesk.core.map_adapter import map_of
    from attndesk.render.export import ExportError, check_size, default_filename, export_figure, export_weights
    from attndesk.render.figure import figure_from_map

    try:
        text = read_text_file(args.text_file) if args.text_file else (args.text if args.text is not None else sample_text())
        key_text = read_text_file(args.key_text_file) if args.key_text_file else args.key_text
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if args.vmin is not None and args.vmax is not None and not args.vmin < args.vmax:
        raise CliError(f"--vmin {args.vmin:g} must be below --vmax {args.vmax:g}", EXIT_USAGE)
    try:
        if args.size is not None:
            check_size(args.size, args.dpi)
        else:
            check_size((100, 100), args.dpi)
    except ExportError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    try:
        config = config_from_args(args)
        result = run_attention(config, text, key_text=key_text)
        amap = map_of(result)
        # every figure must exist before the first file is written
        for which in args.which:
            select.parse_which(which, amap.num_heads)
        if args.weights != "none" and args.region is None and amap.pyramid is not None:
            raise ConfigError(
                "the full weights exceed the memory budget, so only an overview was kept; "
                "write exact numbers of a part with --region Q0:Q1,K0:K1, or raise --memory-budget"
            )
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    for notice in result.notices:
        print(f"attndesk: note: {notice}", file=sys.stderr)

    out_dir = Path(args.out).expanduser()
    if out_dir.exists() and not out_dir.is_dir():  # mkdir would only say "File exists"
        raise CliError(f"--out {out_dir} is a file, not a folder: give a folder to write the images into")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create the output folder {out_dir}: {exc.strerror or exc}") from None
    ensure_gui_app(headless=True)
    written: list[Path] = []
    suffix = ""
    if args.region is not None:
        (q0, q1), (k0, k1) = args.region
        suffix = f"_q{q0}-{q1}_k{k0}-{k1}"
    try:
        for which in args.which:
            try:
                figure = figure_from_map(
                    amap, which, colormap=args.colormap, shared_scale=not args.per_head_scale, region=args.region
                )
            except ValueError as exc:
                raise CliError(str(exc), EXIT_USAGE) from None
            figure.vmin, figure.vmax = args.vmin, args.vmax
            for fmt in args.format:
                name = default_filename(amap, which, fmt).removesuffix(f".{fmt}") + suffix + f".{fmt}"
                written.append(export_figure(figure, out_dir / name, size=args.size, dpi=args.dpi))
                _echo(written[-1], echo)
            if args.weights == "npy":
                name = default_filename(amap, which, "npy").removesuffix(".npy") + suffix + ".npy"
                matrix = select.stack(amap, which, args.region) if which == "all" else select.weights(amap, which, args.region)
                written.append(export_weights(matrix, figure.query_labels, figure.key_labels, out_dir / name))
                _echo(written[-1], echo)
            elif args.weights == "csv":
                # a CSV holds one labelled matrix: one file per head for "all"
                for head in select.heads_of(amap, which):
                    name = default_filename(amap, head, "csv").removesuffix(".csv") + suffix + ".csv"
                    matrix = select.weights(amap, head, args.region)
                    written.append(export_weights(matrix, figure.query_labels, figure.key_labels, out_dir / name))
                    _echo(written[-1], echo)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    return written


def _echo(path: Path, echo: bool) -> None:
    if echo:
        print(path, flush=True)


def launch_app(argv: Sequence[str] | None = None) -> int:
    """Open the window; without a display (or without the app), render the sample headless."""
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
        from attndesk.app import main as app_main
        from attndesk.app import main_window  # noqa: F401 - fail here, not inside the event loop
    except ImportError as exc:
        print(f"attndesk: the window is not available ({exc}); rendering the sample heatmaps headless instead", flush=True)
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
    argv = list(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.command in (None, "app"):
            return launch_app()
        render_command(args)
        return 0

    return _guarded(run)

if __name__ == "__main__":
    sys.exit(main())
