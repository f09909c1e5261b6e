"""Attribution patching (Nanda 2023; Syed et al. 2023): the first-order estimate of activation
patching, m_patched - m_corrupt ~ (a_clean - a_corrupt) . d m / d a at the corrupted run, for
every site of ``patching.SITES`` from one forward and one backward pass. Normalised like the exact
effects, and compared with them by Spearman's rank correlation (``agreement``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import Cancel, JobContext, ProgressFn, job_context
from attndesk.models.loader import LoadedModel
from attndesk.system.free_memory import format_bytes
from attndesk.system.threads import choose_threads, torch_threads

from .anatomy import LayerParts
from .attribution import gradient_pass_bytes
from .inputs import hooks, last_logits, make_metric, prompt_pair, resolve_budget
from .patching import (
    _AXES,
    SITES,
    PatchingReport,
    _capture,
    _endpoints,
    _kind,
    _part_layers,
    _where,
    gap_warning,
    pass_work,
)


@dataclass
class AttributionPatchingReport:
    """First-order estimates per site (``estimates[site]``, normalised, shaped like the exact
    effects), and, when exact effects were given, Spearman's rank correlation per site."""

    model_name: str
    part: str
    metric: str
    clean_metric: float
    corrupt_metric: float
    estimates: dict[str, np.ndarray] = field(default_factory=dict)
    axes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    agreement: dict[str, float] = field(default_factory=dict)
    warning: str | None = None  # the gap is too small for normalised estimates (``patching.gap_warning``)


def _corrupt_with_grad(
    model: LoadedModel, layers: list[LayerParts], kinds: set[str], corrupt, scorer
) -> tuple[dict, dict]:
    """The corrupted run's values at every (kind, layer) and the metric's gradient there."""
    store: dict = {}
    pre: dict = {}
    post: dict = {}
    for parts in layers:
        for kind in kinds:
            module, when = _where(parts, kind)

            def keep(m, x, key=(kind, parts.layer)):
                store[key] = x

            (pre if when == "pre" else post)[module] = keep
    with torch.enable_grad(), hooks(pre, post, lock=model._lock):
        value = scorer(last_logits(model, corrupt.ids, corrupt.decoder_ids)).sum()
        keys = list(store)
        grads = torch.autograd.grad(value, [store[k] for k in keys], allow_unused=True)
    values = {k: store[k].detach().reshape(1, -1, store[k].shape[-1]) for k in keys}
    gradients = {
        k: (torch.zeros_like(store[k]) if g is None else g).reshape(values[k].shape) for k, g in zip(keys, grads)
    }
    return values, gradients


def _estimate(site: str, layers: list[LayerParts], delta: dict, grad: dict) -> np.ndarray:
    kind = _kind(site)
    rows = []
    for parts in layers:
        product = (delta[(kind, parts.layer)] * grad[(kind, parts.layer)].double())[0]  # [L, F] float64
        if kind == "z":
            per_head = product.reshape(product.shape[0], -1, parts.head_dim).sum(-1)  # [L, H]
            rows.append(per_head.sum(0) if site == "head" else per_head.T)
        else:
            rows.append(product.sum(-1))
    return torch.stack(rows).double().cpu().numpy()


def attribution_patching(
    model: LoadedModel,
    clean: str,
    corrupt: str,
    answer: str | int,
    wrong: str | int | None = None,
    *,
    sites: tuple[str, ...] = ("head",),
    metric: str = "logit_diff",
    part: str | None = None,
    target: str | None = None,
    exact: PatchingReport | None = None,
    memory_budget: int | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> AttributionPatchingReport:
    """First-order patching estimates for ``sites`` (one forward + backward on the corrupted prompt,
    one forward on the clean one); with ``exact`` (``activation_patching``'s report on the same
    inputs) the rank correlation of estimate and exact effect per site."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    bad = [s for s in sites if s not in SITES]
    if bad or not sites:
        raise ConfigError(f"unknown patching site {bad[0] if bad else '(none)'!r}: choose from {', '.join(SITES)}")
    scorer = make_metric(model, metric, answer, wrong)
    clean_p, corrupt_p = prompt_pair(model, clean, corrupt, target)
    part, layers = _part_layers(model, part)
    budget = resolve_budget(memory_budget)
    need = gradient_pass_bytes(
        model, 1, clean_p.length + (0 if clean_p.decoder_ids is None else clean_p.decoder_ids.shape[1])
    )
    if need > budget:
        raise ConfigError(
            f"a gradient pass over {clean_p.length} tokens needs about {format_bytes(need)}, over the memory "
            f"budget of {format_bytes(budget)}: shorten the prompts or raise the budget"
        )
    m_clean, m_corrupt, scorer, scale = _endpoints(model, scorer, clean_p, corrupt_p)
    if abs(m_clean - m_corrupt) < 1e-9:
        raise ConfigError(f"the clean and corrupted prompts give the same {metric}: there is nothing to attribute")
    kinds = {_kind(s) for s in sites}
    ctx.check()
    with torch_threads(choose_threads(pass_work(model, 1, clean_p.length))):
        clean_values = _capture(model, layers, kinds, clean_p)
        ctx.progress(0.4, "attribution patching: clean run")
        ctx.check()
        corrupt_values, grads = _corrupt_with_grad(model, layers, kinds, corrupt_p, scorer)
    # float64: the clean and corrupted activations are close where a site matters little
    delta = {k: clean_values[k].double() - corrupt_values[k].double() for k in clean_values}
    report = AttributionPatchingReport(
        model.name, part, metric, m_clean, m_corrupt, warning=gap_warning(metric, m_clean, m_corrupt, scale)
    )
    for site in sites:
        report.estimates[site] = _estimate(site, layers, delta, grads) / (m_clean - m_corrupt)
        report.axes[site] = _AXES[site]
        if exact is not None and site in exact.results:
            report.agreement[site] = rank_correlation(report.estimates[site], exact.results[site].effects)
    ctx.progress(1.0, "attribution patching: done")
    return report


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two arrays of the same shape (scipy's)."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} and {b.shape}")
    return float(spearmanr(a, b).statistic)


__all__ = ["AttributionPatchingReport", "attribution_patching", "rank_correlation"]
