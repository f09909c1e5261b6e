"""Activation patching: run the corrupted prompt with one activation taken from the clean run, and
see how much of the clean behaviour comes back.

Sites (``SITES``), each per layer of one part ("self"; an encoder-decoder also "decoder", "cross"):

- ``head``: a head's slice of the input of the attention output projection (its context, at
  every position at once) -> [layers, heads];
- ``head_position``: the same at one position -> [layers, heads, positions];
- ``resid``: the residual stream entering the layer, per position -> [layers, positions];
- ``attn`` / ``mlp``: the attention block's / MLP's output, per position -> [layers, positions].

The effect is normalised: (m_patched - m_corrupt) / (m_clean - m_corrupt), 1 = the clean metric
fully restored, 0 = no change; the raw effect m_patched - m_corrupt is kept beside it. The metric
is computed in float64 from the float32 logits, and every pass (the clean and corrupted runs'
included) holds at least ``MIN_ROWS`` rows, padded with unpatched copies (a decoder's pass starts
from ``MIN_ROWS`` of them), so the effects do not depend on how many copies share a pass (see
docs/interp.md). A gap m_clean - m_corrupt under ``GAP_SHARE`` of the metric's scale
(``metric_scale``) sets ``PatchingReport.warning``: normalising by it amplifies small changes into
large effects that mean little.

Runs are batched: a batch of copies of the corrupted prompt, each copy with its own site patched
by a forward (pre-)hook that selects, per copy, the clean value (``torch.where`` over a boolean
mask), so every head of a 12-layer model patches in a few forward passes; the batch size is set
so one pass fits the memory budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from attndesk.errors import ConfigError
from attndesk.jobs import Cancel, JobContext, ProgressFn, job_context
from attndesk.models.loader import LoadedModel
from attndesk.models.token_text import id_texts
from attndesk.system.free_memory import format_bytes
from attndesk.system.threads import AdaptiveThreads, torch_threads

from .anatomy import LayerParts, hidden_size, intermediate_size, layer_parts, vocabulary
from .inputs import Metric, Prompt, chunks, hooks, last_logits, make_metric, prompt_pair, resolve_budget

SITES = ("head", "head_position", "resid", "attn", "mlp")
_AXES = {
    "head": ("layer", "head"),
    "head_position": ("layer", "head", "position"),
    "resid": ("layer", "position"),
    "attn": ("layer", "position"),
    "mlp": ("layer", "position"),
}


# A pass of fewer rows can take other matrix kernels (matrix-vector, small-M paths) that round
# differently; padding every pass to this many rows keeps a copy's result the same at any batch size
# (docs/interp.md: the processors measured). The memory budget must hold a pass of this many rows
# beside one copy.
MIN_ROWS = 4
# Normalised effects are flagged when |m_clean - m_corrupt| is under this share of the metric's scale.
GAP_SHARE = 0.01


@dataclass
class PatchingResult:
    """One site's patching: ``effects`` normalised, ``values`` the patched runs' metric and
    ``raw_effects`` = values - m_corrupt (what ``effects`` divides by the gap), shaped by ``axes``."""

    site: str
    part: str
    effects: np.ndarray
    values: np.ndarray
    axes: tuple[str, ...]
    raw_effects: np.ndarray


@dataclass
class PatchingReport:
    """Everything one patching run measured; ``results[site]`` per site asked for."""

    model_name: str
    part: str
    metric: str
    answer: str
    wrong: str | None
    clean_metric: float
    corrupt_metric: float
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    positions: list[str]  # labels of the patched part's positions (the decoder's for decoder/cross)
    results: dict[str, PatchingResult] = field(default_factory=dict)
    forward_passes: int = 0
    batch_rows: int = 0
    pass_bytes: int = 0  # estimated peak of the largest pass, RESERVE included
    budget: int = 0
    metric_scale: float = 0.0  # what the gap is compared with (``metric_scale``)
    warning: str | None = None  # set when the gap is too small for normalised effects to mean much

    def effects(self, site: str = "head") -> np.ndarray:
        return self.results[site].effects


def _where(parts: LayerParts, kind: str) -> tuple[nn.Module, str]:
    """(the module, "pre" or "post") a site kind is read and written at."""
    if kind == "z":
        return parts.out_proj, "pre"
    if kind == "resid":
        return parts.block, "pre"
    if kind == "attn":
        return parts.attention, "post"
    if parts.mlp is None:
        raise ConfigError(f"no MLP module found in {parts.part} layer {parts.layer}: MLP outputs cannot be patched")
    return parts.mlp, "post"


def _kind(site: str) -> str:
    return {"head": "z", "head_position": "z"}.get(site, site)


def _rows(site: str, layers: int, heads: int, length: int) -> list[tuple[int, int | None, int | None]]:
    """(layer, head or None, position or None) per patched copy, in the order of the result's axes."""
    if site == "head":
        return [(n, h, None) for n in range(layers) for h in range(heads)]
    if site == "head_position":
        return [(n, h, p) for n in range(layers) for h in range(heads) for p in range(length)]
    return [(n, None, p) for n in range(layers) for p in range(length)]


