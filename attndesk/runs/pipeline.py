"""``run_attention``: text in, every number a view needs out, one toy-model run.

One run is four steps shared by every kind of run: embed (+ sinusoidal positions), project
(one fused GEMM, + RoPE), attend, finish (merge + output projection). Only the attend step
differs: the reference ``attend`` (intermediates, dropout, other devices, small inputs), the
fast path writing every weight, or, over the memory budget, the fast path streaming its blocks
into a display pyramid with exact values on demand.
"""

from __future__ import annotations

import atexit
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from attndesk.attention.blocked import ExactAttention, FullSink, TeeSink, blocked_attention
from attndesk.attention.fastpath import SpecRule, block_rows_for, fast_attention
from attndesk.attention.kernel import MultiHeadAttention, Projections, SingleHeadAttention, _fast_path_ok, attend
from attndesk.attention.masks import MaskSpec
from attndesk.attention.positional import sinusoidal_encoding
from attndesk.attention.types import Intermediates
from attndesk.checks import text_argument
from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, ProgressFn, job_context
from attndesk.system.devices import resolve_device
from attndesk.system.timing import StageTimer

from .config import AttentionConfig
from .plan import FULL, PYRAMID, RunPlan, check_memory, plan_run
from .pyramid import AttentionPyramid, PyramidBuilder
from .result import OVERVIEW, STAGES, AttentionResult
from .tokenizer import PAD_ID, Tokenized, WordTokenizer


class ToyModel(nn.Module):
    """Embedding table plus one attention layer, initialised from the config's seed."""

    def __init__(self, config: AttentionConfig):
        super().__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=PAD_ID)
        if config.num_heads == 1:
            self.attention: SingleHeadAttention | MultiHeadAttention = SingleHeadAttention(
                config.embed_dim, config.hidden_dim, bias=config.bias
            )
        else:
            self.attention = MultiHeadAttention(
                config.embed_dim, config.num_heads, config.dropout, bias=config.bias, kv_heads=config.num_kv_heads
            )


_MODEL_KEYS = ("embed_dim", "hidden_dim", "num_heads", "num_kv_heads", "bias", "seed", "vocab_size", "dtype", "dropout")
_models: OrderedDict[tuple, ToyModel] = OrderedDict()
_models_lock = threading.Lock()
_drawing: dict[tuple, threading.Event] = {}  # keys whose weights a thread is drawing now


class _Held:
    """The cache's mutable marks: the model a run asked for last (a prefetch never evicts it) and
    the prefetch thread."""

    last_used: tuple | None = None
    prefetch_thread: threading.Thread | None = None
    prefetching: bool = False  # the prefetch thread is drawing a model now
    closing: bool = False  # the interpreter exits: draw nothing more


_held = _Held()


def cached_models() -> list[ToyModel]:
    """The toy models kept now, least recently used first (what a memory ledger holds)."""
    with _models_lock:
        return list(_models.values())


def forget_models(models: list[nn.Module]) -> None:
    """Stop keeping these toy models (a run that needs one again builds it anew, same weights)."""
    doomed = {id(m) for m in models}
    with _models_lock:
        for key in [k for k, m in _models.items() if id(m) in doomed]:
            del _models[key]


def draw_model(config: AttentionConfig) -> ToyModel:
    """``ToyModel(config)`` as built after ``torch.manual_seed(config.seed)``, float32 on the CPU,
    bit for bit, but drawn from a generator of its own: torch's global generator is neither read
    nor moved, so a background thread may draw while a run uses it. The modules are made without
    storage and drawn in the order their constructors would draw (nn.Embedding's and nn.Linear's
    own initialisation)."""
    with torch.device("meta"):
        model = ToyModel(config)
    model = model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(config.seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, generator=generator)
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.Linear):
                nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=generator)
                if module.bias is not None:
                    bound = 1 / math.sqrt(module.in_features) if module.in_features > 0 else 0.0
                    nn.init.uniform_(module.bias, -bound, bound, generator=generator)
            elif next(module.parameters(recurse=False), None) is not None:
                raise TypeError(f"draw_model does not know how {type(module).__name__} initialises its parameters")
    return model


