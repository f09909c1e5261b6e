"""``attndesk`` and ``attndesk app``: open the window; without a display, or without Qt's widgets,
render the sample heatmaps headless instead. The one command that reaches the window package."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attndesk import set_torch_environment
from attndesk.cli import render
from attndesk.cli.base import command_parser, guarded

NAME = "app"


def register(sub: Any) -> argparse.ArgumentParser:
    return sub.add_parser(NAME, help="open the desktop window (the default)", description="Open the desktop window.")


def run(args: argparse.Namespace) -> int:
    return launch_app()


def launch_app(argv: Sequence[str] | None = None) -> int:
    """Open the window; without a display (or without the app), render the sample headless."""
    set_torch_environment()  # before anything below loads torch
    from attndesk.render import display_problem, has_display

    if not has_display():
        print(
            "attndesk: no display found (neither DISPLAY nor WAYLAND_DISPLAY is set); "
            "rendering the sample heatmaps headless instead",
            flush=True,
        )
        return headless_fallback()
    problem = display_problem()
    if problem:
        print(f"attndesk: {problem}; rendering the sample heatmaps headless instead", flush=True)
        return headless_fallback()
    try:
        from attndesk.app.window.main_window import (
            main as app_main,  # optional: without Qt widgets, render instead
        )
    except ImportError as exc:
        print(
            f"attndesk: the window is not available ({exc}); rendering the sample heatmaps headless instead", flush=True
        )
        return headless_fallback()
    return int(app_main(list(argv) if argv is not None else None) or 0)


def headless_fallback(out: str = "render-out") -> int:
    """Render the sample sentence with default settings (all heads + mean, PNG) into ``out``
    and print the folder's path. Unlike ``attndesk render`` it writes into a folder that holds
    other files (``make screens`` keeps its pictures there): it removes only its own earlier
    heatmaps (``attn_*.png`` directly inside), so each fallback leaves one sample's set."""

    def run() -> int:
        for old in Path(out).glob("attn_*.png"):
            old.unlink()
        from attndesk.cli import render_job

        args = command_parser(render.register).parse_args(["--out", out])
        render_job.render_command(args, render.defaults(), echo=False)
        print(Path(out).resolve(), flush=True)
        return 0

    return guarded(run)
