"""What ``attndesk kvcache`` does once its flags are parsed (``cli.kvcache`` holds the flags and
imports this module in its ``run``): the policies, budgets and options checked, the model loaded,
the retrieval check, the compressed runs, and their table, curves and keep rasters written all at
once; a sweep over a corpus goes to ``kvcache_corpus``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attndesk.cli.base import EXIT_USAGE, CliError, empty_out
from attndesk.cli.kvcache_corpus import run_corpus
from attndesk.cli.progress import ProgressLine
from attndesk.files.atomic import atomic_write
from attndesk.jobs import plain_context
from attndesk.kvcache import POLICIES, kv_model, resolve_budget, simulate
from attndesk.kvcache.model import TrainedKV
from attndesk.kvcache.retrieval import RANDOM_DRAWS, RETRIEVAL_PRESET, ROWS, retrieval_report
from attndesk.kvcache.simulate import prepare
from attndesk.models import load_pretrained, read_spec
from attndesk.render import ensure_gui_app
from attndesk.render.export import ExportError, OutputSet
from attndesk.render.kvcache import write_curves, write_keep_raster
from attndesk.train import load_trained
from attndesk.train.presets import PRESETS, load_preset


def _budgets(text: str) -> list[int | float]:
    out: list[int | float] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            out.append(int(part))
        except ValueError:
            try:
                out.append(float(part))
            except ValueError:
                raise CliError(f"--budgets: {part!r} is neither a token count nor a ratio", EXIT_USAGE) from None
    if not out:
        raise CliError("--budgets: give at least one budget", EXIT_USAGE)
    return out


def _value(spec, text: str) -> Any:
    if spec.optional and text.lower() == "none":
        return None
    if spec.kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise CliError(f"--option {spec.name}: {text!r} is not true or false", EXIT_USAGE)
        return text.lower() in ("true", "1", "yes")
    try:
        return spec.kind(text)
    except ValueError:
        raise CliError(f"--option {spec.name}: {text!r} is not {spec.kind.__name__}", EXIT_USAGE) from None


def _options(given: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {name: {} for name in names}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--option {item!r}: write [POLICY.]NAME=VALUE", EXIT_USAGE)
        policy, dot, option = key.rpartition(".")
        targets = [policy] if dot else names
        if dot and policy not in out:
            raise CliError(f"--option {item!r}: {policy} is not among --policies", EXIT_USAGE)
        for name in targets:
            fields = {p.name: p for p in POLICIES[name].option_fields()}
            if option not in fields:
                takes = f"its options: {', '.join(fields)}" if fields else "it takes no options"
                raise CliError(f"{name} takes no option {option!r}; {takes}", EXIT_USAGE)
            out[name][option] = _value(fields[option], value)
    for name, options in out.items():
        try:
            POLICIES[name].parse(options)
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    return out


def _model(args):
    try:
        if args.model:
            read_spec(args.model)
            return kv_model(load_pretrained(args.model))
        if args.trained in PRESETS:
            return kv_model(load_preset(args.trained))
        if not Path(args.trained).expanduser().is_dir():
            raise CliError(
                f"--trained {args.trained}: neither a preset ({', '.join(PRESETS)}) nor a saved run's folder",
                EXIT_USAGE,
            )
        return kv_model(load_trained(Path(args.trained).expanduser()))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _inputs(args, kvm) -> list[list[int]]:
    if args.text is not None:
        texts = [args.text]
    else:
        try:
            texts = [
                line for line in Path(args.data).expanduser().read_text(encoding="utf-8").splitlines() if line.strip()
            ]
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"--data {args.data}: cannot read it ({exc})", EXIT_USAGE) from None
        if not texts:
            raise CliError(f"--data {args.data}: no line holds text", EXIT_USAGE)
    try:
        return [kvm.encode(text) for text in texts]
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _check(args, kvm, inputs: list[list[int]], names, budgets: list[int | float], options) -> None:
    if args.generate < 0:
        raise CliError("--generate: give 0 or more decode steps", EXIT_USAGE)
    for ids in inputs:
        prompt = _prompt(args, ids)
        if not 1 <= prompt <= len(ids):
            raise CliError(f"--prefill {args.prefill}: the input has {len(ids)} tokens", EXIT_USAGE)
        for budget in budgets:
            try:
                keys = resolve_budget(budget, prompt)
            except ValueError as exc:
                raise CliError(str(exc), EXIT_USAGE) from None
            total = len(ids) + args.generate
            if keys >= total:
                raise CliError(
                    f"budget {budget} keeps {keys} keys, and the input has {len(ids)} tokens + {args.generate} "
                    "generated: that is the full run; give a smaller budget",
                    EXIT_USAGE,
                )
            for name in names:
                try:
                    prepare(kvm, ids, name, budget, args.generate, prompt, options[name])
                except ValueError as exc:
                    raise CliError(str(exc), EXIT_USAGE) from None


def _prompt(args, ids: list[int]) -> int:
    if args.prefill is not None:
        return args.prefill
    return len(ids) if args.generate else max(1, len(ids) // 2)


def _ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"--retrieval: {text!r} is not a list of head counts such as 1,2,4", EXIT_USAGE) from None
    if not ks:
        raise CliError("--retrieval: give at least one head count", EXIT_USAGE)
    return ks


def _retrieval(args, kvm, ks: list[int]):
    """The retrieval heads' scores and causal check of a needle-trained toy."""
    draws = RANDOM_DRAWS if args.draws is None else args.draws
    if draws < 1:
        raise CliError("--draws: give at least 1 random draw", EXIT_USAGE)
    if args.mask_rows not in ROWS:
        raise CliError(f"--mask-rows: one of {', '.join(ROWS)}, got {args.mask_rows!r}", EXIT_USAGE)
    if not isinstance(kvm, TrainedKV):
        raise CliError("--retrieval reads the toy needle task: give a needle-trained toy with --trained", EXIT_USAGE)
    with ProgressLine() as progress:
        try:
            return retrieval_report(kvm.run, ks, draws=draws, rows=args.mask_rows, ctx=plain_context(progress.update))
        except ValueError as exc:
            raise CliError(f"--retrieval: {exc}", EXIT_USAGE) from None