def _model_key(config: AttentionConfig, device: torch.device) -> tuple:
    return tuple(getattr(config, k) for k in _MODEL_KEYS) + (str(device),)


def build_model(config: AttentionConfig, device: torch.device) -> ToyModel:
    """The seeded toy model for this config, cached (a few) so live tweaks of the mask or text
    do not re-initialise the weights. The same seed always gives the same weights. A model a
    prefetch (``prefetch_neighbours``) is drawing now is waited for, not drawn twice."""
    key = _model_key(config, device)
    with _models_lock:
        _held.last_used = key
    model = _cached_or_drawn(key, config, device)
    with _models_lock:
        if key in _models:
            _models.move_to_end(key)
    return model


def _cached_or_drawn(key: tuple, config: AttentionConfig, device: torch.device) -> ToyModel:
    """The cached model of ``key``, else one drawn here (or by the thread drawing it now) and cached."""
    while True:
        with _models_lock:
            if key in _models:
                return _models[key]
            drawing = _drawing.get(key)
            if drawing is None:
                drawing = _drawing[key] = threading.Event()
                break
        drawing.wait(60.0)  # another thread draws it: take its model (or draw it, should that fail)
    try:
        model = draw_model(config).to(device=device, dtype=config.torch_dtype).eval().requires_grad_(False)
        with _models_lock:
            _models[key] = model
            _evict(config.budget_bytes, keep=key)
    finally:
        with _models_lock:
            del _drawing[key]
        drawing.set()
    return model


def _evict(budget_bytes: int, keep: tuple) -> None:
    """Drop the least recently used models, never ``keep`` (just drawn) nor the last one a run used,
    while more than four are kept or they fill more than half the memory budget (a toy model may
    be as large as the budget: four of those would be kept otherwise). Holds ``_models_lock``."""
    while len(_models) > 4 or _cached_bytes() > budget_bytes // 2:
        victims = [k for k in _models if k not in (keep, _held.last_used)]
        if not victims:
            if keep == _held.last_used or _held.last_used not in _models:
                return
            victims = [keep]  # a prefetched model that does not fit beside the one in use
        del _models[victims[0]]


_prefetch_lock = threading.Condition()
_prefetch_queue: list[tuple[AttentionConfig, torch.device]] = []


def prefetch_neighbours(config: AttentionConfig) -> None:
    """Draw the models of the next and the previous seed (the same shape) on a background thread,
    so stepping the seed finds its weights drawn. A newer call replaces what an
    older one has not begun; nothing is drawn where two more models of this size would not stay in
    the cache beside the one in use (``_evict``)."""
    device = resolve_device(config.device)
    with _models_lock:
        model = _models.get(_model_key(config, device))
        if model is None or 3 * _bytes_of(model) > config.budget_bytes // 2:
            return
    seeds = [s for s in (config.seed + 1, config.seed - 1) if 0 <= s <= 2**63 - 1]
    with _prefetch_lock:
        if _held.closing:
            return
        _prefetch_queue[:] = [(config.replace(seed=s), device) for s in seeds]
        if _held.prefetch_thread is None:
            _held.prefetch_thread = threading.Thread(target=_prefetch_loop, name="toy-model-prefetch", daemon=True)
            _held.prefetch_thread.start()
        _prefetch_lock.notify()


