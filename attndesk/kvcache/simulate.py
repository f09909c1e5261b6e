"""``simulate``: the exact run of a model whose KV cache a policy compresses, beside the full run.

Eviction is a mask over keys per layer, K/V head and query row, so the compressed model's output
is computed, not estimated: every row of the compressed run is one forward pass with the policy's
keep mask AND-ed into each attention layer's mask (``model.KVModel.forward``). The run with a
budget of every token uses the causal mask and equals the full run bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context

from .base import Policy, View, options_dict, resolve_budget
from .model import KVModel, Pass, kv_model
from .model import causal_keep as causal
from .registry import POLICIES


@dataclass(eq=False)
class KVRun:
    """One compressed run beside the full run (rows = query positions in reading order: the prompt's,
    then one per decode step).

    ``keep`` bool [layers, KV, rows, keys]: the key is visible to that query row. ``logits`` /
    ``full_logits`` float32 [rows, vocab]. ``kl`` float64 [rows]: KL(full || compressed) in nats.
    ``error`` float64 [layers, H, rows]: each head's attention output (its context, weights @ V) in the
    compressed run against the full run's, as ||c - f|| / ||f||. ``ids`` the tokens the rows read
    (the input, then the tokens generated greedily on the compressed run). ``prompt``: the rows
    before the first decode step. ``budget``: keys per K/V head.
    """

    policy: str
    budget: int
    options: dict[str, Any]
    prompt: int
    generated: int
    ids: np.ndarray
    tokens: list[str]
    keep: np.ndarray
    logits: np.ndarray
    full_logits: np.ndarray
    kl: np.ndarray
    error: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def kept(self) -> np.ndarray:
        """int [layers, KV, rows]: keys visible to each row."""
        return self.keep.sum(-1)

    @property
    def agree(self) -> np.ndarray:
        """bool [rows]: the compressed run's most probable next token is the full run's."""
        return self.logits.argmax(-1) == self.full_logits.argmax(-1)

    @property
    def correct(self) -> np.ndarray:
        """float [rows]: 1.0 where the compressed run's most probable next token is the input's next
        token, 0.0 where not; NaN where the input gives none (the last row, generated rows)."""
        out = np.full(self.rows, np.nan)
        given = self.rows - self.generated - 1  # rows whose next token is the input's
        if given > 0:
            out[:given] = (self.logits[:given].argmax(-1) == self.ids[1 : given + 1]).astype(float)
        return out


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


KL_CHUNK = 256  # rows per float64 block of the KL: [256, V] stays in cache where [N, V] would not


def kl_rows(full: np.ndarray, compressed: np.ndarray, start: int = 0) -> np.ndarray:
    """KL(full || compressed) per row, float64 (0 exactly where the rows are equal); rows before
    ``start`` are given as equal (0) without reading them."""
    out = np.zeros(full.shape[0])
    for lo in range(start, full.shape[0], KL_CHUNK):
        p_log = torch.log_softmax(torch.from_numpy(np.asarray(full[lo : lo + KL_CHUNK], np.float64)), -1)
        q_log = torch.log_softmax(torch.from_numpy(np.asarray(compressed[lo : lo + KL_CHUNK], np.float64)), -1)
        out[lo : lo + KL_CHUNK] = (p_log.exp() * (p_log - q_log)).sum(-1).clamp_min(0.0).numpy()
    return out


def output_error(compressed: list[np.ndarray], full: list[np.ndarray]) -> np.ndarray:
    """[layers, H, rows] float64: ||c - f|| / ||f|| of each head's context row."""
    out = []
    for c, f in zip(compressed, full):
        c64, f64 = np.asarray(c, np.float64), np.asarray(f, np.float64)
        norm = np.linalg.norm(f64, axis=-1)
        out.append(np.linalg.norm(c64 - f64, axis=-1) / np.where(norm > 0, norm, 1.0))
    return np.stack(out)


def first_pruned(keep: np.ndarray) -> int:
    """The first row whose keep row (in any layer or K/V head) is not causal; N where none is."""
    n = keep.shape[-1]
    whole = (keep.sum(-1) == np.arange(1, n + 1)).all((0, 1))  # keep rows never reach past the row
    return int(n if whole.all() else np.argmin(whole))


