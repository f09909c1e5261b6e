"""Circuits: sets of edges (src, dst, kind), chosen from an edge table, scored by faithfulness.

A circuit's run is the clean run with every edge outside the circuit carrying its sender's
corrupted term instead (the norm recomputed per receiver, as for one patched edge). Faithfulness
normalises its metric so the full model is 1 and the all-corrupt model 0:
(m_circuit - m_empty) / (m_full - m_empty), where the full and the empty circuit's metrics come
from the same batched evaluation (a circuit equal to one of them shares its row, so the two ends
are exactly 1 and 0). Choosing edges: the ``top_n`` largest |score|, every |score| at least
``threshold``, or ACDC (Conmy et al. 2023): from the full graph, receivers from the logits back,
drop each edge whose removal moves the metric less than ``threshold`` (tau).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.files.atomic import atomic_write
from attndesk.jobs import Cancel, JobContext, ProgressFn, job_context

from .edges import RowSpec, Setup, ready, run_rows

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

Edge = tuple[str, str, str]
Circuit = set[Edge]
CIRCUIT_FORMAT = "attndesk-circuit"
CIRCUIT_VERSION = 1
FIND_METHODS = ("topn", "threshold", "acdc")


def _edges_of(table: pd.DataFrame) -> list[Edge]:
    missing = [c for c in ("src", "dst", "kind", "score") if c not in table.columns]
    if missing:
        raise ConfigError(
            f"an edge table has the columns src, dst, kind and score; this one lacks {', '.join(missing)}"
        )
    return list(zip(table["src"].astype(str), table["dst"].astype(str), table["kind"].astype(str)))


def _coefficients(setup: Setup, circuit: frozenset[Edge]) -> dict[int, torch.Tensor]:
    """Per site [R, S]: True for every edge outside ``circuit`` (those carry the corrupted term)."""
    out: dict[int, torch.Tensor] = {}
    index = setup.engine.graph.index()
    for i, site in enumerate(setup.engine.graph.sites):
        if site.width:
            out[i] = torch.ones((len(site.receivers), site.width), dtype=torch.bool)
    for edge in circuit:
        i, r, c = index[edge]
        out[i][r, c] = False
    return {i: m for i, m in out.items() if bool(m.any())}


def _check_edges(setup: Setup, circuit) -> frozenset[Edge]:
    index = setup.engine.graph.index()
    edges = frozenset((str(a), str(b), str(c)) for a, b, c in circuit)
    unknown = [e for e in edges if e not in index]
    if unknown:
        src, dst, kind = unknown[0]
        raise ConfigError(f"the circuit's edge {src} -> {dst} ({kind}) is not an edge of this model's graph")
    return edges


def evaluate(setup: Setup, circuits: list[frozenset[Edge]], ctx: JobContext, label: str = "circuits") -> np.ndarray:
    """Each circuit's metric (mean over the pairs); identical circuits share one row."""
    unique = list(dict.fromkeys(circuits))
    width = max((len(s.receivers) for s in setup.engine.graph.sites), default=1)
    pairs = setup.pairs.count
    specs: list[tuple[int, RowSpec]] = [(p, _coefficients(setup, c) or None) for c in unique for p in range(pairs)]
    values = run_rows(setup, specs, base="clean", alpha=0.0, ctx=ctx, label=label, pairs_per_row=width)
    means = values.reshape(len(unique), pairs).mean(axis=1)
    at = {c: i for i, c in enumerate(unique)}
    return np.array([means[at[c]] for c in circuits])


def _normalise(values: np.ndarray, full: float, empty: float, metric: str) -> np.ndarray:
    if abs(full - empty) < 1e-12:
        raise ConfigError(
            f"the full and the empty circuit give the same {metric} ({full:.6g}): faithfulness has nothing to normalise by"
        )
    return (values - empty) / (full - empty)


