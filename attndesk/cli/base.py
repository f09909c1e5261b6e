"""What every command shares: the command protocol, the one-line error and its exit codes, the
parser that reports a bad flag in one line, the guard that turns any failure into one line, and
the check that keeps one run's files from mixing with another's in ``--out``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from attndesk.files.atomic import occupied

EXIT_USAGE = 2
EXIT_FAILURE = 1


class Command(Protocol):
    """A subcommand: a module with its ``NAME``, ``register(subparsers)`` (adds and returns its
    parser) and ``run(args) -> int`` (the exit status; bad input raises CliError or ConfigError)."""

    NAME: str

    def register(self, subparsers: Any) -> argparse.ArgumentParser: ...

    def run(self, args: argparse.Namespace) -> int: ...


class CliError(Exception):
    """A problem to report in one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage block) and never exits itself."""

    def error(self, message: str):
        raise CliError(f"{message} (see '{self.prog} --help')", EXIT_USAGE)

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            print(message.rstrip("\n"), file=sys.stderr if status else sys.stdout)
        raise SystemExit(status)


def empty_out(out: str | os.PathLike) -> Path:
    """``--out`` as a path: a new folder or an empty one (hidden entries aside), as ``corpus``
    demands; a file or a folder holding files is refused in one line (EXIT_USAGE), before any work,
    so a run never overwrites part of another and leaves the rest beside it."""
    folder = Path(out).expanduser()
    problem = occupied(folder)
    if problem is not None:
        raise CliError(f"--out {problem}: choose an empty or new folder", EXIT_USAGE)
    return folder


def command_parser(register: Callable[[Any], argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """A command's own parser, alone, from its ``register`` (its defaults: ``.parse_args([])``)."""
    return register(Parser(prog="attndesk").add_subparsers(parser_class=Parser))


def guarded(run: Callable[[], int | None]) -> int:
    """Call ``run()``; turn every failure into one line on stderr and an exit code."""
    try:
        return int(run() or 0)
    except CliError as exc:
        print(f"attndesk: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("attndesk: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("attndesk: error: out of memory; try a shorter text, fewer heads or --memory-budget", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug or a device failure: still one line, never a traceback
        if os.environ.get("ATTNDESK_DEBUG"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"attndesk: error: {type(exc).__name__}: {message[:500]}", file=sys.stderr)
        return EXIT_FAILURE