def _capture(model: LoadedModel, layers: list[LayerParts], kinds: set[str], clean: Prompt) -> dict:
    """The clean run's value at every (kind, layer) asked for: [1, L, F] tensors."""
    store: dict = {}
    pre: dict = {}
    post: dict = {}
    for parts in layers:
        for kind in kinds:
            module, when = _where(parts, kind)
            key = (kind, parts.layer)

            def keep(m, x, key=key):
                store[key] = x.detach().reshape(1, -1, x.shape[-1]).clone()  # OPT's MLP sees [B*L, E]

            (pre if when == "pre" else post)[module] = _chain((pre if when == "pre" else post).get(module), keep)
    with torch.inference_mode(), hooks(pre, post, lock=model._lock):
        last_logits(model, clean.ids, clean.decoder_ids)
    return store


def _chain(first, second):
    """Two hooks on one module (GPT-2's c_proj is a site of one kind only, but be safe)."""
    if first is None:
        return second

    def both(m, x):
        out = first(m, x)
        out2 = second(m, x if out is None else out)
        return out2 if out2 is not None else out

    return both


def _patch_hooks(
    layers: list[LayerParts], kind: str, rows: list, clean_values: dict, grow: bool, pad: int
) -> tuple[dict, dict]:
    """Hooks that write the clean values into the copies of this chunk: copy b gets its site's
    slice (a head's features, or all features) at its position (or at all).

    ``grow`` (decoders): the pass starts from one unpatched copy, the first block makes it
    ``MIN_ROWS`` as it starts, and each layer's block appends, as it starts, a copy of row 0 for
    every site of that layer, so the layers below a site run on those rows only, not once per copy
    (and on as many rows in every pass: their rounding is the same whatever the chunk); copy i of
    the chunk is batch row ``MIN_ROWS`` + i. Otherwise copy i is row i and the ``pad`` rows after
    the chunk stay unpatched."""
    pre: dict = {}
    post: dict = {}
    by_layer: dict[int, list[tuple[int, int | None, int | None]]] = {}
    for b, (layer, head, pos) in enumerate(rows):
        by_layer.setdefault(layer, []).append((b, head, pos))
    for layer, items in by_layer.items():
        parts = layers[layer]
        clean = clean_values[(kind, layer)]
        batch = MIN_ROWS + items[-1][0] + 1 if grow else len(rows) + pad
        mask = torch.zeros((batch, *clean.shape[1:]), dtype=torch.bool, device=clean.device)
        d = parts.head_dim
        for b, head, pos in items:
            features = slice(None) if head is None else slice(head * d, (head + 1) * d)
            mask[MIN_ROWS + b if grow else b, slice(None) if pos is None else pos, features] = True
        module, when = _where(parts, kind)

        def patch(m, x, mask=mask, clean=clean):
            return torch.where(mask, clean.to(x.dtype), x.reshape(mask.shape)).reshape(x.shape)

        table = pre if when == "pre" else post
        table[module] = _chain(table.get(module), patch)
    if grow:
        for layer in {0, *by_layer}:
            count = len(by_layer.get(layer, ())) + (MIN_ROWS - 1 if layer == 0 else 0)
            block = layers[layer].block  # the copies first, then a patch of the block's input
            pre[block] = _chain(_grow(count), pre[block]) if block in pre else _grow(count)
    return pre, post