def compressed_pass(kvm: KVModel, ids: list[int], keep: np.ndarray, full: Pass, *, weights: bool = True) -> Pass:
    """The compressed run over every row (logits [N, V], context [H, N, d_v] per layer, and the
    weights [H, N, N] per layer when ``weights``): the full run's rows up to the first pruned row
    (every row before it saw every key, in every layer, so its hidden states are the full run's),
    the rest computed over the full run's cache with ``keep``'s rows."""
    first = first_pruned(keep)
    if first == len(ids):
        return full
    resume = kvm.cache_after(full, first)
    if resume is None:
        return kvm.forward(ids, keep)
    rest, _ = kvm.extend(ids, keep, resume, weights=weights)
    out = Pass(logits=np.concatenate([full.logits[:first], rest.logits]))
    out.context = [np.concatenate([f[:, :first], c], axis=1) for f, c in zip(full.context, rest.context)]
    if weights:
        out.weights = [np.concatenate([f[:, :first], w], axis=1) for f, w in zip(full.weights, rest.weights)]
    return out


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise ConfigError(f"no KV-cache policy {name!r}; policies: {', '.join(POLICIES)}")
    return POLICIES[name]


def _input_ids(kvm: KVModel, text_or_ids) -> list[int]:
    if isinstance(text_or_ids, str):
        return kvm.encode(text_or_ids)
    ids = [int(i) for i in np.asarray(text_or_ids).reshape(-1)]
    if not ids:
        raise ConfigError("the input has no tokens")
    bad = [i for i in ids if not 0 <= i < kvm.vocab]
    if bad:
        raise ConfigError(f"token id {bad[0]} is outside the model's vocabulary 0..{kvm.vocab - 1}")
    return ids


def simulate(
    model,
    text_or_ids,
    policy: str = "streaming",
    budget: int | float = 64,
    *,
    generate: int = 0,
    prefill: int | None = None,
    ctx: JobContext | None = None,
    **options,
) -> KVRun:
    """Run ``text_or_ids`` through ``model`` with ``policy`` keeping ``budget`` keys per K/V head, and
    the full run beside it (``KVRun``).

    ``model``: a pretrained decoder (``load_pretrained``) or a trained toy model (``load_trained``,
    a preset). ``budget``: a token count, or a ratio in (0, 1] of the prompt. ``generate``: decode
    steps after the input, greedy on the compressed run. ``prefill``: the prompt's length when the
    input's later tokens are read as decode steps (teacher forcing; default: the whole input is the
    prompt). ``options``: the policy's own (``POLICIES[name].option_fields()``); one it does not
    take is refused. ``ctx``: progress per row and cancellation.
    """
    return _simulate(model, text_or_ids, policy, budget, generate, prefill, ctx, options, weights=False)[0]


def simulate_passes(
    model,
    text_or_ids,
    policy: str = "streaming",
    budget: int | float = 64,
    *,
    generate: int = 0,
    prefill: int | None = None,
    ctx: JobContext | None = None,
    **options,
) -> tuple[KVRun, Pass, Pass]:
    """``simulate``'s run and its passes over every row (the compressed run's, the full run's), for a
    caller that draws their weights without running them again."""
    return _simulate(model, text_or_ids, policy, budget, generate, prefill, ctx, options, weights=True)


