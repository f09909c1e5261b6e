"""Edge scores and path patching on the edge graph (``graph``).

``edge_scores`` scores every edge by how much the metric moves when that edge alone carries its
sender's clean term into the corrupted run (clean-into-corrupt; scores are raw metric changes,
m_patched - m_corrupt, averaged over the prompt pairs):

- ``exact``: that patched run itself, batched many edges to a pass (the oracle);
- ``eap``: the first-order estimate (clean_s - corrupt_s) . dm/dx_r from one forward and one
  backward pass of the corrupted run, x_r the receiver's input before its norm;
- ``eap-ig``: the same with the gradient averaged over ``steps`` Gauss-Legendre points of the
  corrupt-to-clean path: of the inputs' embeddings (``ig="inputs"``) or of every receiver's input
  (``ig="activations"``: each receiver reads corrupt + alpha (clean - corrupt) of every sender,
  the gradient passing through as without the patch).

``path_patching`` patches the other way round, as path patching is defined: the clean run with
one sender head's term in one receiver's q, k or v input taken from the corrupted run, every other
term of every input frozen at its clean value; the receiver's changed output then flows on.
Metrics are computed in float64 from float32 logits; every pass holds at least ``MIN_ROWS`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import Cancel, JobContext, ProgressFn, job_context
from attndesk.system.threads import AdaptiveThreads, torch_threads

from .graph import Engine, Pairs, Pass, Values, budget_rows, make_pairs, metric_rows
from .inputs import METRICS, chunks, resolve_budget
from .patching import MIN_ROWS, RESERVE

if TYPE_CHECKING:  # annotations only: pandas is imported where a table is built
    import pandas as pd

METHODS = ("exact", "eap", "eap-ig")
IG_VARIANTS = ("inputs", "activations")
COLUMNS = ("src", "dst", "kind", "score")


@dataclass
class Setup:
    """One question made ready: the engine, the pairs, the clean and corrupted runs' values and metrics."""

    engine: Engine
    pairs: Pairs
    metric: str
    values: Values
    m_clean: torch.Tensor  # [P] float64
    m_corrupt: torch.Tensor
    reference: torch.Tensor | None  # [P, V] clean log-probabilities (KL)
    budget: int


def _check(metric: str) -> None:
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}: choose one of {', '.join(METRICS)}")


def prepare(
    model, clean, corrupt, answer, wrong, metric: str, *, target: str | None, memory_budget: int | None
) -> Setup:
    """Check the inputs, then run the clean and corrupted prompts once, keeping every sender's value."""
    _check(metric)
    engine = Engine(model)
    pairs = make_pairs(model, clean, corrupt, answer, wrong, metric, target)
    budget = resolve_budget(memory_budget)
    rows = budget_rows(engine, pairs, budget, 1, False, RESERVE)
    count = pairs.count
    ids = torch.cat([pairs.clean, pairs.corrupt])
    dec = None if pairs.decoder is None else torch.cat([pairs.decoder, pairs.decoder])
    kept: list[dict[str, torch.Tensor]] = []
    logits = []
    threads = AdaptiveThreads(2.0 * min(rows, 2 * count) * ids.shape[1] * engine.graph.dims["embed"] ** 2)
    for span in chunks(2 * count, max(MIN_ROWS, rows)):
        part = _padded(ids[span.start : span.stop])
        part_dec = None if dec is None else _padded(dec[span.start : span.stop])
        with torch_threads(threads.recheck()):
            running, out = engine.capture(part, part_dec)
        kept.append({k: v[: len(span)] for k, v in running.items()})
        logits.append(out[: len(span)])
    every = {k: torch.cat([c[k] for c in kept]) for k in kept[0]}
    all_logits = torch.cat(logits)
    values = Values({k: v[:count] for k, v in every.items()}, {k: v[count:] for k, v in every.items()})
    reference = torch.log_softmax(all_logits[:count].double(), -1) if metric == "kl" else None
    index = torch.arange(count)
    m_clean = metric_rows(metric, all_logits[:count], pairs, index, reference)
    m_corrupt = metric_rows(metric, all_logits[count:], pairs, index, reference)
    return Setup(engine, pairs, metric, values, m_clean, m_corrupt, reference, budget)


def ready(
    setup: Setup | None,
    model,
    clean,
    corrupt,
    answer,
    wrong,
    metric: str,
    *,
    target: str | None,
    memory_budget: int | None,
) -> Setup:
    """``setup`` when a job prepared its question once (``prepare``) for several steps, after checking
    it is of this model and metric; else the question prepared now."""
    if setup is None:
        return prepare(model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=memory_budget)
    if setup.engine.model is not model:
        raise ConfigError("the prepared setup is of another model: prepare it with this one")
    if setup.metric != metric:
        raise ConfigError(f"the prepared setup measures {setup.metric}, not {metric}: prepare it with {metric}")
    return setup


