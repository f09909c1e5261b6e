"""The ``attndesk`` command: the window by default, a subcommand for each headless job.

One module per command under one protocol (``base.Command``: ``NAME``, ``register(subparsers)``,
``run(args) -> int``), the shared argument types in ``arguments``, and here only the dispatch.
Adding a command: its module (``circuit``, say, with its heavy work in ``circuit_job``; ``kvcache``
with its sweep over a corpus in ``kvcache_corpus``) and one entry in ``COMMANDS``. The names this package exported when it was one module (``main``,
``build_parser``, ``config_from_args``, ...) are re-exported here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from attndesk import set_torch_environment
from attndesk.cli import app, attribute, bundle, circuit, corpus, kvcache, patch, render, reproduce, train
from attndesk.cli.app import headless_fallback, launch_app
from attndesk.cli.arguments import attach_dash_values
from attndesk.cli.base import EXIT_FAILURE, EXIT_USAGE, CliError, Command, Parser, guarded
from attndesk.cli.render import config_from_args, read_text_file, render_command, sample_text
from attndesk.cli.render import model_arguments as _model_arguments

# in the order ``attndesk --help`` lists them
COMMANDS: tuple[Command, ...] = (app, render, bundle, reproduce, patch, attribute, circuit, train, corpus, kvcache)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="attndesk",
        description="See inside transformer attention. Without a command, opens the desktop window.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attndesk`` console script and ``python -m attndesk``."""
    set_torch_environment()  # before the commands load torch
    argv = list(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        parser = build_parser()
        try:
            args = parser.parse_args(attach_dash_values(argv, parser))
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.command is None:
            return launch_app()
        command = next(c for c in COMMANDS if args.command == c.NAME)
        return int(command.run(args) or 0)

    return guarded(run)


__all__ = [
    "COMMANDS",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "CliError",
    "_model_arguments",
    "build_parser",
    "config_from_args",
    "headless_fallback",
    "launch_app",
    "main",
    "read_text_file",
    "render_command",
    "sample_text",
]
