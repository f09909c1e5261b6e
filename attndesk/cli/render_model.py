"""``attndesk render --model PATH``: a local transformers checkpoint's real attention, layer by
layer, through the same figures and files as the toy model (``render.figure.figure_from_map`` on
``PretrainedResult.layer_map``). Encoder-decoders also write the decoder's self-attention and the
cross-attention (``--target`` is the decoder's text). Everything that can be refused is refused
before the first file is written."""

from __future__ import annotations

import argparse

from attndesk.errors import ConfigError
from attndesk.models import load_pretrained, read_spec, run_pretrained
from attndesk.render.bundle import model_settings
from attndesk.render.page import pretrained_page_maps
from attndesk.runs.config import FIELDS


def toy_only(fields=None) -> tuple[str, ...]:
    """The dests of the flags a real model's fixed architecture ignores (refused, not dropped): every
    field whose spec says a real model does not act on it, and the old ``--no-positional``."""
    return (*(spec.dest for spec in (FIELDS if fields is None else fields) if spec.real_model != "acts"), "positional")


def check_model_flags(args: argparse.Namespace, defaults: argparse.Namespace) -> None:
    """ConfigError naming the first flag that has no meaning for a real model."""
    flags = {spec.dest: spec.flag for spec in FIELDS} | {"positional": "--no-positional"}
    for dest in toy_only():
        if getattr(args, dest) != getattr(defaults, dest):
            raise ConfigError(
                f"{flags[dest]} sets the toy model; a real model (--model) has its own architecture: leave it out"
            )
    if args.key_text is not None or args.key_text_file is not None:
        raise ConfigError(
            "--key-text is the toy model's cross-attention; an encoder-decoder's decoder text is --target"
        )


def model_run(args: argparse.Namespace, text: str):
    """Load the folder and run it (ConfigError: an unusable folder, a target for a decoder, ...)."""
    read_spec(args.model)  # config.json alone: a wrong path says so before any weight is read
    model = load_pretrained(args.model, memory_budget=args.memory_budget)
    # as in the window: a causal --mask forces a causal mask on an encoder; one text has no padding
    run = run_pretrained(
        model,
        text,
        target=args.target,
        scaled=args.scaled,
        causal="causal" in args.mask,
        memory_budget=args.memory_budget,
    )
    if args.layer is not None:
        most = max(len(run.part_weights(part)) for part in run.parts())
        if args.layer >= most:
            raise ConfigError(f"--layer {args.layer} is out of range: {run.model_name} has layers 0..{most - 1}")
    return run


def model_maps(run, layer: int | None) -> list:
    """Every (part, layer) map to draw: all layers of every part, or one layer of each part that has it."""
    return [pm.map for pm in pretrained_page_maps(run, layer)]


def model_page(run, args: argparse.Namespace) -> dict:
    """The page of a run: every (part, layer) map (``--layer``: that layer), caption, settings, file name."""
    return {
        "maps": pretrained_page_maps(run, args.layer),
        "summary": run.summary(),
        "run": run,
        "settings": model_settings(run, args.model, args.target),
        "name": f"attn_{run.file_tag(args.layer)}.html",
        "title": run.model_name if args.layer is None else f"{run.model_name} · layer {args.layer}",
    }


__all__ = ["check_model_flags", "model_maps", "model_page", "model_run", "toy_only"]
