"""The interactive page of an edge circuit: the graph (layers as columns, the circuit's edges with
width by |score|, red positive / blue negative; key inputs dashed, value inputs dotted, as the
PNG figure) and the faithfulness curve beside the random edge sets' mean and one standard
deviation. Node positions come from ``render.circuit.layout``, the figure's."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .circuit import layout
from .page import write_document
from .page_corpus import _base

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd


def _number(x: Any) -> float | None:
    value = float(x)
    return None if math.isnan(value) else value


def _section(nodes: list[str], edges: list[dict], curve: dict[str, list], total: int) -> dict[str, Any]:
    where = layout(nodes)
    return {
        "nodes": [{"name": n, "x": where[n][0], "y": where[n][1]} for n in nodes],
        "edges": edges,
        "curve": {column: [None if v is None else _number(v) for v in curve[column]] for column in CURVE},
        "total": total,
    }


CURVE = ("size", "faithfulness", "random_mean", "random_std")


def circuit_page_data(table: pd.DataFrame, circuit, curve: pd.DataFrame, *, title: str, settings: dict) -> dict:
    """The page document: ``circuit`` holds the nodes (name, x, y in [0, 1]), the circuit's edges
    (src, dst, kind, score) and the curve (size, faithfulness, random mean and std per size)."""
    kept = set(circuit)
    nodes = list(dict.fromkeys([*table["src"], *table["dst"]]))
    edges = [
        {"src": s, "dst": d, "kind": k, "score": float(v)}
        for s, d, k, v in zip(table["src"], table["dst"], table["kind"], table["score"])
        if (s, d, k) in kept
    ]
    doc = _base(title, f"{len(edges):,} of {len(table):,} edges in the circuit", settings, "viridis")
    doc["circuit"] = _section(nodes, edges, {c: list(curve[c]) for c in CURVE}, len(table))
    return doc


def circuit_section(document: dict) -> dict[str, Any] | None:
    """A page's ``circuit`` entry from a circuit's JSON (``attndesk circuit``'s circuit.json, which
    records its edges' scores and its curve); None for one that does not."""
    scored, curve = document.get("edge_scores"), document.get("curve")
    if not isinstance(scored, list) or not isinstance(curve, dict) or not all(c in curve for c in CURVE):
        return None
    edges = [{"src": s, "dst": d, "kind": k, "score": float(v)} for s, d, k, v in scored]
    nodes = list(dict.fromkeys([e["src"] for e in edges] + [e["dst"] for e in edges]))
    return _section(nodes, edges, curve, int(document.get("edges_total", len(edges))))


def write_circuit_page(
    table: pd.DataFrame, circuit, curve: pd.DataFrame, path: str | os.PathLike, *, title: str, settings: dict
) -> Path:
    """Write the circuit's page (.html) atomically; returns the path."""
    return write_document(circuit_page_data(table, circuit, curve, title=title, settings=settings), path)


__all__ = ["CURVE", "circuit_page_data", "circuit_section", "write_circuit_page"]