def prefetch_idle(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until the prefetch thread has drawn what was asked of it."""
    with _prefetch_lock:
        return _prefetch_lock.wait_for(lambda: not _prefetch_queue and not _held.prefetching, timeout=timeout)


@atexit.register
def _stop_prefetch() -> None:
    """At exit: drop what is queued and let a draw under way finish (a thread inside torch while
    the interpreter tears torch down aborts the process)."""
    with _prefetch_lock:
        _prefetch_queue.clear()
        thread, _held.closing = _held.prefetch_thread, True
        _prefetch_lock.notify_all()
    if thread is not None:
        thread.join(10.0)


def _prefetch_loop() -> None:
    """Draw what ``prefetch_neighbours`` queued; end after a second with nothing to do. (Not at a
    lower priority: a run may wait for the model this thread draws.)"""
    while True:
        with _prefetch_lock:
            _held.prefetching = False
            _prefetch_lock.notify_all()
            _prefetch_lock.wait_for(lambda: bool(_prefetch_queue) or _held.closing, timeout=1.0)
            if _held.closing or not _prefetch_queue:
                _held.prefetch_thread = None  # under the lock: a new request starts a new thread
                return
            config, device = _prefetch_queue.pop(0)
            _held.prefetching = True
        key = _model_key(config, device)
        with _models_lock:
            if key in _models or key in _drawing:
                continue
        try:
            _cached_or_drawn(key, config, device)
        except Exception:  # a prefetch that fails leaves the draw to the run that needs it
            continue


def _bytes_of(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _cached_bytes() -> int:
    return sum(_bytes_of(m) for m in _models.values())


@lru_cache(maxsize=4)
def _tokenizer(vocab_size: int) -> WordTokenizer:
    return WordTokenizer(vocab_size)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float32 (or bool/int) numpy copy on the host; float32 CPU tensors are shared, not copied."""
    if t.is_floating_point() and t.dtype != torch.float32:
        t = t.float()
    return t.detach().cpu().numpy()


def _tokenize(config: AttentionConfig, text: str, key_text: str | None):
    """Validate the config and texts; return (queries, keys, cross) as the tokenizer sees them."""
    if config.weights_from != "random":
        raise ConfigError(
            f"this run has random weights only; the trained {config.weights_from} weights are drawn by the window's "
            "toy mode and 'attndesk render --trained NAME'",
            field="weights_from",
        )
    config.validate()
    if not text_argument("text", text).strip():
        raise ConfigError("type some text to attend over: the input is empty")
    cross = key_text is not None
    if cross and not text_argument("key_text", key_text).strip():
        raise ConfigError("type some text for the keys/values, or switch cross-attention off")
    if cross and "causal" in config.mask:
        raise ConfigError("a causal mask needs self-attention: switch cross-attention off or pick another mask")
    if cross:
        config.check_cross_attention()

    tokenizer = _tokenizer(config.vocab_size)
    queries = tokenizer.encode(text, config.pad_to)
    keys = tokenizer.encode(key_text, config.pad_to) if key_text is not None else queries
    if not queries.ids:
        raise ConfigError("type some text to attend over: no tokens found")
    if not keys.ids:
        raise ConfigError("the key/value text has no tokens")
    return queries, keys, cross


@dataclass(frozen=True, eq=False)
class PreparedText:
    """A run's texts tokenized and its plan checked against free memory (``prepare_text``):
    handed to ``run_attention(..., prepared=...)``, the run neither tokenizes nor checks again."""

    config: AttentionConfig
    text: str
    key_text: str | None
    queries: Tokenized
    keys: Tokenized
    plan: RunPlan
    half_storage: str | None = None

    @property
    def cross(self) -> bool:
        return self.key_text is not None

    def is_for(
        self,
        config: AttentionConfig,
        text: str,
        key_text: str | None,
        half_storage: str | None,
        keep_intermediates: bool,
    ) -> bool:
        """Whether a run of these arguments may use it as it is."""
        if keep_intermediates and self.plan.kind == FULL and not self.plan.intermediates:
            return False  # the full path's intermediates take more memory than was checked
        return (
            self.config == config
            and self.half_storage == half_storage
            and self.text == text
            and self.key_text == key_text
        )


def prepare_text(
    config: AttentionConfig,
    text: str,
    key_text: str | None = None,
    *,
    plan: RunPlan | None = None,
    half_storage: str | None = None,
    keep_intermediates: bool = False,
) -> PreparedText:
    """Validate, tokenize and plan a run (``plan`` when it was made for these lengths, else a new
    one), and check the plan against free memory: everything ``run_attention`` does before it
    computes, done once. Raises ConfigError for bad settings, empty text, or a run that cannot
    fit in free memory even memory-bounded."""
    queries, keys, _ = _tokenize(config, text, key_text)
    lq, lk = len(queries.ids), len(keys.ids)
    # a plan made for other lengths, or for a full run without the intermediates' copies, is redone
    if (
        plan is None
        or (plan.lq, plan.lk, plan.num_heads) != (lq, lk, config.num_heads)
        or (keep_intermediates and plan.kind == FULL and not plan.intermediates)
    ):
        plan = plan_run(config, lq, lk, half_storage=half_storage, keep_intermediates=keep_intermediates)
    check_memory(plan, config)
    return PreparedText(config, text, key_text, queries, keys, plan, half_storage)


def plan_text(
    config: AttentionConfig,
    text: str,
    key_text: str | None = None,
    *,
    half_storage: str | None = None,
    keep_intermediates: bool = False,
) -> RunPlan:
    """What ``run_attention(config, text, key_text=...)`` will do, worked out before it starts
    (tokenizing only): ``plan_text(...).describe()`` is the line the app shows first. Raises
    ConfigError when even the memory-bounded run cannot fit in free memory. (``prepare_text``
    keeps the tokens too, for the run.)"""
    return prepare_text(config, text, key_text, half_storage=half_storage, keep_intermediates=keep_intermediates).plan


def run_attention(
    config: AttentionConfig,
    text: str,
    keep_intermediates: bool = False,
    *,
    key_text: str | None = None,
    progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
    plan: RunPlan | None = None,
    half_storage: str | None = None,
    prepared: PreparedText | None = None,
    ctx: JobContext | None = None,
) -> AttentionResult:
    """Tokenize ``text``, embed it, run the attention layer, time each stage.

    ``key_text`` makes it cross-attention: queries from ``text``, keys and values from ``key_text``.
    ``ctx.progress(fraction, stage)`` follows each stage (on the bounded paths each head of each
    query block); ``ctx`` is checked between stages and blocks (``Cancelled``). The older
    ``progress(fraction, stage)`` and ``should_cancel()`` keywords still work. Raises ``ConfigError`` for bad settings or empty text.

    What the run keeps follows ``plan`` (default: ``plan_run`` from ``config.budget_bytes``, see
    ``plan_text``): a run whose full weights fit returns every weight; a larger one goes through
    query blocks and returns a display pyramid with exact values on demand (or, with
    ``half_storage="float16"``, every weight in float16 when that fits). ``prepared`` (from
    ``prepare_text`` with the same arguments) saves tokenizing and checking memory again.
    """
    if prepared is None or not prepared.is_for(config, text, key_text, half_storage, keep_intermediates):
        prepared = prepare_text(
            config, text, key_text, plan=plan, half_storage=half_storage, keep_intermediates=keep_intermediates
        )
    queries, keys, cross, plan = prepared.queries, prepared.keys, prepared.cross, prepared.plan
    lq, lk = len(queries.ids), len(keys.ids)
    _check_dropout(config, plan)
    device = resolve_device(config.device)
    model = build_model(config, device)
    ctx = job_context(ctx, progress=progress, should_cancel=should_cancel)
    timer = StageTimer(device, plan=STAGES, ctx=ctx)
    keep: dict | None = {} if keep_intermediates else None
    peak = _PeakMemory(device, plan.peak_bytes)
    with torch.inference_mode(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)  # dropout draws repeat for a given seed
        model.train(config.training and not plan.blocked)
        q_ids = torch.tensor([queries.ids], device=device)  # [1, Lq]
        k_ids = torch.tensor([keys.ids], device=device) if cross else q_ids
        x, x_kv = _embed(model, config, q_ids, k_ids if cross else None, timer)
        spec = _mask_spec(config, lq, lk, k_ids)
        proj = _project(model, config, x, x_kv, timer, keep)
        if plan.blocked:
            kept = _attend_bounded(config, plan, proj, spec, timer, ctx)
        else:
            kept = _attend_full(model, config, proj, spec, timer, keep, ctx)
        with timer.stage("output projection"):
            output = model.attention.finish(kept.context)  # [1, Lq, E]
        intermediates = _intermediates(keep, x, proj, kept, output, plan)
        output_np = _to_numpy(output[0])  # [Lq, E]
    return _result(config, prepared, kept, output_np, intermediates, timer.total(), peak.measured(), str(device))


def _mask_spec(config: AttentionConfig, lq: int, lk: int, k_ids: torch.Tensor) -> MaskSpec:
    """The keys each query may see: padding (from the key ids), causal and the window, as the config says."""
    return MaskSpec(
        lq,
        lk,
        key_valid=(k_ids[0] != PAD_ID) if "padding" in config.mask else None,
        causal="causal" in config.mask,
        window=config.window,
    )


def _result(
    config: AttentionConfig,
    prepared: PreparedText,
    kept: _Attended,
    output_np: np.ndarray,
    intermediates: Intermediates | None,
    timings: dict[str, float],
    peak_bytes: int,
    device: str,
) -> AttentionResult:
    """The run's ``AttentionResult``: its tokens, weights (or pyramid), output, timings, plan, notices."""
    queries, keys, cross, plan = prepared.queries, prepared.keys, prepared.cross, prepared.plan
    keep_intermediates = intermediates is not None
    return AttentionResult(
        tokens=queries.tokens,
        token_ids=np.asarray(queries.ids, dtype=np.int64),
        weights=kept.weights,
        output=output_np,
        timings=timings,
        flops=plan.flops,
        peak_bytes=peak_bytes,
        device=device,
        config=config,
        mask=kept.mask,
        key_tokens=keys.tokens if cross else None,
        key_token_ids=np.asarray(keys.ids, dtype=np.int64) if cross else None,
        intermediates=intermediates,
        notices=_notices(config, plan, queries, keys, cross, keep_intermediates) + _sink_notice(config, kept),
        unknown=list(queries.unknown),
        key_unknown=list(keys.unknown) if cross else None,
        plan=plan,
        pyramid=kept.pyramid,
        exact=kept.exact,
    )


@dataclass(frozen=True, eq=False)
class ProjectedText:
    """What a run computes before its scores: ``intermediates`` with embeddings, q / k / v (and
    q_raw / k_raw under RoPE) only, the run's ``mask`` [Lq, Lk] (True = may attend; None: none)
    and the ``scale`` still to apply to Q K^T."""

    intermediates: Intermediates
    mask: np.ndarray | None
    scale: float


def project_text(config: AttentionConfig, text: str, key_text: str | None = None) -> ProjectedText:
    """Embed and project ``text`` exactly as ``run_attention`` does, without attending: one head's
    walk needs Q, K and V, not every head's [L, L] stages (O(L d) instead of O(H L^2))."""
    queries, keys, cross = _tokenize(config, text, key_text)
    device = resolve_device(config.device)
    model = build_model(config, device)
    keep: dict = {}
    timer = StageTimer(device)
    with torch.inference_mode():
        q_ids = torch.tensor([queries.ids], device=device)  # [1, Lq]
        k_ids = torch.tensor([keys.ids], device=device) if cross else q_ids
        x, x_kv = _embed(model, config, q_ids, k_ids if cross else None, timer)
        proj = _project(model, config, x, x_kv, timer, keep)
        spec = MaskSpec(
            len(queries.ids),
            len(keys.ids),
            causal="causal" in config.mask,
            window=config.window,
            key_valid=(k_ids[0] != PAD_ID) if "padding" in config.mask else None,
        )
        mask = spec.to_numpy()
    inter = Intermediates.from_arrays({name: _to_numpy(t[0]) for name, t in keep.items()})
    return ProjectedText(inter, mask, proj.scale)


def _check_dropout(config: AttentionConfig, plan: RunPlan) -> None:
    """Refuse dropout in training mode on a memory-bounded run (it needs every weight at once)."""
    if plan.blocked and config.training and config.dropout > 0:
        raise ConfigError(
            "dropout in training mode needs the whole weight matrix at once, which does not fit the "
            "memory budget here: switch to eval mode, shorten the text, or raise the budget"
        )


class _PeakMemory:
    """The run's peak bytes: measured on CUDA, else the plan's estimate."""

    def __init__(self, device: torch.device, estimate: int):
        self.device, self.estimate = device, estimate
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            self.base = torch.cuda.memory_allocated(device)

    def measured(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device) - self.base)
        return int(self.estimate)


