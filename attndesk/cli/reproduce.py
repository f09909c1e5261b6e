"""``attndesk reproduce BUNDLE``: compute a bundle's run again and report the largest difference
from its weights (0 on the machine and versions that made it; elsewhere within a stated
tolerance), or name what is missing here (the model folder, a version)."""

from __future__ import annotations

import argparse
from typing import Any

NAME = "reproduce"
# float32 attention on another machine or torch build differs by rounding: measured below 1e-6
# for the packaged MiniLM between torch builds; 1e-5 leaves room and still catches a real change
TOLERANCE_ELSEWHERE = 1e-5
# a circuit's faithfulness is a float64 ratio of float32 runs: the same here; elsewhere rounding
# moves both metrics, and the ratio by more where the clean and corrupted metrics are close
CIRCUIT_TOLERANCE_ELSEWHERE = 1e-3


def register(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        NAME,
        help="recompute a bundle and report the largest difference from its weights",
        description=(
            "Read a bundle written by 'attndesk bundle' (or the window's File > Save bundle), run it again "
            "with the same session and model, and compare: exit 0 when the weights agree (exactly on the "
            f"same machine and versions, within {TOLERANCE_ELSEWHERE:g} otherwise), 1 when they differ."
        ),
    )
    parser.add_argument("bundle", metavar="BUNDLE.zip", help="the bundle to reproduce")
    parser.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="the model folder, when it is no longer where the bundle says (its weights must hash the same)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from attndesk.cli import reproduce_job

    return reproduce_job.reproduce_command(args, TOLERANCE_ELSEWHERE, CIRCUIT_TOLERANCE_ELSEWHERE)
