"""Input attributions for a target token after the last position: gradient x input, integrated
gradients and attention x gradient, on the function f(E) = logit(target) of the token embeddings E
[L, E_dim] (what ``get_input_embeddings()`` gives; positions, scaling and norms stay inside the
model).

Integrated gradients (Sundararajan et al. 2017) integrate the gradient from a baseline to E with
Gauss-Legendre nodes (captum's default method); completeness says the attributions sum to
f(E) - f(baseline), and the relative error of that sum is reported. The default baseline is the
pad token's embedding at every position. A zero baseline is degenerate under RMSNorm/LayerNorm:
a norm divides by the vector's own scale, so near zero the path runs through where the model is
ill-defined (and the sum is badly approximated); asking for it warns.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import Cancel, JobContext, ProgressFn, job_context
from attndesk.models.backend import Capture, capturing
from attndesk.models.loader import LoadedModel
from attndesk.models.run import forward_parameters
from attndesk.models.token_text import id_texts
from attndesk.system.free_memory import format_bytes

from .anatomy import check_lm, hidden_size, input_embeddings, intermediate_size
from .inputs import Prompt, chunks, last_logits, prompt, resolve_budget, token_id

BASELINES = ("pad", "zero")
ZERO_WARNING = (
    "a zero embedding baseline is degenerate under RMSNorm/LayerNorm (the norm divides by the "
    "vector's own scale): integrated gradients from it are unreliable; the pad baseline is the default"
)


@dataclass
class InputAttribution:
    """Per-token scores (``scores`` [L]) for ``target`` after the last position, by ``method``."""

    method: str
    tokens: list[str]
    scores: np.ndarray
    target: str
    target_logit: float
    baseline: str | None = None
    baseline_logit: float | None = None
    completeness_error: float | None = None  # |sum(scores) - (f(x) - f(baseline))| / |f(x) - f(baseline)|
    steps: int | None = None
    per_head: np.ndarray | None = None  # attention x gradient: [layers, heads, L], the last query row
    notices: list[str] = field(default_factory=list)


def _setup(model: LoadedModel, text: str, target: str | int, method: str) -> tuple[Prompt, int, torch.Tensor]:
    check_lm(model, f"an attribution of a target token ({method})")
    target_id = token_id(model, target, "target")
    p = prompt(model, text)
    with torch.no_grad():
        embeds = input_embeddings(model)(p.ids).detach().float()
    return p, target_id, embeds


def _target_logits(model: LoadedModel, p: Prompt, embeds: torch.Tensor, target: int) -> torch.Tensor:
    """[B] logits of ``target`` after the last position, for a batch of embeddings [B, L, E]."""
    return last_logits(model, None, p.decoder_ids, embeds=embeds)[:, target]


def _gradient(model: LoadedModel, p: Prompt, embeds: torch.Tensor, target: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(f per row [B], df/dE [B, L, E]) without touching any parameter's .grad."""
    with model._lock, torch.enable_grad():
        x = embeds.detach().requires_grad_(True)
        values = _target_logits(model, p, x, target)
        (grad,) = torch.autograd.grad(values.sum(), x)
    return values.detach(), grad


def gradient_x_input(model: LoadedModel, text: str, target: str | int) -> np.ndarray:
    """[L]: sum over embedding dimensions of d logit(target at the last position) / d e_i times e_i."""
    return gradient_x_input_report(model, text, target).scores


def gradient_x_input_report(model: LoadedModel, text: str, target: str | int) -> InputAttribution:
    p, target_id, embeds = _setup(model, text, target, "gradient x input")
    value, grad = _gradient(model, p, embeds, target_id)
    scores = (grad.double() * embeds.double()).sum(-1)[0].cpu().numpy()
    return InputAttribution("gradient_x_input", list(p.tokens), scores, _name(model, target_id), float(value[0]))


def _name(model: LoadedModel, token: int) -> str:
    return id_texts(model.tokenizer, [token])[0]


