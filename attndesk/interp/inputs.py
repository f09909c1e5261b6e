"""Prompts, single-token answers, the forward pass to the last position's logits, the metrics,
and hooks that act only inside the thread (context) that armed them.

Every check here raises a one-line ``ConfigError`` before any forward pass: prompts of different
token lengths, an answer that is several tokens, a token id outside the vocabulary, an
encoder-only model or a model without an LM head for a logit metric.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import nn

from attndesk.errors import ConfigError
from attndesk.models.loader import LoadedModel
from attndesk.models.run import encode, forward_parameters
from attndesk.models.token_text import id_texts
from attndesk.runs.config import default_memory_budget

from .anatomy import check_lm, vocabulary

METRICS = ("logit_diff", "prob", "kl")


@dataclass(frozen=True)
class Prompt:
    """One tokenized prompt: ids [1, L] (and the decoder's ids [1, Ld] of an encoder-decoder)."""

    ids: torch.Tensor
    tokens: list[str]
    decoder_ids: torch.Tensor | None = None
    decoder_tokens: tuple[str, ...] = ()

    @property
    def length(self) -> int:
        return int(self.ids.shape[1])


def prompt(model: LoadedModel, text: str, target: str | None = None) -> Prompt:
    """``text`` tokenized as the model reads it; an encoder-decoder decodes from ``target`` (default:
    its start token alone) and the metric is read after the decoder's last token."""
    source = encode(model, text)
    ids = torch.tensor([source.ids], device=model.device)
    if model.family != "encoder-decoder":
        if target is not None:
            raise ConfigError(f"{model.name} is a {model.family}: a target text needs an encoder-decoder")
        return Prompt(ids, source.tokens)
    start = getattr(model.model.config, "decoder_start_token_id", None)
    dec = [0 if start is None else int(start)]
    if target is not None:
        dec += [int(i) for i in model.tokenizer(target, add_special_tokens=False)["input_ids"]]
    return Prompt(ids, source.tokens, torch.tensor([dec], device=model.device), tuple(id_texts(model.tokenizer, dec)))


def prompt_pair(model: LoadedModel, clean: str, corrupt: str, target: str | None = None) -> tuple[Prompt, Prompt]:
    """The clean and corrupted prompts, refused unless they have the same number of tokens."""
    a, b = prompt(model, clean, target), prompt(model, corrupt, target)
    if a.length != b.length:
        raise ConfigError(
            f"the clean prompt is {a.length} tokens and the corrupted one {b.length}: patching "
            "needs prompts of equal token length (position i of one is patched into position i of the other)"
        )
    return a, b


def token_id(model: LoadedModel, token: str | int, what: str = "answer") -> int:
    """One token's id: an int in the vocabulary, or a text the tokenizer makes exactly one token of."""
    vocab = vocabulary(model)
    if isinstance(token, bool) or not isinstance(token, (int, str)):
        raise ConfigError(f"the {what} must be a token (text) or a token id, got {type(token).__name__}")
    if isinstance(token, int):
        if not 0 <= token < vocab:
            raise ConfigError(f"the {what} id {token} is outside the model's vocabulary of {vocab}")
        return int(token)
    ids = [int(i) for i in model.tokenizer(token, add_special_tokens=False)["input_ids"]]
    if len(ids) != 1:
        pieces = id_texts(model.tokenizer, ids)
        raise ConfigError(
            f"the {what} {token!r} is {len(ids)} tokens ({', '.join(map(repr, pieces))}): "
            "the metric needs a single token"
        )
    if not 0 <= ids[0] < vocab:
        raise ConfigError(f"the {what} {token!r} has id {ids[0]}, outside the model's vocabulary of {vocab}")
    return ids[0]


def last_logits(
    model: LoadedModel,
    ids: torch.Tensor | None,
    decoder_ids: torch.Tensor | None = None,
    *,
    embeds: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, V] logits after the last position for a batch of ``ids`` [B, L] (or ``embeds`` [B, L, E])."""
    accepts = forward_parameters(type(model.model))  # type: ignore[arg-type]  # a class is hashable; mypy reads the instances' __hash__
    given = ids if ids is not None else embeds
    assert given is not None, "ids or embeds"
    batch = int(given.shape[0])
    kwargs: dict = {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}
    if "use_cache" in accepts:
        kwargs["use_cache"] = False
    if decoder_ids is not None:
        kwargs["decoder_input_ids"] = decoder_ids.expand(batch, -1)
    if "logits_to_keep" in accepts:
        kwargs["logits_to_keep"] = 1
    return model.model(**kwargs).logits[:, -1].float()


@dataclass(frozen=True)
class Metric:
    """What a patched run is scored by, after the last position: the logit difference answer - wrong,
    the answer's probability, or KL(clean || run) (``reference``: the clean log-probabilities,
    float64)."""

    name: str
    answer: int
    wrong: int | None = None
    reference: torch.Tensor | None = None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, V] -> [B] float64 (``metric_values``)."""
        return metric_values(self.name, logits, self.answer, self.wrong, self.reference)