def _grow(count: int):
    def grow(m, x):
        return torch.cat([x, x[:1].expand(count, *x.shape[1:])])

    return grow


def _run_chunk(
    model: LoadedModel,
    layers: list[LayerParts],
    site: str,
    chunk: list,
    clean_values: dict,
    corrupt: Prompt,
) -> torch.Tensor:
    """[len(chunk), V] last logits of the corrupted prompt, copy i with chunk[i]'s site patched; a
    decoder's pass starts from ``MIN_ROWS`` unpatched copies, an encoder-decoder's is padded with
    unpatched copies to ``MIN_ROWS`` rows."""
    grow = model.family == "decoder"
    pad = 0 if grow else max(0, MIN_ROWS - len(chunk))
    pre, post = _patch_hooks(layers, _kind(site), chunk, clean_values, grow, pad)
    with torch.inference_mode(), hooks(pre, post, lock=model._lock):
        if grow:
            return last_logits(model, corrupt.ids)[MIN_ROWS:]
        return last_logits(model, corrupt.ids.expand(len(chunk) + pad, -1), corrupt.decoder_ids)[: len(chunk)]


def pass_bytes(model: LoadedModel, rows: int, length: int, decoder_length: int = 0) -> int:
    """Estimated peak bytes of one batched inference pass of ``rows`` copies: a layer's live
    activations (hidden states, MLP width, Q/K/V, scores and weights), the patch masks, the logits."""
    e, f, h = hidden_size(model), intermediate_size(model), model.num_heads

    # a block's widest moment: residual, norm, Q/K/V, context; the MLP's input to its activation
    # and that activation's temporaries (GPT-2's tanh GELU keeps ~5 of width f); scores, weights;
    # the patch's bool mask
    def per_seq(n: int) -> int:
        return n * (12 * e + 6 * f) * 4 + 4 * h * n * n * 4 + n * e

    per_row = per_seq(length) + (per_seq(decoder_length) + 2 * h * decoder_length * length * 4 if decoder_length else 0)
    return rows * (per_row + 2 * vocabulary(model) * 4)


def pass_work(model: LoadedModel, rows: int, length: int) -> float:
    """FLOPs of one of a pass's typical ops: a [hidden x hidden] projection of every copy's tokens
    (what the thread count is chosen by)."""
    e = hidden_size(model)
    return 2.0 * rows * length * e * e


# What a patching run allocates whatever its batch (torch's and the C library's working memory,
# the clean run's values, the unpatched copy): the intercept of peak memory over copies per pass
# that benchmarks/bench_interp.py measures (docs/benchmarks.md), with room to spare.
RESERVE = 32 * 2**20