def _baseline(model: LoadedModel, embeds: torch.Tensor, baseline) -> tuple[torch.Tensor, str, list[str]]:
    if isinstance(baseline, str):
        if baseline not in BASELINES:
            raise ConfigError(
                f"unknown baseline {baseline!r}: choose {', '.join(BASELINES)} or give an embedding array"
            )
        if baseline == "zero":
            warnings.warn(ZERO_WARNING, stacklevel=3)
            return torch.zeros_like(embeds), "zero", [ZERO_WARNING]
        pad = getattr(model.tokenizer, "pad_token_id", None)
        pad = getattr(model.model.config, "pad_token_id", None) if pad is None else pad
        if pad is None:
            raise ConfigError(f"{model.name}'s tokenizer has no pad token: give baseline='zero' or an embedding array")
        with torch.no_grad():
            row = input_embeddings(model)(torch.tensor([[int(pad)]], device=embeds.device)).float()
        if not bool(row.abs().max() > 0):
            message = (
                f"the pad token's embedding (id {pad}) is all zeros (a padding row): the same degenerate "
                "baseline as zero under RMSNorm/LayerNorm; give a custom baseline"
            )
            warnings.warn(message, stacklevel=3)
            return row.expand_as(embeds).clone(), "pad", [message]
        return row.expand_as(embeds).clone(), "pad", []
    custom = torch.as_tensor(np.asarray(baseline, dtype=np.float32), device=embeds.device)
    if custom.shape not in (embeds.shape[-1:], embeds.shape[1:], embeds.shape):
        raise ConfigError(
            f"a custom baseline must be [{embeds.shape[-1]}] or [{embeds.shape[1]}, {embeds.shape[-1]}], "
            f"got {tuple(custom.shape)}"
        )
    return custom.expand_as(embeds).clone(), "custom", []


def gradient_pass_bytes(model: LoadedModel, rows: int, length: int) -> int:
    """Estimated bytes a forward+backward of ``rows`` sequences keeps: every layer's activations."""
    e, f, h = hidden_size(model), intermediate_size(model), model.num_heads
    layers = sum(model.layers.values())
    per_layer = length * (16 * e + 4 * f) * 4 + 4 * h * length * length * 4
    return rows * (layers * per_layer + 4 * length * e * 4)


def integrated_gradients(model: LoadedModel, text: str, target: str | int, steps: int = 64, **options) -> np.ndarray:
    """[L] integrated gradients of logit(target at the last position), pad-embedding baseline."""
    return integrated_gradients_report(model, text, target, steps, **options).scores