def _embed(
    model: ToyModel, config: AttentionConfig, q_ids: torch.Tensor, k_ids: torch.Tensor | None, timer: StageTimer
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token embeddings [1, L, E] of the queries and (cross-attention) of the keys, each plus
    its own sinusoidal positions when the config adds them."""
    with timer.stage("embed"):
        x = model.embedding(q_ids)
        x_kv = x if k_ids is None else model.embedding(k_ids)
        if config.position == "sinusoidal":
            x = x + sinusoidal_encoding(x.shape[1], config.embed_dim, dtype=x.dtype, device=x.device)
            x_kv = (
                x
                if k_ids is None
                else x_kv + sinusoidal_encoding(x_kv.shape[1], config.embed_dim, dtype=x.dtype, device=x.device)
            )
    return x, x_kv


def _project(
    model: ToyModel, config: AttentionConfig, x: torch.Tensor, x_kv: torch.Tensor, timer: StageTimer, keep: dict | None
) -> Projections:
    """Q, K, V (+ RoPE) of the layer; the score scale is folded into Q unless intermediates are
    kept (then Q is kept as projected, unscaled)."""
    layer = model.attention
    scale = config.head_dim**-0.5 if config.scaled else 1.0
    with timer.stage("projections"):
        proj = layer.project(x, x_kv, x_kv, scale=scale, rope=config.position == "rope", fold=keep is None)
    if keep is not None:
        keep.update(embeddings=x, q=proj.q, k=proj.k, v=proj.v)
        if proj.q_raw is not None:
            keep.update(q_raw=proj.q_raw, k_raw=proj.k_raw)
    return proj


@dataclass
class _Attended:
    """What the attend step hands on: context [1, H, Lq, dv] and what the result keeps."""

    context: torch.Tensor
    weights: np.ndarray
    mask: np.ndarray | None
    pyramid: AttentionPyramid | None = None
    exact: ExactAttention | None = None


def _attend_full(
    model: ToyModel,
    config: AttentionConfig,
    proj: Projections,
    spec: MaskSpec,
    timer: StageTimer,
    keep: dict | None,
    ctx: JobContext,
) -> _Attended:
    """Every weight: the fast path, or the reference where it must (intermediates, dropout,
    another device or dtype, inputs too small for blocks to pay)."""
    q, k, v = proj.q, proj.k, proj.v
    dropout = model.attention.dropout if config.training and config.dropout > 0 and config.num_heads > 1 else None
    scoring = config.scoring(proj.scale)
    if keep is None and dropout is None and _fast_path_ok(q, k, v, None):
        rule = SpecRule(spec, alibi=scoring.slopes is not None, fuse_keys=scoring.fusable, dtype=q.dtype)
        band = None if config.window is None else 2 * config.window - 1
        rows = block_rows_for(spec.lq, spec.lk, q.element_size(), band=band)
        weights = q.new_empty(1, config.num_heads, spec.lq, spec.lk)
        context = fast_attention(q, k, v, rule, scoring, weights=weights, block_rows=rows, timer=timer, ctx=ctx)
    else:
        context, weights = attend(
            q, k, v, mask=spec.to_tensor(), scoring=scoring, dropout=dropout, keep=keep, timer=timer
        )
    return _Attended(context, _to_numpy(weights[0]), spec.to_numpy())


def _attend_bounded(
    config: AttentionConfig,
    plan: RunPlan,
    proj: Projections,
    spec: MaskSpec,
    timer: StageTimer,
    ctx: JobContext,
) -> _Attended:
    """The memory-bounded run: the same numbers, streamed through query blocks into ``plan``'s
    sink (a pyramid, or stored float16/32 beside a small one); exact values on demand."""
    heads = config.num_heads
    q, k, v = (t[0].contiguous() for t in (proj.q, proj.k, proj.v))  # [H or KV, L, d], per head for the GEMMs
    scoring = config.scoring(proj.scale)
    banded = spec.causal or spec.window is not None  # blocks see only some keys
    builder = PyramidBuilder(heads, spec.lq, spec.lk, plan.factor, device=q.device, banded=banded)
    stored = (
        None
        if plan.kind == PYRAMID
        else FullSink(heads, spec.lq, spec.lk, np.float16 if plan.storage == "float16" else np.float32)
    )

    # the blocks fill the progress between the end of the projections and of the weighted sum
    lo, hi = ((STAGES.index(name) + 1) / len(STAGES) for name in ("projections", "weighted sum"))

    def block_done(block: int, blocks: int, head: int, num: int) -> None:
        done = block * num + head + 1
        ctx.progress(lo + (hi - lo) * done / (blocks * num), f"block {block + 1}/{blocks}, head {head + 1}/{num}")

    context = blocked_attention(
        q,
        k,
        v,
        spec,
        scoring=scoring,
        block_rows=plan.block_rows,
        sink=builder if stored is None else TeeSink(stored, builder),
        align=plan.factor,
        timer=timer,
        progress=block_done,
        ctx=ctx,
    )
    exact = ExactAttention(q, k, spec, scoring=scoring)
    with timer.stage(OVERVIEW, report=False):
        pyramid = builder.finish(exact, spec)
    if stored is None:
        weights = pyramid.levels[0].max[:heads]  # [H, R, C] tile maxima
        dead = pyramid.levels[0].all_masked
        mask = None if dead is None else ~dead  # [R, C], True = some cell may attend
    else:
        weights, mask = stored.weights, spec.to_numpy()  # [H, Lq, Lk]
    return _Attended(context[None], weights, mask, pyramid, exact)


def _intermediates(
    keep: dict | None, x: torch.Tensor, proj: Projections, kept: _Attended, output: torch.Tensor, plan: RunPlan
) -> Intermediates | None:
    """The kept stages without the batch axis (a bounded run keeps only the small tensors)."""
    if keep is None:
        return None
    if plan.blocked:
        keep = dict(embeddings=x, q=proj.q, k=proj.k, v=proj.v, context=kept.context)
        if proj.q_raw is not None:
            keep.update(q_raw=proj.q_raw, k_raw=proj.k_raw)
    keep["output"] = output
    return Intermediates.from_arrays({name: _to_numpy(t[0]) for name, t in keep.items()})


def _sink_notice(config: AttentionConfig, kept: _Attended) -> list[str]:
    """Under a softmax sink rows sum to less than 1: say how much the sink took (mean over the
    rows that have a key; a pyramid's tile maxima do not tell, so the note stays general)."""
    if config.sink == "none":
        return []
    what = "learned per-head sink" if config.sink == "learned" else "off-by-one softmax"
    if kept.pyramid is not None:
        return [f"{what}: rows sum to less than 1, the rest of each row goes to the sink"]
    sums = kept.weights.astype(np.float64).sum(axis=-1)  # [H, Lq]
    rows = np.broadcast_to(True if kept.mask is None else kept.mask.any(axis=-1), sums.shape)  # rows with a key
    share = float((1.0 - sums)[rows].mean()) if rows.any() else 1.0
    return [f"{what}: rows sum to less than 1; the sink took {share:.1%} of the weight on average"]


def _notices(config: AttentionConfig, plan: RunPlan, queries, keys, cross: bool, keep_intermediates: bool) -> list[str]:
    notices = []
    if plan.blocked:
        notices.append(plan.describe(eta=False))  # after the run: its measured time, not the estimate
        if keep_intermediates:
            notices.append("memory-bounded run: the score and weight matrices are not kept as intermediates")
    unknown = sum(queries.unknown) + (sum(keys.unknown) if cross else 0)
    if unknown:
        notices.append(f"{unknown} token(s) outside the {config.vocab_size}-word vocabulary map to [UNK]")
    return notices