def metric_values(
    name: str,
    logits: torch.Tensor,
    answer: int | torch.Tensor,
    wrong: int | torch.Tensor | None = None,
    reference: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, V] -> [B] float64: metric ``name`` of each row, ``answer`` / ``wrong`` a token id or one
    per row, ``reference`` the clean log-probabilities (KL; [V] or one row per row). The logits are
    cast before any subtraction or normalisation, so the metric carries no rounding of its own
    beyond the float32 logits' (a KL between close distributions, a difference of close logits:
    float32 rounding there is what normalising by a small gap amplifies)."""
    logits = logits.double()
    rows = torch.arange(logits.shape[0])
    if name == "logit_diff":
        assert wrong is not None, "the logit difference needs a wrong token"
        return logits[rows, answer] - logits[rows, wrong]
    if name == "prob":
        return torch.softmax(logits, dim=-1)[rows, answer]
    assert reference is not None, "KL needs the clean log-probabilities"
    ref = reference.double()
    return (ref.exp() * (ref - torch.log_softmax(logits, dim=-1))).sum(-1)


def make_metric(model: LoadedModel, name: str, answer: str | int, wrong: str | int | None) -> Metric:
    if name not in METRICS:
        raise ConfigError(f"unknown metric {name!r}: choose one of {', '.join(METRICS)}")
    check_lm(model, f"the {name} metric")
    answer_id = token_id(model, answer, "answer")
    if name != "logit_diff":
        return Metric(name, answer_id, None if wrong is None else token_id(model, wrong, "wrong token"))
    if wrong is None:
        raise ConfigError("the logit difference needs a wrong token beside the answer")
    wrong_id = token_id(model, wrong, "wrong token")
    if wrong_id == answer_id:
        raise ConfigError("the answer and the wrong token are the same token: their logit difference is always 0")
    return Metric(name, answer_id, wrong_id)


def resolve_budget(memory_budget: int | None) -> int:
    budget = default_memory_budget() if memory_budget is None else int(memory_budget)
    if budget <= 0:
        raise ConfigError(f"the memory budget must be positive, got {memory_budget}")
    return budget


# -- hooks that act only in the context that armed them ---------------------------------------------
_ARMED: ContextVar[dict | None] = ContextVar("attndesk_interp_hooks", default=None)


@contextmanager
def hooks(
    pre: dict[nn.Module, Callable] | None = None,
    post: dict[nn.Module, Callable] | None = None,
    *,
    lock: threading.Lock | None = None,
) -> Iterator[None]:
    """Forward pre-hooks ``fn(module, x) -> x | None`` (x: the first input) and forward hooks
    ``fn(module, out) -> out | None`` for the duration of the block, in this context only: a
    forward pass of the same model in another thread is untouched. ``lock`` (the model's, which
    ``run_pretrained`` holds for its forward pass) is held throughout, so no hook is added or
    removed while another thread's pass walks the modules' hooks."""
    table = {("pre", id(m)): f for m, f in (pre or {}).items()}
    table.update({("post", id(m)): f for m, f in (post or {}).items()})
    with lock if lock is not None else nullcontext():
        handles = [m.register_forward_pre_hook(_pre_hook, with_kwargs=True) for m in (pre or {})]
        handles += [m.register_forward_hook(_post_hook) for m in (post or {})]
        token = _ARMED.set(table)
        try:
            yield
        finally:
            _ARMED.reset(token)
            for handle in handles:
                handle.remove()


def _pre_hook(module, args, kwargs):
    fn = (_ARMED.get() or {}).get(("pre", id(module)))
    if fn is None:
        return None
    if args:
        new = fn(module, args[0])
        return None if new is None else ((new, *args[1:]), kwargs)
    new = fn(module, kwargs["hidden_states"])
    return None if new is None else (args, {**kwargs, "hidden_states": new})


def _post_hook(module, args, output):
    fn = (_ARMED.get() or {}).get(("post", id(module)))
    if fn is None:
        return None
    first = output[0] if isinstance(output, tuple) else output
    new = fn(module, first)
    if new is None:
        return None
    return (new, *output[1:]) if isinstance(output, tuple) else new


def chunks(total: int, size: int) -> Sequence[range]:
    return [range(i, min(total, i + size)) for i in range(0, total, max(1, size))]


__all__ = [
    "METRICS",
    "Metric",
    "Prompt",
    "hooks",
    "last_logits",
    "make_metric",
    "metric_values",
    "prompt",
    "prompt_pair",
    "resolve_budget",
    "token_id",
]
