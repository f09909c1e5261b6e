"""``attndesk circuit``: score every edge of a model's graph between a clean and a corrupted prompt,
choose a circuit, and write the edge table (CSV and Parquet), the circuit (JSON), its faithfulness
curve beside random edge sets (CSV and PNG), the graph figure (PNG and SVG), the interactive page
of both (circuit.html) and, with
``--path-patching q|k|v``, the senders x receivers path-patching heatmap (CSV and PNG) into an
empty folder, all or nothing. Bad input is one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import argparse
import sys
import time

from attndesk.cli.arguments import token_arg
from attndesk.cli.base import EXIT_USAGE, CliError, empty_out
from attndesk.cli.progress import ProgressLine

NAME = "circuit"
METHODS = ("exact", "eap", "eap-ig", "acdc")


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        NAME,
        help="edge scores, a circuit and its faithfulness between a clean and a corrupted prompt",
        description="Score every edge (sender -> a head's q/k/v input, an MLP's input, the logits) by "
        "patching it clean-into-corrupt (exact), or estimate the scores (eap, eap-ig); keep the top "
        "edges by |score| (--top-n, default 10%% of the edges, or --threshold), or prune greedily "
        "(acdc, ordered by EAP-IG scores, --tau); then the circuit's faithfulness curve beside "
        "random edge sets of the same sizes. A toy model (--trained) takes token ids: '3 4 5 3'.",
        epilog="example:\n  attndesk circuit --trained induction --clean '5 6 7 8 5 6 7' --corrupt "
        "'9 10 11 12 5 6 7' --answer 8 --wrong 12 --method exact --out induction-circuit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", metavar="PATH", help="a local transformers checkpoint folder")
    model.add_argument("--trained", metavar="NAME", help="a trained toy model: a preset's name or its folder")
    p.add_argument(
        "--clean", required=True, action="append", metavar="TEXT", help="the clean prompt (repeat for pairs)"
    )
    p.add_argument(
        "--corrupt", required=True, action="append", metavar="TEXT", help="the corrupted prompt, same tokens"
    )
    p.add_argument(
        "--answer", required=True, metavar="TOK", help="the clean prompt's answer: one token (id:N for an id)"
    )
    p.add_argument("--wrong", metavar="TOK", default=None, help="the competing token (needed by logit_diff)")
    p.add_argument("--method", choices=METHODS, default="exact")
    p.add_argument("--metric", choices=("logit_diff", "prob", "kl"), default="logit_diff")
    p.add_argument("--steps", type=int, default=5, help="EAP-IG's integration points (default 5)")
    p.add_argument("--ig", choices=("inputs", "activations"), default="inputs", help="EAP-IG's path")
    p.add_argument("--top-n", type=int, default=None, metavar="N", help="keep the N edges of largest |score|")
    p.add_argument("--threshold", type=float, default=None, metavar="X", help="keep every edge with |score| >= X")
    p.add_argument(
        "--connected",
        action="store_true",
        help="keep only edges on a path from an embedding to the logits (--top-n then counts those)",
    )
    p.add_argument("--tau", type=float, default=None, metavar="X", help="acdc: drop an edge moving the metric < X")
    p.add_argument("--draws", type=int, default=10, help="random edge sets per circuit size (default 10)")
    p.add_argument(
        "--path-patching",
        choices=("q", "k", "v"),
        default=None,
        metavar="q|k|v",
        help="also path-patch every sender head into every later head's q, k or v input "
        "(path_patching_<kind>.csv and .png: senders x receivers)",
    )
    p.add_argument("--target", default=None, metavar="TEXT", help="an encoder-decoder's decoder text")
    p.add_argument("--memory-budget", type=int, default=None, metavar="BYTES", help="bytes one batched pass may take")
    p.add_argument("--out", metavar="DIR", required=True, help="a new or empty folder to write into")
    return p


def _ids(text: str, flag: str) -> list[int]:
    parts = text.replace(",", " ").split()
    if not parts or not all(p.lstrip("-").isdigit() for p in parts):
        raise CliError(f"{flag} {text!r}: a toy model reads token ids, e.g. '3 4 5 3'", EXIT_USAGE)
    return [int(p) for p in parts]


def _token(text: str | None, toy: bool, flag: str):
    if text is None:
        return None
    if toy:
        value = text[3:] if text.startswith("id:") else text
        if not value.isdigit():
            raise CliError(f"{flag} {text!r}: a toy model's token is an id, e.g. 7", EXIT_USAGE)
        return int(value)
    return token_arg(text)


def run(args: argparse.Namespace) -> int:
    from attndesk.cli.circuit_job import describe, load_model, score_and_measure, summary_notes, write_outputs

    folder = empty_out(args.out)
    if args.method == "acdc" and args.tau is None:
        raise CliError("--method acdc needs --tau (the metric change under which an edge is dropped)", EXIT_USAGE)
    if args.top_n is not None and args.threshold is not None:
        raise CliError("--top-n and --threshold choose the circuit two ways: give one", EXIT_USAGE)
    model = load_model(args)
    toy = args.trained is not None
    cleans: list = [_ids(t, "--clean") for t in args.clean] if toy else list(args.clean)
    corrupts: list = [_ids(t, "--corrupt") for t in args.corrupt] if toy else list(args.corrupt)
    clean, corrupt = (cleans[0], corrupts[0]) if len(cleans) == 1 else (cleans, corrupts)
    answer, wrong = _token(args.answer, toy, "--answer"), _token(args.wrong, toy, "--wrong")
    prompts = (clean, corrupt, answer, wrong)
    common = {"metric": args.metric, "target": args.target, "memory_budget": args.memory_budget}
    start = time.perf_counter()
    with ProgressLine() as progress:
        table, circuit, curve, faith, paths = score_and_measure(args, model, prompts, common, progress.update)
    about = describe(args, model, prompts, (table, circuit, curve, faith), time.perf_counter() - start)
    for path in write_outputs(folder, table, circuit, curve, about, paths):
        print(path, flush=True)
    print(
        f"attndesk: {len(circuit):,} of {len(table):,} edges kept, faithfulness {faith:.3f} "
        f"({args.metric}; clean {about['clean_metric']:.4g}, corrupt {about['corrupt_metric']:.4g})",
        file=sys.stderr,
    )
    for note in summary_notes(table, circuit, faith):
        print(f"attndesk: {note}", file=sys.stderr)
    return 0