def _padded(ids: torch.Tensor) -> torch.Tensor:
    """``ids`` with copies of its last row appended up to ``MIN_ROWS`` rows (so a pass's kernels
    do not depend on how many rows it holds)."""
    pad = max(0, MIN_ROWS - ids.shape[0])
    return torch.cat([ids, ids[-1:].expand(pad, -1)]) if pad else ids


RowSpec = tuple[int, int, int] | dict[int, torch.Tensor] | None  # one edge, per-site [R, S] coefficients, or none


def run_rows(
    setup: Setup,
    specs: list[tuple[int, RowSpec]],
    *,
    base: str,
    alpha: float,
    ctx: JobContext,
    label: str,
    pairs_per_row: int = 1,
) -> np.ndarray:
    """The metric of each row (pair, spec) on the ``base`` prompts ("clean" or "corrupt") with its
    coefficients applied (targets at ``alpha``), batched within the budget."""
    engine, pairs = setup.engine, setup.pairs
    rows = max(1, budget_rows(engine, pairs, setup.budget, pairs_per_row, False, RESERVE))
    ids_all = pairs.clean if base == "clean" else pairs.corrupt
    out = np.empty(len(specs), dtype=np.float64)
    sites = engine.graph.sites
    length = int(ids_all.shape[1])
    threads = AdaptiveThreads(2.0 * min(rows, len(specs)) * length * engine.graph.dims["embed"] ** 2)
    for span in chunks(len(specs), rows):
        ctx.check()
        chunk = specs[span.start : span.stop]
        size = max(MIN_ROWS, len(chunk))
        pair = torch.zeros(size, dtype=torch.long)
        pair[: len(chunk)] = torch.tensor([p for p, _ in chunk])
        coef: dict[str, torch.Tensor] = {}
        for b, (_, spec) in enumerate(chunk):
            if spec is None:
                continue
            if isinstance(spec, tuple):
                i, r, c = spec
                site = sites[i]
                if site.key not in coef:
                    coef[site.key] = torch.zeros((size, len(site.receivers), site.width), dtype=torch.bool)
                coef[site.key][b, r, c] = True
            else:
                for i, matrix in spec.items():
                    site = sites[i]
                    if site.key not in coef:
                        coef[site.key] = torch.zeros((size, len(site.receivers), site.width), dtype=torch.bool)
                    coef[site.key][b] = matrix
        pas = Pass(engine.graph, setup.values, pair, torch.full((size,), float(alpha)), coef)
        dec = None if pairs.decoder is None else pairs.decoder[pair]
        with torch.no_grad(), torch_threads(threads.recheck()):
            logits = engine.run(ids_all[pair], dec, pas)
        m = metric_rows(setup.metric, logits[: len(chunk)], pairs, pair[: len(chunk)], setup.reference)
        out[span.start : span.stop] = m.cpu().numpy()
        ctx.progress(span.stop / len(specs), f"{label}: {span.stop:,} of {len(specs):,} runs")
    return out


def _exact(setup: Setup, ctx: JobContext) -> np.ndarray:
    index = setup.engine.graph.index()
    edges = list(index.values())
    pairs = setup.pairs.count
    specs: list[tuple[int, RowSpec]] = [(p, e) for e in edges for p in range(pairs)]
    values = run_rows(setup, specs, base="corrupt", alpha=1.0, ctx=ctx, label="exact edge patching")
    raw = values.reshape(len(edges), pairs) - setup.m_corrupt.numpy()[None, :]
    return raw.mean(axis=1)


def _sender_diffs(setup: Setup, site_senders) -> torch.Tensor:
    """[P, S, T, E] clean - corrupt term of each sender a site reads."""
    parts = []
    for block in site_senders:
        clean, corrupt = setup.values.clean[block.key].double(), setup.values.corrupt[block.key].double()
        diff = clean - corrupt
        if block.heads:
            h, d, _ = block.weight.shape
            diff = diff.reshape(*diff.shape[:2], h, d)
            parts.append(torch.einsum("pthd,hde->phte", diff, block.weight.double()))
        else:
            parts.append(diff[:, None])
    return torch.cat(parts, dim=1)


