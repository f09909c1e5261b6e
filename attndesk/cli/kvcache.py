"""``attndesk kvcache``: compressed runs of KV-cache eviction policies beside the full run, over
budgets, written as a table (CSV + Parquet: one row per text, policy, budget and query row), the
mean KL / accuracy against the budget (PNG curves) and each run's keep raster (PNG), all or
nothing. With ``--corpus`` the sweep over a corpus (``kvcache_corpus``): one row per text, policy
and budget in a Parquet + DuckDB store on the corpus pass's engines, resumed when run again. Bad
input (a budget of 0 or larger than the input, an encoder, an option a policy does not take) is
one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import argparse

from attndesk.cli.arguments import at_least, engine_arguments, positive_int

NAME = "kvcache"
DEFAULT_POLICIES = "streaming,h2o,snapkv,tova,knorm,random,oracle"
# the sweep over a corpus's flags: refused without --corpus
CORPUS_ONLY = {
    "decode": "--decode",
    "max_tokens": "--max-tokens",
    "engine": "--engine",
    "workers": "--workers",
    "ray_address": "--ray-address",
    "shard_size": "--shard-size",
    "restart": "--restart",
}


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        NAME,
        help="KV-cache eviction policies: exact compressed runs against the full cache",
        description="Run each policy at each budget (keys kept per K/V head: a count, or a ratio in (0, 1] of "
        "the prompt) and compare with the full cache: KL(full || compressed) per query row, the next-token "
        "accuracy where the input gives the next token, and which keys each row sees. Policies: "
        "docs/kvcache.md. Without --generate the input's first --prefill tokens are the prompt (default: "
        "half) and the rest are read as decode steps; with --generate the whole input is the prompt.",
        epilog="example:\n  attndesk kvcache --model ~/models/gpt2 --text 'The capital of France is Paris. ...' "
        "--policies streaming,h2o,oracle --budgets 8,16,32 --out kv\n  attndesk kvcache --trained induction "
        "--text '1 5 9 3 1 5 9' --policies streaming --budgets 4 --option streaming.sinks=0 --out kv\n"
        "  attndesk kvcache --retrieval 1,2,3,4 --out heads  (the needle-deep preset)\n"
        "  attndesk kvcache --model ~/models/gpt2 --corpus texts.jsonl --policies streaming,h2o,oracle "
        "--budgets 16,32,64 --engine ray --out kv-store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", metavar="PATH", help="a local transformers decoder checkpoint folder")
    model.add_argument(
        "--trained",
        metavar="NAME",
        help="a trained toy model: a preset's name or a saved run's folder (--retrieval alone: needle-deep)",
    )
    text = p.add_mutually_exclusive_group()
    text.add_argument("--text", metavar="TEXT", help="the input (a toy model's: token ids separated by spaces)")
    text.add_argument("--data", metavar="FILE", help="a text file, one input per line")
    text.add_argument(
        "--corpus",
        metavar="FILE|FOLDER",
        help="a corpus (the corpus pass's inputs: .txt a text a line, .jsonl, .csv or .parquet with a text "
        "field, a folder of .txt files): every text x policy x budget into the store --out (Parquet + DuckDB, "
        "curves with the spread over texts), on --engine; a rerun with the same arguments resumes it",
    )
    p.add_argument("--policies", default=DEFAULT_POLICIES, metavar="A,B", help=f"default {DEFAULT_POLICIES}")
    p.add_argument("--budgets", metavar="64,128", help="keys per K/V head, or ratios in (0, 1]")
    p.add_argument("--generate", type=int, default=0, metavar="N", help="decode steps after the input (greedy)")
    p.add_argument("--prefill", type=int, default=None, metavar="N", help="the prompt's tokens when not generating")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="[POLICY.]NAME=VALUE",
        help="a policy's option (repeat; each policy's options: docs/kvcache.md); without POLICY. every listed "
        "policy must take it",
    )
    _retrieval_arguments(p)
    p.add_argument(
        "--out",
        metavar="DIR",
        required=True,
        help="an empty or new folder; with --corpus the store (a rerun with the same arguments resumes it)",
    )
    _corpus_arguments(p.add_argument_group("with --corpus"))
    return p


def _retrieval_arguments(p: argparse.ArgumentParser) -> None:
    """--retrieval and how its causal check masks heads."""
    p.add_argument(
        "--retrieval",
        metavar="K,K",
        help="with a needle-trained toy (--trained): each head's retrieval score (Wu et al. 2024) and the causal "
        "check at each k: the top-k retrieval heads masked against k random non-retrieval heads (retrieval.csv, "
        "ablation.csv); without --text/--data the check alone",
    )
    p.add_argument(
        "--draws",
        type=int,
        default=None,
        metavar="N",
        help="random head sets masked per k in --retrieval (default 20; every set when there are at most N)",
    )
    p.add_argument(
        "--mask-rows",
        default="decode",
        metavar="ROWS",
        help="where --retrieval masks a head: decode (the answer steps, as Wu et al.; default) or all rows",
    )


def _corpus_arguments(corpus) -> None:
    """The sweep over a corpus's flags: its decode rows and tokens, the engine, shards, restart."""
    corpus.add_argument(
        "--decode",
        type=positive_int,
        default=None,
        metavar="N",
        help="a text's last N tokens read as decode steps (default 32; a shorter text: all but its first)",
    )
    corpus.add_argument(
        "--max-tokens", type=at_least(2), default=None, metavar="N", help="tokens a text keeps (default 256)"
    )
    engine_arguments(corpus, default=None)
    corpus.add_argument(
        "--shard-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="texts per shard, the unit a rerun resumes from (default 16)",
    )
    corpus.add_argument("--restart", action="store_true", help="start over instead of resuming the store in --out")


def run(args: argparse.Namespace) -> int:
    from attndesk.cli import kvcache_job

    return kvcache_job.kvcache_command(args, CORPUS_ONLY)
