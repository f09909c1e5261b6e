"""The ``attndesk`` command: the window by default, a subcommand for each headless job.

One module per command under one protocol (``base.Command``: ``NAME``, ``register(subparsers)``,
``run(args) -> int``), the shared argument types in ``arguments``, the progress line in
``progress``, and here only the dispatch. A command's module loads nothing heavy; its ``run``
imports its job module, which holds the work: ``app`` (the window, or the headless fallback),
``render`` (flags in ``render_flags``; work in ``render_job`` with ``render_model``,
``render_store``, ``render_image`` and ``train_job``), ``bundle`` (``bundle_job``), ``reproduce``
(``reproduce_job``), ``patch`` and ``attribute`` (``interp_job``), ``circuit`` (``circuit_job``),
``train`` (``train_job``), ``corpus`` (``corpus_job``) and ``kvcache`` (``kvcache_job``; its
sweep over a corpus in ``kvcache_corpus``). Adding a command: its module, its job module and
one entry in ``COMMANDS``. The names this package exported when it was one module (``main``,
``build_parser``, ``config_from_args``, ...) are re-exported here (``__main__``: ``python -m``).
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
from attndesk.cli.render_flags import model_arguments as _model_arguments

# in the order ``attndesk --help`` lists them
COMMANDS: tuple[Command, ...] = (app, render, bundle, reproduce, patch, attribute, circuit, train, corpus, kvcache)


# the old names that now live in the render command's job module (which loads torch): imported on
# first use, so that importing this package leaves torch unloaded until ``main`` has set its
# environment
_FROM_RENDER_JOB = ("config_from_args", "read_text_file", "render_command", "sample_text")


def __getattr__(name: str):
    if name in _FROM_RENDER_JOB:
        from attndesk.cli import render_job

        return getattr(render_job, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
