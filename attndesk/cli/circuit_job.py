"""The work of ``attndesk circuit`` once its arguments are read: load the model, score the edges,
choose the circuit, measure it and write its files. Only the command's ``run`` imports this
module, so that ``attndesk --help`` stays light (docs/architecture.md, function-level imports)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.cli.interp_job import heatmap
from attndesk.errors import ConfigError
from attndesk.interp import (
    connected,
    edge_scores,
    faithfulness,
    faithfulness_curve,
    find_circuit,
    path_patching,
    save_circuit,
)
from attndesk.interp.edges import prepare
from attndesk.models import load_pretrained, read_spec
from attndesk.render import ensure_gui_app, export_figure
from attndesk.render.circuit import write_circuit_figure, write_faithfulness_curve
from attndesk.render.export import ExportError, OutputSet
from attndesk.render.page_circuit import CURVE, write_circuit_page
from attndesk.train import load_trained
from attndesk.train.presets import PRESETS, load_preset


def load_model(args: argparse.Namespace):
    """The pretrained model of ``--model`` or the trained toy of ``--trained`` (a preset or a folder)."""
    try:
        if args.model is not None:
            read_spec(args.model)
            return load_pretrained(args.model)
        return load_preset(args.trained) if args.trained in PRESETS else load_trained(Path(args.trained).expanduser())
    except (ConfigError, ValueError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0], EXIT_USAGE) from None


def choose_circuit(args: argparse.Namespace, table: pd.DataFrame, model, prompts: tuple, common: dict, progress):
    """The circuit ``--method acdc`` (with ``--tau``), ``--threshold`` or ``--top-n`` (default: the top
    10% of edges) keeps."""
    if args.method == "acdc":
        clean, corrupt, answer, wrong = prompts
        return find_circuit(
            table,
            threshold=args.tau,
            method="acdc",
            model=model,
            clean=clean,
            corrupt=corrupt,
            answer=answer,
            wrong=wrong,
            progress=progress,
            **common,
        )
    if args.threshold is not None:
        return find_circuit(table, threshold=args.threshold, method="threshold", prune=args.connected)
    top = args.top_n if args.top_n is not None else max(1, round(0.1 * len(table)))
    return find_circuit(table, top_n=top, prune=args.connected)


def score_and_measure(args: argparse.Namespace, model, prompts: tuple, common: dict, progress):
    """(edge table, circuit, faithfulness curve, the circuit's faithfulness, the path-patching table
    of ``--path-patching`` or None), the question prepared once for every step; bad input exits 2."""
    try:
        clean, corrupt, answer, wrong = prompts
        metric, target, budget = common["metric"], common["target"], common["memory_budget"]
        common = {
            **common,
            "setup": prepare(model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=budget),
        }
        scoring = "eap-ig" if args.method == "acdc" else args.method
        table = edge_scores(model, *prompts, method=scoring, steps=args.steps, ig=args.ig, progress=progress, **common)
        circuit = choose_circuit(args, table, model, prompts, common, progress)
        curve = faithfulness_curve(model, table, *prompts, draws=args.draws, progress=progress, **common)
        faith = faithfulness(model, circuit, *prompts, **common)
        paths = (
            None
            if args.path_patching is None
            else path_patching(model, *prompts, kind=args.path_patching, progress=progress, **common)
        )
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    return table, circuit, curve, faith, paths


def describe(args: argparse.Namespace, model, prompts: tuple, found: tuple, seconds: float) -> dict:
    """What circuit.json records beside the circuit: the model, the method, the metrics, the
    question asked and, for a bundle's page, the kept edges' scores and the curve."""
    table, circuit, curve, faith = found
    clean, corrupt, answer, wrong = prompts
    about = {
        "model": getattr(model, "name", None) or f"trained {model.cfg.task}",
        "method": args.method,
        "scores": table.attrs["method"],
        "metric": args.metric,
        "edges_total": len(table),
        "edges_kept": len(circuit),
        "faithfulness": faith,
        "clean_metric": table.attrs["clean_metric"],
        "corrupt_metric": table.attrs["corrupt_metric"],
        "seconds": round(seconds, 3),
        # what the faithfulness was measured on: `attndesk reproduce` measures it again from a bundle
        "question": {"clean": clean, "corrupt": corrupt, "answer": answer, "wrong": wrong, "target": args.target},
    }
    # what a bundle's page draws of the circuit: its edges' scores and its curve
    kept = set(circuit)
    about["edge_scores"] = [
        [s, d, k, float(v)] for s, d, k, v in zip(table.src, table.dst, table.kind, table.score) if (s, d, k) in kept
    ]
    about["curve"] = {c: [None if np.isnan(v) else float(v) for v in curve[c]] for c in CURVE}
    return about


def summary_notes(table: pd.DataFrame, circuit, faith: float) -> list[str]:
    """What the summary line's faithfulness needs said beside it: the kept edges that lie on no
    path from an embedding to the logits inside the circuit (they change nothing), and what a
    faithfulness below 0 means (a true property of the circuit, not a sign error)."""
    on_paths = connected(circuit, list(zip(table.src, table.dst, table.kind)))
    notes = []
    if len(on_paths) < len(circuit):
        notes.append(
            f"{len(circuit) - len(on_paths):,} of the {len(circuit):,} kept edges lie on no path from the embeddings "
            "to the logits inside the circuit, so they change nothing (--connected keeps only edges on such paths)"
        )
    if faith < 0:
        notes.append(
            "faithfulness below 0: with only these edges clean the metric ends further from the clean run than "
            "with none, as when a head's key input is clean but its value input is not (docs/interp.md)"
        )
    return notes


def write_path_patching(out: OutputSet, paths: pd.DataFrame, metric: str) -> None:
    """``--path-patching``'s table (CSV) and its senders x receivers heatmap (PNG) into ``out``."""
    kind = paths.attrs["kind"]
    name = f"path_patching_{kind}"
    paths.rename_axis("sender").to_csv(out.path(f"{name}.csv"))
    # the figure leaves out the senders that feed no head (the last layer) and the
    # receivers no head feeds (the first layer)
    shown = paths.dropna(how="all").dropna(axis=1, how="all")
    figure = heatmap(
        shown.to_numpy(dtype=float),
        list(shown.index),
        list(shown.columns),
        f"path patching into {kind} ({metric}, corrupted sender into the clean run)",
        "sender head",
        f"receiver ({kind} input)",
        "m_patched - m_clean",
    )
    export_figure(figure, out.path(f"{name}.png"))