def _gradients(setup: Setup, *, steps: int, mode: str, ctx: JobContext, label: str) -> dict[str, torch.Tensor]:
    """site key -> [P, R, T, E] float64: the metric's gradient at each receiver input, averaged over
    the pairs' integration points (``mode`` "eap": the corrupted run alone)."""
    engine, pairs = setup.engine, setup.pairs
    if mode == "eap":
        alphas, weights = np.zeros(1), np.ones(1)
    else:
        nodes, w = np.polynomial.legendre.leggauss(steps)
        alphas, weights = 0.5 * (nodes + 1.0), 0.5 * w
    width = max(len(s.receivers) for s in engine.graph.sites)
    rows = max(1, budget_rows(engine, pairs, setup.budget, width, True, RESERVE))
    specs = [(p, k) for p in range(pairs.count) for k in range(len(alphas))]
    totals: dict[str, torch.Tensor] = {}
    length = int(pairs.clean.shape[1])
    threads = AdaptiveThreads(2.0 * min(rows, len(specs)) * length * width * engine.graph.dims["embed"] ** 2)
    for span in chunks(len(specs), rows):
        ctx.check()
        chunk = specs[span.start : span.stop]
        size = max(MIN_ROWS, len(chunk))
        pair = torch.zeros(size, dtype=torch.long)
        pair[: len(chunk)] = torch.tensor([p for p, _ in chunk])
        alpha = torch.zeros(size)
        alpha[: len(chunk)] = torch.tensor([float(alphas[k]) for _, k in chunk])
        weight = torch.zeros(size, dtype=torch.float64)
        weight[: len(chunk)] = torch.tensor([float(weights[k]) for _, k in chunk], dtype=torch.float64)
        coef = None
        if mode == "activations":
            coef = {
                s.key: torch.ones((size, len(s.receivers), s.width), dtype=torch.bool)
                for s in engine.graph.sites
                if s.width
            }
        pas = Pass(
            engine.graph,
            setup.values,
            pair,
            alpha,
            coef,
            grad=True,
            detach=True,
            embed_alpha=alpha if mode == "inputs" else None,
        )
        dec = None if pairs.decoder is None else pairs.decoder[pair]
        with torch.enable_grad(), torch_threads(threads.recheck()):
            logits = engine.run(pairs.corrupt[pair], dec, pas)
            m = metric_rows(setup.metric, logits, pairs, pair, setup.reference)
            keys = list(pas.leaves)
            grads = torch.autograd.grad((m * weight).sum(), [pas.leaves[k] for k in keys], allow_unused=True)
        for key, grad in zip(keys, grads):
            if grad is None:
                continue
            g = grad.detach().double()
            per_pair = torch.zeros((pairs.count, *g.shape[1:]), dtype=torch.float64)
            per_pair.index_add_(0, pair[: len(chunk)], g[: len(chunk)])
            totals[key] = per_pair if key not in totals else totals[key] + per_pair
        ctx.progress(span.stop / len(specs), f"{label}: {span.stop:,} of {len(specs):,} gradient rows")
    return totals


