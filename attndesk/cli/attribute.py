"""``attndesk attribute``: which input tokens a target token's logit (after the last position)
comes from: integrated gradients (``ig``, with its completeness error), gradient x input
(``gxi``) or attention x gradient (``attn``), written as CSV/NPY, a PNG strip and summary.json.
Bad input is one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import argparse

from attndesk.cli.base import empty_out
from attndesk.cli.patch import add_model_arguments

NAME = "attribute"
METHODS = {"ig": "integrated gradients", "gxi": "gradient x input", "attn": "attention x gradient"}


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        NAME,
        help="input attributions for a target token (integrated gradients, ...)",
        description="Attribute a target token's logit after the last position to the input tokens.",
        epilog="example:\n  attndesk attribute --model ~/models/gpt2 --text 'The capital of France is' "
        "--target ' Paris' --method ig --steps 64 --out attr",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(p)
    p.add_argument("--text", required=True, metavar="TEXT")
    p.add_argument(
        "--target",
        required=True,
        metavar="TOK",
        help="the token whose logit is attributed (one token; id:N for a token id)",
    )
    p.add_argument("--method", choices=tuple(METHODS), default="ig")
    p.add_argument("--steps", type=int, default=64, help="integrated gradients' steps (default 64)")
    p.add_argument(
        "--baseline",
        choices=("pad", "zero"),
        default="pad",
        help="integrated gradients' baseline embedding (zero is degenerate under LayerNorm/RMSNorm)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from attndesk.cli import interp_job

    empty_out(args.out)
    return interp_job.attribute_command(args, METHODS[args.method])