def rows_for_budget(model: LoadedModel, length: int, decoder_length: int, budget: int) -> int:
    """Copies one pass may hold within ``budget`` bytes (0: not even one), beside the ``MIN_ROWS``
    unpatched copies a decoder's pass starts from (an encoder-decoder's pads to as many)."""
    one = pass_bytes(model, 1, length, decoder_length)
    return max(0, (budget - RESERVE) // one - MIN_ROWS)


def budget_for_rows(model: LoadedModel, rows: int, length: int, decoder_length: int = 0) -> int:
    """The smallest budget under which a pass holds ``rows`` copies."""
    return RESERVE + pass_bytes(model, rows + MIN_ROWS, length, decoder_length)


def _batch_rows(model: LoadedModel, clean: Prompt, budget: int) -> int:
    dec = 0 if clean.decoder_ids is None else int(clean.decoder_ids.shape[1])
    rows = rows_for_budget(model, clean.length, dec, budget)
    if rows < 1:
        need = budget_for_rows(model, 1, clean.length, dec)
        raise ConfigError(
            f"one patched forward pass of {clean.length} tokens ({MIN_ROWS + 1} rows, the fewest a pass holds) needs "
            f"about {format_bytes(need)}, over the memory budget of {format_bytes(budget)}: shorten the prompts "
            "or raise the budget"
        )
    return rows


def _part_layers(model: LoadedModel, part: str | None) -> tuple[str, list[LayerParts]]:
    table = layer_parts(model)
    if part is None:
        part = "self"
    if part not in table:
        raise ConfigError(f"{model.name} has no {part!r} attention; its parts are {', '.join(table)}")
    return part, table[part]


def _positions(clean: Prompt, part: str) -> list[str]:
    return list(clean.decoder_tokens) if part in ("decoder", "cross") else list(clean.tokens)


def _check_sites(sites: tuple[str, ...]) -> None:
    bad = [s for s in sites if s not in SITES]
    if bad or not sites:
        raise ConfigError(f"unknown patching site {bad[0] if bad else '(none)'!r}: choose from {', '.join(SITES)}")


def _new_report(
    model: LoadedModel,
    part: str,
    metric: str,
    scorer,
    values: tuple[float, float, float],
    prompts: tuple,
    budget: int,
) -> PatchingReport:
    """The report before any patch: the model, the metric's clean and corrupt ``values`` (and its
    scale), the prompts' tokens and positions, the memory budget."""
    m_clean, m_corrupt, scale = values
    clean_p, corrupt_p = prompts
    return PatchingReport(
        model.name,
        part,
        metric,
        _label(model, scorer.answer),
        None if scorer.wrong is None else _label(model, scorer.wrong),
        m_clean,
        m_corrupt,
        list(clean_p.tokens),
        list(corrupt_p.tokens),
        _positions(clean_p, part),
        budget=budget,
        metric_scale=scale,
        warning=gap_warning(metric, m_clean, m_corrupt, scale),
    )


def activation_patching(
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
    memory_budget: int | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> PatchingReport:
    """Patch every site of ``sites`` from the clean run into the corrupted one (see the module
    docstring); ``ConfigError`` for prompts of unequal length, a multi-token answer, an encoder..."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    _check_sites(sites)
    scorer = make_metric(model, metric, answer, wrong)
    clean_p, corrupt_p = prompt_pair(model, clean, corrupt, target)
    part, layers = _part_layers(model, part)
    budget = resolve_budget(memory_budget)
    batch = _batch_rows(model, clean_p, budget)
    m_clean, m_corrupt, scorer, scale = _endpoints(model, scorer, clean_p, corrupt_p)
    if abs(m_clean - m_corrupt) < 1e-9:
        raise ConfigError(
            f"the clean and corrupted prompts give the same {metric} ({m_clean:.6g}): "
            "there is no difference for a patch to restore"
        )
    report = _new_report(model, part, metric, scorer, (m_clean, m_corrupt, scale), (clean_p, corrupt_p), budget)
    clean_values = _capture(model, layers, {_kind(s) for s in sites}, clean_p)
    length = int(next(iter(clean_values.values())).shape[1])
    plan = [(s, _rows(s, len(layers), model.num_heads, length)) for s in sites]
    total, done = sum(len(r) for _, r in plan), 0
    threads = AdaptiveThreads(pass_work(model, min(batch, max(len(r) for _, r in plan)), length))
    for site, rows in plan:
        values = np.empty(len(rows), dtype=np.float64)
        for span in chunks(len(rows), batch):
            ctx.check()
            chunk = [rows[i] for i in span]
            with torch_threads(threads.recheck()):  # chosen again for the load before each pass
                logits = _run_chunk(model, layers, site, chunk, clean_values, corrupt_p)
            values[span.start : span.stop] = scorer(logits).double().cpu().numpy()
            report.forward_passes += 1
            done += len(chunk)
            ctx.progress(done / total, f"{site}: {done:,} of {total:,} patched runs")
        shape = tuple({"layer": len(layers), "head": model.num_heads, "position": length}[a] for a in _AXES[site])
        values = values.reshape(shape)
        raw = values - m_corrupt
        report.results[site] = PatchingResult(site, part, raw / (m_clean - m_corrupt), values, _AXES[site], raw)
    report.batch_rows = min(batch, max(len(r) for _, r in plan))
    dec = 0 if clean_p.decoder_ids is None else int(clean_p.decoder_ids.shape[1])
    report.pass_bytes = budget_for_rows(model, report.batch_rows, clean_p.length, dec)
    return report


def _endpoints(
    model: LoadedModel, scorer: Metric, clean: Prompt, corrupt: Prompt
) -> tuple[float, float, Metric, float]:
    """(m_clean, m_corrupt, the metric with KL's reference set to the clean distribution, the
    metric's scale): both prompts in one pass, padded with corrupted copies to ``MIN_ROWS`` rows
    like the patched passes."""
    ids = torch.cat([clean.ids, corrupt.ids.expand(MIN_ROWS - 1, -1)])
    with model._lock, torch.inference_mode():
        logits = last_logits(model, ids, clean.decoder_ids)
    clean_logits, corrupt_logits = logits[:1], logits[1:2]
    if scorer.name == "kl":
        scorer = Metric("kl", scorer.answer, scorer.wrong, torch.log_softmax(clean_logits.double(), -1))
    m_clean, m_corrupt = float(scorer(clean_logits)[0]), float(scorer(corrupt_logits)[0])
    return m_clean, m_corrupt, scorer, metric_scale(scorer.name, clean_logits[0], m_clean, m_corrupt)


def metric_scale(metric: str, clean_logits: torch.Tensor, m_clean: float, m_corrupt: float) -> float:
    """What a clean-corrupt gap of ``metric`` is measured against: for the logit difference, the
    standard deviation of the clean run's logits over the vocabulary (how far apart two tokens'
    logits typically lie); for the answer's probability, the larger of the two probabilities; for
    KL, one nat (a divergence is already in absolute units)."""
    if metric == "logit_diff":
        return float(clean_logits.double().std(correction=0))
    if metric == "prob":
        return max(abs(m_clean), abs(m_corrupt))
    return 1.0


def gap_warning(metric: str, m_clean: float, m_corrupt: float, scale: float) -> str | None:
    """One line when |m_clean - m_corrupt| is under ``GAP_SHARE`` of ``scale``, else None."""
    gap = abs(m_clean - m_corrupt)
    if not gap < GAP_SHARE * scale:
        return None
    return (
        f"the clean and corrupted {metric} differ by only {gap:.3g}, under {GAP_SHARE:.0%} of the metric's "
        f"scale ({scale:.3g}): normalised effects divide by that gap and mean little; read the raw effects "
        "(m_patched - m_corrupt)"
    )


def _label(model: LoadedModel, token: int) -> str:
    return id_texts(model.tokenizer, [token])[0]


def patch_heads(
    model: LoadedModel, clean: str, corrupt: str, answer: str | int, wrong: str | int, **options
) -> np.ndarray:
    """[layers, heads] normalised effects of patching each head's clean context (the slice of the
    output projection's input, every position) into the corrupted run; metric: logit difference."""
    return activation_patching(model, clean, corrupt, answer, wrong, sites=("head",), **options).effects("head")


__all__ = [
    "GAP_SHARE",
    "MIN_ROWS",
    "RESERVE",
    "SITES",
    "PatchingReport",
    "PatchingResult",
    "activation_patching",
    "budget_for_rows",
    "gap_warning",
    "metric_scale",
    "pass_bytes",
    "patch_heads",
    "rows_for_budget",
]