def _estimates(setup: Setup, grads: dict[str, torch.Tensor]) -> np.ndarray:
    """Scores in the order of ``graph.index()``: (clean_s - corrupt_s) . gradient, mean over pairs."""
    out = []
    for site in setup.engine.graph.sites:
        if not site.width:
            continue
        diffs = _sender_diffs(setup, site.senders)  # [P, S, T, E]
        g = grads.get(site.key)
        if g is None:
            scores = torch.zeros((len(site.receivers), site.width), dtype=torch.float64)
        else:
            scores = torch.einsum("pste,prte->rs", diffs, g) / setup.pairs.count
        out.append(scores.reshape(-1).numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _check_scoring(method: str, ig: str, steps) -> None:
    if method not in METHODS:
        raise ConfigError(f"unknown edge-scoring method {method!r}: choose one of {', '.join(METHODS)}")
    if ig not in IG_VARIANTS:
        raise ConfigError(f"unknown EAP-IG variant {ig!r}: choose one of {', '.join(IG_VARIANTS)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1024:
        raise ConfigError(f"EAP-IG takes 1 to 1024 steps, got {steps!r}")


def edge_scores(
    model,
    clean,
    corrupt,
    answer,
    wrong=None,
    *,
    method: str = "exact",
    metric: str = "logit_diff",
    steps: int = 5,
    ig: str = "inputs",
    target: str | None = None,
    memory_budget: int | None = None,
    setup: Setup | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> pd.DataFrame:
    """One row per edge of the model's graph: ``src``, ``dst``, ``kind`` ("q", "k", "v", "mlp",
    "logits") and ``score``, the raw metric change of patching that edge clean-into-corrupt
    (exact) or its estimate (``eap``, ``eap-ig`` with ``steps`` points and ``ig`` "inputs" or
    "activations"), averaged over the prompt pairs.

    ``model``: a ``load_pretrained`` model (GPT-2, LLaMA-shaped, T5) or a trained toy run;
    ``clean`` / ``corrupt``: texts (pretrained) or token id lists (toy), or lists of them (pairs of
    one token length); ``answer`` / ``wrong``: one token (text or id) or one per pair; ``target``:
    an encoder-decoder's decoder text; ``setup``: the same question already prepared (``prepare``),
    so a job of several steps runs the clean and corrupted prompts once. ``table.attrs`` holds the
    method, metric and the clean and corrupted metrics (mean over pairs). Bad input raises a
    one-line ``ConfigError``."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    _check_scoring(method, ig, steps)
    setup = ready(setup, model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=memory_budget)
    edges = list(setup.engine.graph.index())
    if method == "exact":
        scores = _exact(setup, ctx)
    else:
        mode = "eap" if method == "eap" else ig
        scores = _estimates(setup, _gradients(setup, steps=steps, mode=mode, ctx=ctx, label=method))
    import pandas as pd

    table = pd.DataFrame(
        {
            "src": [e[0] for e in edges],
            "dst": [e[1] for e in edges],
            "kind": [e[2] for e in edges],
            "score": np.asarray(scores, dtype=np.float64),
        }
    )
    table.attrs.update(
        method=method if method != "eap-ig" else f"eap-ig/{ig}",
        metric=metric,
        steps=steps if method == "eap-ig" else 0,
        clean_metric=float(setup.m_clean.mean()),
        corrupt_metric=float(setup.m_corrupt.mean()),
        pairs=setup.pairs.count,
    )
    return table


def _path_ends(graph, kind: str, senders, receivers) -> tuple[list[str], list[str]]:
    """(sender heads, receivers with a ``kind`` input): the ones asked for, checked, else all."""
    heads = [n for s in graph.senders if s.heads for n in s.names]
    ends = list(dict.fromkeys(dst for site in graph.sites for dst, k in site.receivers if k == kind))
    rows_names = heads if senders is None else list(senders)
    cols_names = ends if receivers is None else list(receivers)
    for name in rows_names:
        if name not in heads:
            raise ConfigError(f"{name!r} is not a head of this model (heads: {heads[0]} ... {heads[-1]})")
    for name in cols_names:
        if name not in ends:
            raise ConfigError(f"{name!r} has no {kind} input in this model")
    return rows_names, cols_names


def path_patching(
    model,
    clean,
    corrupt,
    answer,
    wrong=None,
    *,
    kind: str = "q",
    metric: str = "logit_diff",
    senders: list[str] | None = None,
    receivers: list[str] | None = None,
    target: str | None = None,
    memory_budget: int | None = None,
    setup: Setup | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> pd.DataFrame:
    """Senders x receivers (a DataFrame: heads as rows, the receivers' ``kind`` inputs as columns):
    m_patched - m_clean of the clean run with that sender head's term in that receiver's input taken
    from the corrupted run, every other term frozen at its clean value (NaN where the sender does
    not come before the receiver). With grouped K/V heads the key and value receivers are the groups.
    ``attrs`` holds the metric, the kind and the clean and corrupted metrics; ``setup`` as for
    ``edge_scores``."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    if kind not in ("q", "k", "v"):
        raise ConfigError(f"path patching ends at a head's q, k or v input, got {kind!r}")
    setup = ready(setup, model, clean, corrupt, answer, wrong, metric, target=target, memory_budget=memory_budget)
    graph = setup.engine.graph
    index = graph.index()
    rows_names, cols_names = _path_ends(graph, kind, senders, receivers)
    cells = [
        (i, j, index[(s, r, kind)])
        for i, s in enumerate(rows_names)
        for j, r in enumerate(cols_names)
        if (s, r, kind) in index
    ]
    pairs = setup.pairs.count
    specs: list[tuple[int, RowSpec]] = [(p, where) for _, _, where in cells for p in range(pairs)]
    values = run_rows(setup, specs, base="clean", alpha=0.0, ctx=ctx, label="path patching")
    raw = (values.reshape(len(cells), pairs) - setup.m_clean.numpy()[None, :]).mean(axis=1) if cells else []
    matrix = np.full((len(rows_names), len(cols_names)), np.nan)
    for (i, j, _), value in zip(cells, raw):
        matrix[i, j] = value
    import pandas as pd

    frame = pd.DataFrame(
        matrix, index=pd.Index(rows_names, name="sender"), columns=pd.Index(cols_names, name="receiver")
    )
    frame.attrs.update(
        kind=kind,
        metric=metric,
        clean_metric=float(setup.m_clean.mean()),
        corrupt_metric=float(setup.m_corrupt.mean()),
    )
    return frame


__all__ = [
    "COLUMNS",
    "IG_VARIANTS",
    "METHODS",
    "Setup",
    "edge_scores",
    "path_patching",
    "prepare",
    "ready",
    "run_rows",
]