def faithfulness(
    model,
    circuit,
    clean,
    corrupt,
    answer,
    wrong=None,
    metric: str = "logit_diff",
    *,
    target: str | None = None,
    memory_budget: int | None = None,
    setup: Setup | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> float:
    """The circuit's normalised metric: every edge outside it corrupted, 1 = the full model, 0 =
    every edge corrupted (see the module docstring). Same inputs as ``edge_scores`` (``setup``: the
    question already prepared)."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    setup = ready(setup, model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=memory_budget)
    edges = _check_edges(setup, circuit)
    full = frozenset(setup.engine.graph.index())
    values = evaluate(setup, [full, frozenset(), edges], ctx, "faithfulness")
    return float(_normalise(values[2:], values[0], values[1], metric)[0])


def default_sizes(total: int) -> list[int]:
    """Circuit sizes for a curve: 0, then about geometric steps to every edge."""
    sizes = {0, total}
    size = 1
    while size < total:
        sizes.add(size)
        size = max(size + 1, round(size * 1.6))
    return sorted(sizes)


def faithfulness_curve(
    model,
    table: pd.DataFrame,
    clean,
    corrupt,
    answer,
    wrong=None,
    *,
    metric: str | None = None,
    sizes: list[int] | None = None,
    draws: int = 10,
    seed: int = 0,
    target: str | None = None,
    memory_budget: int | None = None,
    setup: Setup | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> pd.DataFrame:
    """Per circuit size n: the faithfulness of the table's top-n edges by |score| and of ``draws``
    random edge sets of n edges (``seed``): columns size, fraction, faithfulness, random_mean,
    random_std, random_min, random_max. ``setup``: the question already prepared (``edge_scores``)."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    metric = metric or str(table.attrs.get("metric", "logit_diff"))
    setup = ready(setup, model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=memory_budget)
    ranked = _ranked(table)
    _check_edges(setup, ranked)
    everything = list(setup.engine.graph.index())
    total = len(everything)
    sizes = default_sizes(total) if sizes is None else sorted({int(s) for s in sizes})
    if any(not 0 <= s <= total for s in sizes):
        raise ConfigError(f"circuit sizes run from 0 to the graph's {total} edges")
    rng = np.random.default_rng(seed)
    circuits = [frozenset(everything), frozenset()]
    for size in sizes:
        circuits.append(frozenset(ranked[:size]))
        for _ in range(draws):
            picks = rng.choice(total, size=size, replace=False)
            circuits.append(frozenset(everything[i] for i in picks))
    values = evaluate(setup, circuits, ctx, "faithfulness curve")
    faith = _normalise(values[2:], values[0], values[1], metric).reshape(len(sizes), 1 + draws)
    random = faith[:, 1:]
    import pandas as pd

    return pd.DataFrame(
        {
            "size": sizes,
            "fraction": [s / total for s in sizes],
            "faithfulness": faith[:, 0],
            "random_mean": random.mean(axis=1) if draws else np.nan,
            "random_std": random.std(axis=1) if draws else np.nan,
            "random_min": random.min(axis=1) if draws else np.nan,
            "random_max": random.max(axis=1) if draws else np.nan,
        }
    )


def _ranked(table: pd.DataFrame) -> list[Edge]:
    edges = _edges_of(table)
    order = np.argsort(-np.abs(table["score"].to_numpy(dtype=np.float64)), kind="stable")
    return [edges[i] for i in order]


def _group_members(edges: list[Edge]) -> dict[str, list[str]]:
    """A grouped K/V input "L{l}.KV{g}" (any prefix) -> the query heads that read it."""
    heads: dict[str, list[str]] = {}
    groups: dict[str, set[str]] = {}
    for src, dst, _ in edges:
        for node in (src, dst):
            stem, _, last = node.rpartition(".")
            if last.startswith("KV"):
                groups.setdefault(stem, set()).add(node)
            elif last.startswith("H") and last[1:].isdigit():
                heads.setdefault(stem, [])
                if node not in heads[stem]:
                    heads[stem].append(node)
    out: dict[str, list[str]] = {}
    for stem, kv in groups.items():
        members = sorted(heads.get(stem, []), key=lambda n: int(n.rpartition(".H")[2]))
        per = max(1, len(members) // max(1, len(kv)))
        for node in kv:
            g = int(node.rpartition(".KV")[2])
            out[node] = members[g * per : (g + 1) * per]
    return out


def connected(circuit, edges: list[Edge] | None = None) -> Circuit:
    """The circuit's edges that lie on a path from an embedding to the logits (within the
    circuit): any other edge changes nothing (its sender reads only corrupted inputs, or its
    receiver reaches no output). ``edges``: the whole graph's, to find grouped K/V heads' readers."""
    circuit = set(circuit)
    readers = _group_members(list(edges) if edges is not None else list(circuit))

    def outputs(dst: str) -> list[str]:
        return readers.get(dst, [dst])

    reached = {n for e in circuit for n in e[:2] if n.rpartition(".")[2] == "embed" or n == "embed"}
    changed = True
    while changed:
        changed = False
        for src, dst, _ in circuit:
            if src in reached:
                for node in outputs(dst):
                    if node not in reached:
                        reached.add(node)
                        changed = True
    useful = {"logits"}
    changed = True
    while changed:
        changed = False
        for src, dst, _ in circuit:
            if src not in useful and any(node in useful for node in outputs(dst)):
                useful.add(src)
                changed = True
    return {
        (src, dst, kind)
        for src, dst, kind in circuit
        if src in reached and any(node in useful for node in outputs(dst))
    }


def _top_connected(ranked: list[Edge], top_n: int) -> Circuit:
    """The connected part of the longest prefix of the ranking whose connected part holds at most
    ``top_n`` edges (one more edge may connect several at once)."""
    lo, hi = 0, len(ranked)
    while lo < hi:  # the connected part only grows with the prefix
        mid = (lo + hi + 1) // 2
        if len(connected(ranked[:mid], ranked)) <= top_n:
            lo = mid
        else:
            hi = mid - 1
    return connected(ranked[:lo], ranked)


def find_circuit(
    table: pd.DataFrame,
    top_n: int | None = None,
    threshold: float | None = None,
    method: str = "topn",
    *,
    prune: bool = False,
    model=None,
    clean=None,
    corrupt=None,
    answer=None,
    wrong=None,
    metric: str | None = None,
    target: str | None = None,
    memory_budget: int | None = None,
    setup: Setup | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> Circuit:
    """A set of (src, dst, kind): ``method`` "topn" (the ``top_n`` largest |score|), "threshold"
    (|score| >= ``threshold``) or "acdc" (needs ``model``, ``clean``, ``corrupt``, ``answer`` and
    ``wrong`` as for ``edge_scores``, and ``threshold`` as tau, in the metric's units: receivers
    from the logits back, each edge tried from the smallest |score| up, dropped when the metric
    moves less than tau; one forward pass per edge). ``prune``: keep only the edges on a path from
    an embedding to the logits (``connected``); top-n then counts those, going down the ranking
    as far as at most n of them are connected. ACDC takes ``setup`` as ``edge_scores`` does."""
    if method not in FIND_METHODS:
        raise ConfigError(f"unknown circuit method {method!r}: choose one of {', '.join(FIND_METHODS)}")
    ranked = _ranked(table)
    if method == "topn":
        if top_n is None or isinstance(top_n, bool) or not isinstance(top_n, (int, np.integer)) or top_n < 0:
            raise ConfigError(f"top-n circuits need top_n, a whole number of edges >= 0, got {top_n!r}")
        return _top_connected(ranked, int(top_n)) if prune else set(ranked[: int(top_n)])
    if threshold is None or not np.isfinite(threshold) or threshold < 0:
        raise ConfigError(f"{method} circuits need a threshold >= 0, got {threshold!r}")
    if method == "threshold":
        scores = np.abs(table["score"].to_numpy(dtype=np.float64))
        edges = _edges_of(table)
        kept = {e for e, s in zip(edges, scores) if s >= threshold}
        return connected(kept, edges) if prune else kept
    if model is None or clean is None or corrupt is None or answer is None:
        raise ConfigError("ACDC evaluates the model: pass model=, clean=, corrupt=, answer= (and wrong=)")
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    metric = metric or str(table.attrs.get("metric", "logit_diff"))
    setup = ready(setup, model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=memory_budget)
    return _acdc(setup, table, float(threshold), ctx)


def _acdc(setup: Setup, table: pd.DataFrame, tau: float, ctx: JobContext) -> Circuit:
    graph = setup.engine.graph
    score = {e: abs(float(s)) for e, s in zip(_edges_of(table), table["score"].to_numpy(dtype=np.float64))}
    order: list[Edge] = []
    for site in reversed(graph.sites):  # receivers from the logits back
        sources = [n for s in site.senders for n in s.names]
        for dst, kind in reversed(site.receivers):
            incoming = [(src, dst, kind) for src in sources]
            order += sorted(incoming, key=lambda e: score.get(e, 0.0))
    current = set(graph.index())
    quiet = ctx.quiet()
    m_current = float(evaluate(setup, [frozenset(current)], quiet)[0])
    for done, edge in enumerate(order, 1):
        ctx.check()
        trial = frozenset(current - {edge})
        m_trial = float(evaluate(setup, [trial], quiet)[0])
        if abs(m_trial - m_current) < tau:
            current.discard(edge)
            m_current = m_trial
        ctx.progress(done / len(order), f"ACDC: {done:,} of {len(order):,} edges tried, {len(current):,} kept")
    return current


def save_circuit(circuit, path: str | os.PathLike, **about) -> Path:
    """Write the circuit as JSON (atomically): ``{"format", "version", "edges": [[src, dst, kind]], ...}``
    with ``about`` (model, metric, method, faithfulness, ...) beside the edges."""
    edges = sorted((str(a), str(b), str(c)) for a, b, c in circuit)
    document = {"format": CIRCUIT_FORMAT, "version": CIRCUIT_VERSION, **about, "edges": [list(e) for e in edges]}
    return atomic_write(path, (json.dumps(document, indent=1) + "\n").encode("utf-8"))


def load_circuit(path: str | os.PathLike) -> Circuit:
    """The circuit ``save_circuit`` wrote; a one-line ConfigError for anything else."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"cannot read a circuit from {path}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != CIRCUIT_FORMAT:
        raise ConfigError(f'{path} is not an attndesk circuit (no "format": "{CIRCUIT_FORMAT}")')
    if document.get("version") != CIRCUIT_VERSION:
        raise ConfigError(
            f"{path} is a circuit of version {document.get('version')!r}; this attndesk reads {CIRCUIT_VERSION}"
        )
    edges = document.get("edges")
    if not isinstance(edges, list) or not all(
        isinstance(e, list) and len(e) == 3 and all(isinstance(x, str) for x in e) for e in edges
    ):
        raise ConfigError(f'{path}: "edges" must be a list of [src, dst, kind] strings')
    return {(a, b, c) for a, b, c in edges}


__all__ = [
    "CIRCUIT_FORMAT",
    "FIND_METHODS",
    "Circuit",
    "connected",
    "default_sizes",
    "evaluate",
    "faithfulness",
    "faithfulness_curve",
    "find_circuit",
    "load_circuit",
    "save_circuit",
]
