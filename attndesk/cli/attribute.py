"""``attndesk attribute``: which input tokens a target token's logit (after the last position)
comes from: integrated gradients (``ig``, with its completeness error), gradient x input
(``gxi``) or attention x gradient (``attn``), written as CSV/NPY, a PNG strip and summary.json.
Bad input is one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import argparse
import sys
import warnings

from attndesk.cli.base import EXIT_USAGE, CliError, empty_out
from attndesk.cli.patch import add_model_arguments, heatmap, load, token_arg, write_all
from attndesk.cli.progress import ProgressLine
from attndesk.core.types import head_name

NAME = "attribute"
STRIP = (1100, 360)  # one row of tokens: a strip, not the square a heatmap figure suggests
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


def _attribute(args, model):
    from attndesk.core.interp import (
        attention_x_gradient,
        gradient_x_input_report,
        integrated_gradients_report,
    )

    if args.method == "gxi":
        return gradient_x_input_report(model, args.text, token_arg(args.target))
    if args.method == "attn":
        return attention_x_gradient(model, args.text, token_arg(args.target))
    with ProgressLine() as progress, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the notice is printed below, once
        return integrated_gradients_report(
            model,
            args.text,
            token_arg(args.target),
            args.steps,
            baseline=args.baseline,
            memory_budget=args.memory_budget,
            progress=progress.update,
        )


def run(args: argparse.Namespace) -> int:
    empty_out(args.out)
    model = load(args)
    try:
        result = _attribute(args, model)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    cols = [f"{i}:{t}" for i, t in enumerate(result.tokens)]
    name = f"attribution_{args.method}"
    files: list[tuple[str, object]] = [
        (name, (result.scores[None], [result.target], cols)),
        (
            name,
            (
                heatmap(
                    result.scores[None],
                    [result.target],
                    cols,
                    f"{METHODS[args.method]}: {result.target!r}",
                    "target",
                    "input token",
                    "attribution",
                ),
                STRIP,
            ),
        ),
    ]
    if result.per_head is not None:
        layers, heads = result.per_head.shape[:2]
        rows = [head_name(n, h) for n in range(layers) for h in range(heads)]
        per_head = result.per_head.reshape(layers * heads, -1)
        files.append((f"{name}_per_head", (per_head, rows, cols)))
        files.append(
            (
                f"{name}_per_head",
                heatmap(
                    per_head, rows, cols, "attention x gradient per head", "layer, head", "input token", "attribution"
                ),
            )
        )
    summary = {
        "model": model.name,
        "method": result.method,
        "target": result.target,
        "tokens": result.tokens,
        "scores": result.scores.tolist(),
        "target_logit": result.target_logit,
        "baseline": result.baseline,
        "baseline_logit": result.baseline_logit,
        "completeness_error": result.completeness_error,
        "steps": result.steps,
        "notices": result.notices,
    }
    for path in write_all(args.out, [*files, ("summary.json", summary)]):
        print(path, flush=True)
    for notice in result.notices:
        print(f"attndesk: note: {notice}", file=sys.stderr)
    if result.completeness_error is not None:
        print(f"attndesk: completeness error {result.completeness_error:.2%} at {result.steps} steps", file=sys.stderr)
    return 0
