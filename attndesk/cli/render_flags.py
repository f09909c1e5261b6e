"""The flags of ``attndesk render`` (and of ``attndesk bundle``, which takes its inputs): the input,
a real model, an image, a trained model, a corpus store, the toy model's fields and the output.
Nothing here loads torch: the declarations the choices come from (the fields' spec, the colour
maps, the corpus metrics) are handed in by the command's ``register``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attndesk.cli import arguments

if TYPE_CHECKING:
    from attndesk.runs.fields import Param


def input_arguments(render: argparse.ArgumentParser) -> None:
    text = render.add_argument_group("input")
    source = text.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text to attend over (default: the app's sample sentence)")
    source.add_argument("--text-file", metavar="PATH", help="read the text from a UTF-8 file (at most 1 MiB)")
    keys = text.add_mutually_exclusive_group()
    keys.add_argument("--key-text", help="cross-attention: keys/values come from this second text")
    keys.add_argument(
        "--key-text-file", metavar="PATH", help="cross-attention: read the key/value text from a UTF-8 file"
    )


def real_model_arguments(render: argparse.ArgumentParser) -> None:
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
        type=arguments.non_negative_int,
        default=None,
        metavar="N",
        help="with --model: only layer N (from 0; default every layer)",
    )


MAP_NAMES = ("class", "probe", "rollout", "flow", "grad-rollout", "chefer", "ig")
MAP_TITLES = {  # short: a panel's title
    "class": "query, last layer",
    "probe": "pooling probe",
    "rollout": "rollout",
    "flow": "flow",
    "grad-rollout": "grad rollout",
    "chefer": "attn x grad",
    "ig": "int. gradients",
}
CHAINED = ("rollout", "flow", "grad-rollout", "chefer")  # chain the layers: not for Swin


def image_arguments(render: argparse.ArgumentParser) -> None:
    image = render.add_argument_group("an image (with --model: a vision model)")
    image.add_argument(
        "--image",
        metavar="FILE",
        default=None,
        help="with --model (ViT, DeiT, DINOv2, CLIP, SigLIP, Swin): draw its attention over this PNG/JPEG "
        "instead of heatmaps of a text",
    )
    image.add_argument(
        "--query",
        default=None,
        metavar="TOKEN",
        help="with --image: the query token whose attention is drawn: a number, [CLS], [DIST], [REG0] or "
        "(row,col) (default: [CLS], or the mean over the patches for a model without a class token)",
    )
    image.add_argument(
        "--maps",
        type=arguments.list_of((*MAP_NAMES, "all", "none"), "map"),
        default=["all"],
        metavar="LIST",
        help="with --image: the image maps to draw: " + ", ".join(MAP_NAMES) + ", all or none (default all)",
    )
    image.add_argument(
        "--opacity",
        type=arguments.real,
        default=0.6,
        help="with --image: how much of the colour covers the image, 0 to 1 (default %(default)g)",
    )
    image.add_argument(
        "--ig-steps",
        type=arguments.positive_int,
        default=32,
        metavar="N",
        help="with --image: integrated gradients' steps (one forward and backward pass each; default %(default)s)",
    )


def image_flags_given(args: argparse.Namespace, defaults: argparse.Namespace) -> list[str]:
    """The --image-only flags given without --image."""
    names = {"query": "--query", "maps": "--maps", "opacity": "--opacity", "ig_steps": "--ig-steps"}
    return [flag for dest, flag in names.items() if getattr(args, dest) != getattr(defaults, dest)]


def trained_argument(render: argparse.ArgumentParser) -> None:
    render.add_argument(
        "--trained",
        metavar="PATH",
        default=None,
        help="draw a model trained by 'attndesk train' (its folder, or a preset's name): each "
        "layer's heads on the task's probe input",
    )


def _texts(value: str) -> list[int]:
    if value.strip().lower() == "none":
        return []
    try:
        ids = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        ids = []
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: give text ids from 0, comma-separated (e.g. 0,3), or none")
    return list(dict.fromkeys(ids))


def store_arguments(render: argparse.ArgumentParser, metrics: Sequence[str]) -> None:
    """--store, --texts, --metric on ``attndesk render``."""
    group = render.add_argument_group("a corpus store (instead of a text)")
    group.add_argument(
        "--store",
        metavar="DIR",
        default=None,
        help="a corpus store (the --out folder of attndesk corpus): with --format html, one page of "
        "its per-head statistics and roles, its texts, and the attention of --texts",
    )
    group.add_argument(
        "--texts",
        type=_texts,
        default=[0],
        metavar="IDS",
        help="with --store: the texts whose attention the page shows, e.g. 0,3, or none (default 0)",
    )
    group.add_argument(
        "--metric",
        choices=metrics,
        default="entropy",
        help="with --store: the metric that colours the heads grid at first (default %(default)s)",
    )


def model_arguments(render: argparse.ArgumentParser, fields: Sequence[Param]) -> None:
    """One flag per field of the spec (``runs.config.FIELDS``), by ``arguments.add_fields``.
    ``--no-positional`` is the old name of ``--position none``."""
    model = render.add_argument_group("model parameters (as in the window's panel)")
    arguments.add_fields(model, fields)
    model.add_argument(
        "--no-positional",
        dest="positional",
        action="store_const",
        const=False,
        default=None,
        help="no positional encoding (the same as --position none)",
    )
    render.set_defaults(given=())


def output_arguments(render: argparse.ArgumentParser, colormaps: Sequence[str]) -> None:
    """Where and what to write: the folder, the formats, the html page's storage, which figures."""
    out = render.add_argument_group("output")
    out.add_argument(
        "--out",
        default="render-out",
        metavar="DIR",
        help="folder to write into, created if missing (default %(default)s)",
    )
    out.add_argument(
        "--format",
        type=arguments.list_of(("png", "svg", "pdf", "html"), "format"),
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
        type=arguments.which,
        default=["all", "mean"],
        metavar="WHICH",
        help="all (every head in a grid), mean (over heads) or a head number; comma-separated for several figures (default all,mean)",
    )
    _look_arguments(out, colormaps)


def _look_arguments(out: argparse._ArgumentGroup, colormaps: Sequence[str]) -> None:
    """How the figures look and what else is written: colours, scale, size, raw weights, region."""
    out.add_argument(
        "--colormap",
        choices=colormaps,
        default="viridis",
        help="colour map (default %(default)s); CET-L1 is a perceptual grey",
    )
    out.add_argument(
        "--per-head-scale",
        dest="shared_scale",
        action="store_false",
        help="scale each head's colours to its own range (default: one shared scale)",
    )
    out.add_argument(
        "--vmin", type=arguments.real, default=None, help="weight at the bottom of the colour scale (default 0)"
    )
    out.add_argument(
        "--vmax",
        type=arguments.real,
        default=None,
        help="weight at the top of the colour scale (default: the largest weight); larger weights saturate, e.g. --vmax 0.05 for long causal runs",
    )
    out.add_argument(
        "--size",
        type=arguments.size,
        default=None,
        metavar="WxH",
        help="image size in pixels, e.g. 1600x1200 (default: fits the number of heads)",
    )
    out.add_argument(
        "--dpi",
        type=arguments.real,
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
        type=arguments.region,
        default=None,
        metavar="Q0:Q1,K0:K1",
        help="only this block of query rows Q0..Q1-1 and key columns K0..K1-1 (exact values)",
    )
