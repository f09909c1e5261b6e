"""``attndesk patch``: activation patching of a clean and a corrupted prompt, and beside it the
first-order attribution patching with their rank correlation, written to a folder as NPY, CSV
(labelled) and PNG heatmaps (the project's headless rendering), plus summary.json. Bad input (a
model that cannot be read, prompts of unequal token length, a multi-token answer, an encoder...)
is one line on stderr, exit 2, and nothing written. The work is ``interp_job``."""

from __future__ import annotations

import argparse

from attndesk.cli.base import EXIT_USAGE, CliError, empty_out

NAME = "patch"
SITE_CHOICES = ("head", "head_position", "resid", "attn", "mlp")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="PATH", required=True, help="a local transformers checkpoint folder")
    parser.add_argument("--out", metavar="DIR", required=True, help="the folder to write into (created if missing)")
    parser.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes one batched pass may take (default: the app's memory budget)",
    )


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        NAME,
        help="activation patching between a clean and a corrupted prompt",
        description="Patch every head (and other sites) of the clean run into the corrupted one, "
        "batched; the normalised effect (m_patched - m_corrupt) / (m_clean - m_corrupt) "
        "(patch_<site>), the raw effect m_patched - m_corrupt (patch_<site>_raw) and the "
        "first-order attribution-patching estimate beside them. A warning on stderr says when "
        "the clean-corrupt gap is under 1%% of the metric's scale.",
        epilog="example:\n  attndesk patch --model ~/models/gpt2 --clean 'When Mary and John went to "
        "the store, John gave a drink to' --corrupt 'When Mary and John went to the store, Mary "
        "gave a drink to' --answer ' Mary' --wrong ' John' --out ioi",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(p)
    p.add_argument("--clean", required=True, metavar="TEXT", help="the prompt whose behaviour is restored")
    p.add_argument("--corrupt", required=True, metavar="TEXT", help="the prompt patched into (same token length)")
    p.add_argument(
        "--answer",
        required=True,
        metavar="TOK",
        help="the token the clean prompt predicts (one token; id:N for a token id)",
    )
    p.add_argument("--wrong", metavar="TOK", default=None, help="the competing token (needed by logit_diff)")
    p.add_argument("--metric", choices=("logit_diff", "prob", "kl"), default="logit_diff")
    p.add_argument(
        "--sites",
        default="head,resid,attn,mlp",
        help=f"comma-separated, of {', '.join(SITE_CHOICES)} (default: head,resid,attn,mlp)",
    )
    p.add_argument(
        "--target", default=None, metavar="TEXT", help="an encoder-decoder's decoder text (default: its start token)"
    )
    p.add_argument(
        "--part",
        choices=("self", "decoder", "cross"),
        default=None,
        help="which attention (default: self; an encoder-decoder's encoder)",
    )
    p.add_argument("--no-attribution", action="store_true", help="skip the first-order estimates")
    return p


def _sites(text: str) -> tuple[str, ...]:
    sites = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in sites if s not in SITE_CHOICES]
    if bad or not sites:
        raise CliError(
            f"--sites: unknown site {bad[0] if bad else '(none)'!r}; choose from {', '.join(SITE_CHOICES)}", EXIT_USAGE
        )
    return sites


def run(args: argparse.Namespace) -> int:
    from attndesk.cli import interp_job

    empty_out(args.out)
    return interp_job.patch_command(args, _sites(args.sites))