def _simulate(args, kvm, inputs, names, budgets, options) -> list[tuple[int, Any]]:
    jobs = [(t, name, budget) for t in range(len(inputs)) for name in names for budget in budgets]
    runs = []
    with ProgressLine() as progress:
        ctx = plain_context(progress.update)
        for index, (t, name, budget) in enumerate(jobs):
            part = ctx.scaled(index / len(jobs), (index + 1) / len(jobs), f"{name} at {budget}: ")
            try:
                run = simulate(
                    kvm,
                    inputs[t],
                    name,
                    budget,
                    generate=args.generate,
                    prefill=_prompt(args, inputs[t]),
                    ctx=part,
                    **options[name],
                )
            except ValueError as exc:
                raise CliError(str(exc), EXIT_USAGE) from None
            runs.append((t, run))
    return runs


def table(runs) -> Any:
    """One row per text, policy, budget and query row (pandas)."""
    frames = []
    for text, run in runs:
        rows = np.arange(run.rows)
        frames.append(
            pd.DataFrame(
                {
                    "text": text,
                    "policy": run.policy,
                    "budget": run.budget,
                    "row": rows,
                    "step": rows - run.prompt,
                    "token": run.ids,
                    "kept": run.kept.mean((0, 1)),
                    "kl": run.kl,
                    "accuracy": run.correct,
                    "agree": run.agree.astype(float),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def summary(frame) -> Any:
    """Per policy and budget: the mean over the compressed rows (decode steps, and a streaming
    policy's prompt rows past its budget) of KL, accuracy and agreement."""
    compressed = frame[(frame.step >= 0) | (frame.row >= frame.budget)]
    return compressed.groupby(["policy", "budget"], sort=False)[["kl", "accuracy", "agree"]].mean().reset_index()


def _write(out_dir: str, runs, kvm, report=None) -> list[Path]:
    ensure_gui_app(headless=True)
    try:
        with OutputSet(Path(out_dir).expanduser()) as out:
            if report is not None:
                scores = pd.DataFrame(report.score_rows()).to_csv(index=False)
                atomic_write(out.path("retrieval.csv"), scores.encode("utf-8"))
                checks = pd.DataFrame([check.row() for check in report.checks]).to_csv(index=False)
                atomic_write(out.path("ablation.csv"), checks.encode("utf-8"))
            if runs:
                frame = table(runs)
                means = summary(frame)
                atomic_write(out.path("kvcache.csv"), frame.to_csv(index=False).encode("utf-8"))
                frame.to_parquet(out.path("kvcache.parquet"), index=False)
                atomic_write(out.path("summary.csv"), means.to_csv(index=False).encode("utf-8"))
                for column, label, log_y in (
                    ("kl", "mean KL(full || compressed), nats", True),
                    ("accuracy", "next-token accuracy", False),
                    ("agree", "top-1 agreement with the full run", False),
                ):
                    lines = {
                        policy: (group.budget.to_numpy(), group[column].to_numpy())
                        for policy, group in means.groupby("policy", sort=False)
                    }
                    write_curves(
                        lines,
                        out.path(f"{column}_vs_budget.png"),
                        title=f"{kvm.name}: {label} against the budget",
                        x_label="budget (keys per K/V head)",
                        y_label=label,
                        log_y=log_y,
                    )
                for text, run in runs:
                    if text:
                        continue  # the rasters of the first input
                    panels = [
                        (f"layer {layer}, K/V head {head}", run.keep[layer, head])
                        for layer in range(run.keep.shape[0])
                        for head in range(run.keep.shape[1])
                    ]
                    write_keep_raster(
                        panels,
                        out.path(f"keep_{run.policy}_{run.budget}.png"),
                        title=f"{run.policy}, budget {run.budget}: keys each query row sees",
                    )
    except ExportError as exc:
        raise CliError(str(exc)) from None
    return out.committed


def kvcache_command(args: argparse.Namespace, corpus_only: dict[str, str]) -> int:
    """The run the flags ask for: a sweep over a corpus (``corpus_only``: its own flags), the
    retrieval check, policies x budgets over the input, or both; the files written all at once."""
    given = [flag for name, flag in corpus_only.items() if getattr(args, name) not in (None, False)]
    if args.corpus is None and given:
        raise CliError(f"{given[0]} applies to a sweep over a corpus: give --corpus", EXIT_USAGE)
    if args.corpus is None:
        empty_out(args.out)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise CliError(
            f"--policies: no policy {unknown[0] if unknown else '(none)'!r}; policies: {', '.join(POLICIES)}",
            EXIT_USAGE,
        )
    if args.corpus is not None:
        return run_corpus(args, names, _budgets(args.budgets or ""), _options(args.option, names))
    reading = args.text is not None or args.data is not None
    if args.model is None and args.trained is None:
        if reading or args.retrieval is None:
            raise CliError("give the model: --model PATH or --trained NAME", EXIT_USAGE)
        args.trained = RETRIEVAL_PRESET  # the retrieval check alone: the preset made for it
    if not reading and args.retrieval is None:
        raise CliError(
            "give the input (--text or --data) and --budgets, or --retrieval K for the check alone", EXIT_USAGE
        )
    if reading and args.budgets is None:
        raise CliError("--budgets: give the budgets to run the input at", EXIT_USAGE)
    ks = _ks(args.retrieval) if args.retrieval is not None else None
    budgets = _budgets(args.budgets) if reading else []
    options = _options(args.option, names)
    kvm = _model(args)
    report = _retrieval(args, kvm, ks) if ks is not None else None  # its refusals before any run
    inputs = _inputs(args, kvm) if reading else []
    _check(args, kvm, inputs, names, budgets, options)
    runs = _simulate(args, kvm, inputs, names, budgets, options)
    for path in _write(args.out, runs, kvm, report):
        print(path, flush=True)
    return 0
