"""``python -m tests.soak [--seconds S] [--seed N]``: one soak run of the real window (see
``tests/soak/__init__.py``). Exit status 0 when every criterion holds, 1 otherwise."""

from __future__ import annotations

import argparse
import random
import sys

from .report import load
from .supervise import run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    p.add_argument("--seconds", type=float, default=240.0, help="length of the random phase (default 240)")
    p.add_argument("--seed", type=int, default=None, help="replay this seed (default: a new one, printed)")
    p.add_argument(
        "--report",
        default=None,
        help="write the JSON report here (default: only on failure, into a new temporary folder)",
    )
    p.add_argument("--limit-mib", type=int, default=4096, help="stop as a failure past this resident memory")
    p.add_argument("--keep-sandbox", action="store_true", help="keep the temporary folder the window wrote to")
    p.add_argument("--no-final-checks", action="store_true", help="skip the known-input and memory checks")
    p.add_argument(
        "--replay",
        default=None,
        help="repeat the actions of this report (its seed; it ends with the report's last action)",
    )
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    seconds = args.seconds
    if args.replay:
        recorded = load(args.replay)
        seed, seconds = recorded["seed"], 3 * float(recorded.get("duration_s") or recorded["seconds"]) + 60
    outcome = run(
        seed,
        seconds,
        report_path=args.report,
        limit_mib=args.limit_mib,
        keep_sandbox=args.keep_sandbox,
        final_checks=not args.no_final_checks,
        replay=args.replay,
    )
    return 0 if outcome.passed else 1


if __name__ == "__main__":
    sys.exit(main())