def write_outputs(folder, table: pd.DataFrame, circuit, curve: pd.DataFrame, about: dict, paths=None) -> list:
    """Every file of the run into ``folder``, all or nothing; the paths written."""
    ensure_gui_app(headless=True)
    plain = table.copy()
    plain.attrs = {}
    title = f"{about['model']}: {about['edges_kept']} of {about['edges_total']} edges, faithfulness {about['faithfulness']:.3f}"
    try:
        with OutputSet(folder) as out:
            plain.to_csv(out.path("edges.csv"), index=False)
            plain.to_parquet(out.path("edges.parquet"), index=False)
            save_circuit(circuit, out.path("circuit.json"), **about)
            curve.to_csv(out.path("faithfulness.csv"), index=False)
            write_faithfulness_curve(curve, out.path("faithfulness.png"), title=f"faithfulness ({about['metric']})")
            for ext in ("png", "svg"):
                write_circuit_figure(table, circuit, out.path(f"graph.{ext}"), title=title)
            settings = {k: about[k] for k in ("model", "method", "scores", "metric", "faithfulness")}
            write_circuit_page(table, circuit, curve, out.path("circuit.html"), title=title, settings=settings)
            if paths is not None:
                write_path_patching(out, paths, about["metric"])
    except ExportError as exc:
        raise CliError(str(exc)) from None
    return out.committed