def _simulate(
    model,
    text_or_ids,
    policy: str,
    budget: int | float,
    generate: int,
    prefill: int | None,
    ctx: JobContext | None,
    options: dict[str, Any],
    *,
    weights: bool,
) -> tuple[KVRun, Pass, Pass]:
    ctx = job_context(ctx)
    kvm, pol, opts, ids, prompt, keys = prepare(model, text_or_ids, policy, budget, generate, prefill, options)
    given = len(ids)
    total = given + generate
    layers, kv = kvm.layers, kvm.kv_heads
    ctx.progress(0.0, "prefill")
    prefill_pass = kvm.causal_pass(ids[:prompt])
    view = View(model=kvm, ids=ids, prompt=prompt, budget=keys, prefill=prefill_pass)
    keep = causal(layers, kv, total)
    start = 0 if pol.kind == "stream" else prompt
    whole = pol.stream_keep(view, given, keys, opts) if pol.kind == "stream" else None
    if whole is not None:  # the stream kind's rule as one mask: its rows read nothing of the model
        keep[:, :, :given, :given] = whole
        start = given
    # the prompt's rows are the prefill's (causal): decode steps go on from its cache, from the last
    # prompt row (the first the adaptive kind reads)
    stepper = kvm.stepper(None, 0) if pol.kind == "stream" else kvm.stepper(prefill_pass, prompt - 1)
    full_input = kvm.causal_pass(ids) if pol.kind == "oracle" else None
    for t in range(start, total):
        ctx.check()
        if t >= 1 and t >= prompt and (pol.kind == "adaptive" or t >= len(ids)):
            last_logits, view.rows[t - 1] = stepper.row(ids, t - 1, keep)  # row t - 1 of the compressed run
            if t >= len(ids):
                ids.append(int(last_logits.argmax()))
                view.ids = ids
        keep[:, :, t, : t + 1] = _row(pol, view, keep, t, keys, opts, full_input)
        keep[:, :, t, t + 1 :] = False
        ctx.progress((t + 1 - start) / max(1, total - start), f"row {t + 1} of {total}")
    full = kvm.causal_pass(ids)
    compressed = compressed_pass(kvm, ids, keep, full, weights=weights)
    first = first_pruned(keep)  # the rows before it are the full run's: KL 0
    ctx.progress(1.0, "done")
    run = KVRun(
        policy=pol.name,
        budget=keys,
        options=options_dict(opts),
        prompt=prompt,
        generated=generate,
        ids=np.asarray(ids, np.int64),
        tokens=kvm.token_texts(ids),
        keep=keep,
        logits=compressed.logits,
        full_logits=full.logits,
        kl=kl_rows(full.logits, compressed.logits, first),
        error=output_error(compressed.context, full.context),
        extra=dict(view.cache.get("extra", {})),
    )
    return run, compressed, full


def prepare(model, text_or_ids, policy: str, budget, generate: int, prefill: int | None, options: dict):
    """Every check of ``simulate`` before its first forward pass (the CLI runs it for every job first):
    (adapter, policy, options, ids, prompt length, budget in keys); ConfigError in one line."""
    kvm = kv_model(model)
    pol = get_policy(policy)
    opts = pol.parse(options)
    ids = _input_ids(kvm, text_or_ids)
    if isinstance(generate, bool) or not isinstance(generate, int) or generate < 0:
        raise ConfigError(f"generate is a number of decode steps (0 or more), got {generate!r}")
    given = len(ids)
    prompt = given if prefill is None else int(prefill)
    if not 1 <= prompt <= given:
        raise ConfigError(f"prefill is the prompt's length, 1 to {given} tokens, got {prefill}")
    if kvm.max_tokens is not None and given + generate > kvm.max_tokens:
        raise ConfigError(f"{given} tokens + {generate} generated exceed the model's {kvm.max_tokens} positions")
    keys = resolve_budget(budget, prompt)
    pol.check(View(model=kvm, ids=ids, prompt=prompt, budget=keys, prefill=None), keys, opts)  # type: ignore[arg-type]
    return kvm, pol, opts, ids, prompt, keys


def _row(pol: Policy, view: View, keep: np.ndarray, t: int, budget: int, opts, full_input) -> np.ndarray:
    """bool [layers, KV, t + 1]: the keys row t sees."""
    layers, kv = keep.shape[:2]
    if pol.kind == "prefill":
        p = view.prompt
        row = np.zeros((layers, kv, t + 1), bool)
        generated = t - p + 1
        row[..., :p] = pol.prefill_keep(view, min(p, budget - generated), opts)
        row[..., max(p, t + 1 - budget) : t + 1] = True
        return row
    if pol.kind == "oracle":
        if t < full_input.logits.shape[0]:
            weights = full_input.weights
        else:  # a generated row: the full run over the tokens so far
            weights = view.model.causal_pass(view.ids[: t + 1]).weights
        row_weights = np.stack([w[:, t, : t + 1] for w in weights])  # [layers, H, t + 1]
        scores = row_weights.reshape(layers, kv, -1, t + 1).astype(np.float64).sum(2)
        return pol.allocate(view, scores, np.ones(scores.shape, bool), budget, None, opts)
    candidates = keep[:, :, t - 1, : t + 1].copy() if t > 0 else np.ones((layers, kv, 1), bool)
    candidates[..., t] = True
    if (candidates.sum(-1) <= budget).all():
        return candidates
    scores = pol.row_scores(view, t, opts)
    protected = pol.row_protected(view, t, budget, opts)
    return pol.allocate(view, scores, candidates, budget, protected, opts)


__all__ = [
    "KVRun",
    "causal",
    "compressed_pass",
    "first_pruned",
    "get_policy",
    "kl_rows",
    "output_error",
    "simulate",
    "simulate_passes",
]