def integrated_gradients_report(
    model: LoadedModel,
    text: str,
    target: str | int,
    steps: int = 64,
    *,
    baseline="pad",
    memory_budget: int | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> InputAttribution:
    """Integrated gradients with ``steps`` Gauss-Legendre nodes (see the module docstring);
    ``baseline``: "pad" (default), "zero" (warns) or an embedding array [E] / [L, E]."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 4096:
        raise ConfigError(f"integrated gradients take 1 to 4096 steps, got {steps!r}")
    p, target_id, embeds = _setup(model, text, target, "integrated gradients")
    base, base_name, notices = _baseline(model, embeds, baseline)
    budget = resolve_budget(memory_budget)
    one = gradient_pass_bytes(model, 1, p.length)
    if one > budget:
        raise ConfigError(
            f"one gradient pass over {p.length} tokens needs about {format_bytes(one)}, over the memory "
            f"budget of {format_bytes(budget)}: shorten the text or raise the budget"
        )
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor(0.5 * (nodes + 1.0), dtype=torch.float32, device=embeds.device)
    step_weights = torch.tensor(0.5 * weights, dtype=torch.float64, device=embeds.device)
    total = torch.zeros_like(embeds[0], dtype=torch.float64)  # the weighted sum of the steps' gradients
    for span in chunks(steps, max(1, budget // one)):
        ctx.check()
        a = alphas[span.start : span.stop].view(-1, 1, 1)
        _, grad = _gradient(model, p, base + a * (embeds - base), target_id)
        total += (grad.double() * step_weights[span.start : span.stop].view(-1, 1, 1)).sum(0)
        ctx.progress(span.stop / steps, f"integrated gradients: {span.stop} of {steps} steps")
    # float64: completeness compares the scores' sum with f(x) - f(baseline), two close logits
    scores = ((embeds.double() - base.double())[0] * total).sum(-1).cpu().numpy()
    with model._lock, torch.no_grad():
        ends = _target_logits(model, p, torch.cat([embeds, base]), target_id).double().cpu().numpy()
    delta = float(ends[0] - ends[1])
    error = abs(float(scores.sum()) - delta) / max(abs(delta), 1e-12)
    return InputAttribution(
        "integrated_gradients",
        list(p.tokens),
        scores,
        _name(model, target_id),
        float(ends[0]),
        base_name,
        float(ends[1]),
        error,
        steps,
        notices=notices,
    )


class _WeightsWithGrad(Capture):
    """A capture that keeps each layer's attention weights of one part in the autograd graph."""

    def __init__(self, model: LoadedModel, part: str):
        super().__init__(sites=model.sites, layers=model.layers, keep_weights=False)
        self.part = part
        self.kept: dict[int, torch.Tensor] = {}

    def record(self, site, weights, mask, window, d) -> None:
        if site.part == self.part:
            self.kept[site.layer] = weights


def attention_x_gradient(model: LoadedModel, text: str, target: str | int, *, part: str = "self") -> InputAttribution:
    """Each layer's and head's attention weight times its gradient, on the last query row:
    ``per_head`` [layers, heads, L] = A[l, h, -1, j] * d logit(target) / d A[l, h, -1, j]; ``scores``
    [L] their sum over layers and heads (for an encoder-decoder's encoder, every query row counts)."""
    p, target_id, embeds = _setup(model, text, target, "attention x gradient")
    if part not in model.layers:
        raise ConfigError(f"{model.name} has no {part!r} attention; its parts are {', '.join(model.layers)}")
    capture = _WeightsWithGrad(model, part)
    with model._lock, torch.enable_grad(), capturing(capture):
        value = _target_logits(model, p, embeds.detach().requires_grad_(True), target_id)
        layers = [capture.kept[n] for n in range(model.layers[part])]
        grads = torch.autograd.grad(value.sum(), layers, allow_unused=True)
    products = []
    for weights, grad in zip(layers, grads):
        g = torch.zeros_like(weights) if grad is None else grad
        rows = (weights.double() * g.double())[0]  # [H, Lq, Lk]
        products.append(rows[:, -1] if model.family != "encoder-decoder" or part != "self" else rows.sum(1))
    per_head = torch.stack(products).detach().cpu().numpy()
    return InputAttribution(
        "attention_x_gradient",
        list(p.tokens) if part == "self" else list(p.decoder_tokens),
        per_head.sum((0, 1)),
        _name(model, target_id),
        float(value.detach()[0]),
        per_head=per_head,
    )


@dataclass
class StepAttribution:
    """A decoder's text read step by step, as Inseq draws it: step t predicts ``targets[t]`` after
    the source tokens 0..t (the text's own next token, the last step the chosen target);
    ``scores`` [T, L] is each source token's attribution to that step's target logit by ``method``
    (NaN where a source comes after the step); ``probabilities`` [T] each target's probability at
    its step and ``target_logits`` [T] its logit (the per-step scores)."""

    method: str
    sources: list[str]
    targets: list[str]
    scores: np.ndarray
    probabilities: np.ndarray
    target_logits: np.ndarray
    steps: int | None = None


STEP_METHODS = ("gradient_x_input", "integrated_gradients")


def _check_step_request(model: LoadedModel, method: str, steps) -> None:
    """A step-by-step attribution reads a decoder-only LM, by a known method, in 1 to 4096 steps."""
    if method not in STEP_METHODS:
        raise ConfigError(f"step attributions take {' or '.join(STEP_METHODS)}, got {method!r}")
    check_lm(model, "an attribution step by step")
    if model.family != "decoder":
        raise ConfigError(f"{model.name} is a {model.family}: the step-by-step attribution reads a decoder-only model")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 4096:
        raise ConfigError(f"integrated gradients take 1 to 4096 steps, got {steps!r}")


def _step_path(model: LoadedModel, method: str, embeds: torch.Tensor, baseline, steps: int, memory_budget):
    """(the inputs the gradients are taken at [S, L, E], their quadrature weights [S, 1, 1] in
    float64, the origin the attribution is measured from): the text's own embeddings with weight 1
    and origin 0 for gradient x input; for integrated gradients the Gauss-Legendre nodes on the
    straight path from the baseline, checked against the memory budget."""
    if method != "integrated_gradients":
        return embeds, torch.ones(1, 1, 1, dtype=torch.float64, device=embeds.device), 0.0
    length = embeds.shape[1]
    base, _name_of_base, _notices = _baseline(model, embeds, baseline)
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor(0.5 * (nodes + 1.0), dtype=torch.float32, device=embeds.device).view(-1, 1, 1)
    step_weights = torch.tensor(0.5 * weights, dtype=torch.float64, device=embeds.device).view(-1, 1, 1)
    one = gradient_pass_bytes(model, steps, length)
    budget = resolve_budget(memory_budget)
    if one > budget:
        raise ConfigError(
            f"integrated gradients of every step over {length} tokens need about {format_bytes(one)}, over "
            f"the memory budget of {format_bytes(budget)}: lower the steps, shorten the text or raise the budget"
        )
    return base + alphas * (embeds - base), step_weights, base.double()  # [S, L, E]


def step_attributions(
    model: LoadedModel,
    text: str,
    target: str | int | None = None,
    *,
    method: str = "gradient_x_input",
    steps: int = 16,
    baseline="pad",
    memory_budget: int | None = None,
    ctx: JobContext | None = None,
) -> StepAttribution:
    """Every step of a decoder-only model's ``text``: the attribution of each step's target (the
    text's next token; after the last token ``target``, None = the model's own next token) to the
    source tokens before it, by gradient x input or integrated gradients (``steps`` nodes, the
    same baseline as ``integrated_gradients_report``). A causal model's logit at step t reads
    tokens 0..t only, so one forward pass serves every step and each row equals the attribution
    of that prefix alone. Cancel and progress act between steps."""
    ctx = job_context(ctx)
    _check_step_request(model, method, steps)
    p = prompt(model, text)
    ids = p.ids[0]
    length = p.length
    with torch.no_grad():
        embeds = input_embeddings(model)(p.ids).detach().float()
    path, step_weights, origin = _step_path(model, method, embeds, baseline, steps, memory_budget)
    with model._lock, torch.no_grad():
        logits = _all_logits(model, embeds)[0].double()  # [L, V] at the text's own embeddings
    last = int(logits[-1].argmax()) if target is None else token_id(model, target, "target")
    targets = [int(t) for t in ids[1:]] + [last]
    log_probs = torch.log_softmax(logits, -1)
    chosen = torch.tensor(targets, device=logits.device)
    probabilities = log_probs[torch.arange(length), chosen].exp().cpu().numpy()
    target_logits = logits[torch.arange(length), chosen].cpu().numpy()
    scores = np.full((length, length), np.nan)
    difference = (embeds.double() - origin)[0]
    with model._lock, torch.enable_grad():
        x = path.detach().requires_grad_(True)
        along = _all_logits(model, x)  # [S, L, V]
        for t, token in enumerate(targets):
            ctx.check()
            (grad,) = torch.autograd.grad(along[:, t, token].sum(), x, retain_graph=t < length - 1)
            total = (grad.double() * step_weights).sum(0)  # [L, E]
            scores[t, : t + 1] = (difference * total).sum(-1)[: t + 1].cpu().numpy()
            ctx.progress((t + 1) / length, f"step {t + 1} of {length}")
        del along
    return StepAttribution(
        method,
        list(p.tokens),
        id_texts(model.tokenizer, targets),
        scores,
        probabilities,
        target_logits,
        steps if method == "integrated_gradients" else None,
    )


def _all_logits(model: LoadedModel, embeds: torch.Tensor) -> torch.Tensor:
    """[B, L, V] logits at every position for a batch of embeddings [B, L, E] (a decoder-only model)."""
    accepts = forward_parameters(type(model.model))  # type: ignore[arg-type]  # a class is hashable
    kwargs: dict = {"inputs_embeds": embeds}
    if "use_cache" in accepts:
        kwargs["use_cache"] = False
    return model.model(**kwargs).logits.float()


__all__ = [
    "BASELINES",
    "STEP_METHODS",
    "InputAttribution",
    "StepAttribution",
    "attention_x_gradient",
    "gradient_x_input",
    "gradient_x_input_report",
    "integrated_gradients",
    "integrated_gradients_report",
]
