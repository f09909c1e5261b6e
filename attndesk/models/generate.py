"""The generation stepper: a decoder (or encoder-decoder) writes token by token, and each step
says which token it chose, from which distribution, and where the deciding position looked.

The first step runs the whole prompt; later steps feed only the new token and reuse the model's
KV cache (the keys and values the model itself computed); every weight is still attndesk's
``attend``. A step's ``attention`` is the attention row of the position whose output chose the
token (the last position so far) over every position so far, in every layer and head; layers
whose cache keeps only a sliding window have zeros left of it (exactly what the mask gives).
A cancelled step leaves the generator as it was (the cache is dropped and rebuilt next step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from attndesk.errors import Cancelled, ConfigError, NoLMHead
from attndesk.jobs import JobContext, ProgressFn, job_context

from .backend import Capture, ForwardClock, capturing
from .loader import LoadedModel
from .result import NextToken
from .run import ablation_heads, ablation_items, encode, forward_parameters, next_token
from .token_text import id_texts

SAMPLING = ("greedy", "sample")


@dataclass(frozen=True, eq=False)
class GenerationStep:
    """One generated token. ``attention`` [layers, H, K] float32: the deciding position's row over
    the K positions so far (decoder self-attention for encoder-decoders); ``cross_attention``
    [layers, H, L] over the source tokens (encoder-decoders, else None)."""

    index: int  # 0 = the first generated token
    token_id: int
    token: str
    probability: float  # of the chosen token, under the distribution it was drawn from
    distribution: NextToken  # the top-k of that distribution (temperature applied)
    query_position: int  # the position whose attention row chose the token
    attention: np.ndarray
    cross_attention: np.ndarray | None
    finished: bool  # an end-of-sequence token, the position limit or max_new_tokens
    seconds: float


class Generator:
    """Step a model's generation (see the module docstring).

    ``sampling``: "greedy" (argmax) or "sample" (from softmax(logits / temperature), limited to
    the ``top_k`` most probable when given, seeded by ``seed``). ``top``: how many next-token
    probabilities each step reports. Encoder-decoders encode ``text`` once and decode from
    their start token followed by ``target`` (tokenized without special tokens) as a forced prefix.
    """

    def __init__(
        self,
        model: LoadedModel,
        text: str,
        *,
        target: str | None = None,
        sampling: str = "greedy",
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
        top: int = 5,
        ablate: Iterable = (),
        max_new_tokens: int = 256,
    ):
        if model.family == "encoder":
            raise ConfigError(
                f"{model.name} is an encoder: it does not generate text; open a decoder "
                "(GPT-2, LLaMA, ...) or an encoder-decoder (T5, BART, Marian)"
            )
        if model.headless:
            raise NoLMHead(model.name, "generation")
        if sampling not in SAMPLING:
            raise ConfigError(f"sampling must be one of {', '.join(SAMPLING)}, got {sampling!r}")
        if not (isinstance(temperature, (int, float)) and temperature > 0 and np.isfinite(temperature)):
            raise ConfigError(f"temperature must be a positive number, got {temperature!r}")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise ConfigError(f"top_k must be a whole number >= 1 (or None for all tokens), got {top_k!r}")
        self.model, self.sampling, self.temperature, self.top_k, self.top = (
            model,
            sampling,
            float(temperature),
            top_k,
            int(top),
        )
        self.max_new_tokens = int(max_new_tokens)
        self._ablate = ablation_heads(ablation_items(model, ablate))
        self._rng = torch.Generator().manual_seed(int(seed))
        self.source = encode(model, text)
        self.ids: list[int] = self._start(target)  # the (decoder) sequence so far
        self.prompt_length = len(self.ids)
        self.steps: list[GenerationStep] = []
        self.finished = False
        self._cache = None
        self._fed = 0  # positions of self.ids already in the cache
        self._encoded = None  # encoder-decoders: the encoder's output, computed once

    def _start(self, target: str | None) -> list[int]:
        if self.model.family == "decoder":
            if target is not None:
                raise ConfigError(
                    f"{self.model.name} is a decoder: it continues the text itself; leave the target empty"
                )
            return list(self.source.ids)
        start = getattr(self.model.model.config, "decoder_start_token_id", None)
        prefix = self.model.tokenizer(text_target=target, add_special_tokens=False)["input_ids"] if target else []
        return [0 if start is None else int(start), *map(int, prefix)]

    @property
    def tokens(self) -> list[str]:
        """The (decoder) sequence so far: prompt and generated tokens."""
        return id_texts(self.model.tokenizer, self.ids)

    @property
    def text(self) -> str:
        """The generated part, decoded (special tokens left out)."""
        return cast(
            str, self.model.tokenizer.decode(self.ids[self.prompt_length :], skip_special_tokens=True)
        )  # one sequence: one str

    def _end_ids(self) -> set[int]:
        cfg = getattr(self.model.model, "generation_config", None)
        eos = getattr(cfg, "eos_token_id", None)
        if eos is None:
            eos = getattr(self.model.model.config, "eos_token_id", None)
        return set() if eos is None else {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}

    def _forward(self, ctx: JobContext) -> tuple[torch.Tensor, Capture]:
        """Feed the positions not yet in the cache; returns (logits of the last position, capture)."""
        model = self.model
        device = model.device
        new = torch.tensor([self.ids[self._fed :]], device=device)
        accepts = forward_parameters(type(model.model))  # type: ignore[arg-type]  # a class is hashable; mypy checks its unbound __hash__
        kwargs: dict = {"past_key_values": self._cache, "use_cache": True}
        if "logits_to_keep" in accepts:
            kwargs["logits_to_keep"] = 1
        if model.family == "encoder-decoder":
            if self._encoded is None:
                source = torch.tensor([self.source.ids], device=device)
                self._encoded = model.model.get_encoder()(input_ids=source)
            kwargs.update(encoder_outputs=self._encoded, decoder_input_ids=new)
        else:
            kwargs["input_ids"] = new
        capture = Capture(
            sites=model.sites,
            layers=model.layers,
            keep_weights=False,
            last_row=True,
            ablate=self._ablate,
            clock=ForwardClock((), ctx),
        )
        with capturing(capture):
            out = model.model(**kwargs)
        self._cache, self._fed = out.past_key_values, len(self.ids)
        return out.logits[0, -1], capture

    def _choose(self, logits: torch.Tensor) -> tuple[int, float, NextToken]:
        scaled = logits.float() / (self.temperature if self.sampling == "sample" else 1.0)
        probs = torch.softmax(scaled, dim=-1)
        if self.sampling == "greedy":
            choice = int(torch.argmax(probs))
        else:
            pool = probs
            if self.top_k is not None and self.top_k < probs.numel():
                kept = torch.topk(probs, self.top_k).indices
                pool = torch.zeros_like(probs).index_copy_(0, kept, probs[kept])
            choice = int(torch.multinomial(pool / pool.sum(), 1, generator=self._rng))
        return choice, float(probs[choice]), next_token(self.model, scaled, self.top)

    def _rows(self, capture: Capture, part: str, keys: int) -> np.ndarray:
        """[layers, H, keys]: each layer's row, right-aligned (a sliding cache holds the last keys)."""
        rows = capture.rows[part]
        out = np.zeros((len(rows), rows[0].shape[0], keys), dtype=np.float32)
        for layer, row in enumerate(rows):
            out[layer, :, keys - row.shape[-1] :] = row
        return out

    def step(self, *, should_cancel: Callable[[], bool] | None = None, ctx: JobContext | None = None) -> GenerationStep:
        """Generate one token. Raises ConfigError once finished, Cancelled when ``ctx`` (or the older
        ``should_cancel``) asks to stop."""
        ctx = job_context(ctx, should_cancel=should_cancel)
        if self.finished:
            raise ConfigError(
                "generation has finished (end of sequence, position limit or max_new_tokens): start a new one"
            )
        start = time.perf_counter()
        with self.model._lock, torch.inference_mode():
            try:
                logits, capture = self._forward(ctx)
            except Cancelled:
                self._cache, self._fed = None, 0  # some layers may hold the half-fed positions
                raise
            choice, probability, distribution = self._choose(logits)
        part = "self" if self.model.family == "decoder" else "decoder"
        position = len(self.ids) - 1
        attention = self._rows(capture, part, len(self.ids))
        cross = self._rows(capture, "cross", len(self.source.ids)) if part == "decoder" else None
        self.ids.append(choice)
        limit = self.model.max_tokens
        self.finished = (
            choice in self._end_ids()
            or len(self.steps) + 1 >= self.max_new_tokens
            or (limit is not None and len(self.ids) >= limit)
        )
        step = GenerationStep(
            index=len(self.steps),
            token_id=choice,
            token=id_texts(self.model.tokenizer, [choice])[0],
            probability=probability,
            distribution=distribution,
            query_position=position,
            attention=attention,
            cross_attention=cross,
            finished=self.finished,
            seconds=time.perf_counter() - start,
        )
        self.steps.append(step)
        return step

    def run(
        self,
        count: int,
        *,
        progress: ProgressFn | None = None,
        should_cancel: Callable[[], bool] | None = None,
        ctx: JobContext | None = None,
    ) -> list[GenerationStep]:
        """Up to ``count`` steps (fewer once finished); progress after each."""
        ctx = job_context(ctx, progress=progress, should_cancel=should_cancel)
        done = []
        for i in range(int(count)):
            if self.finished:
                break
            ctx.check()
            done.append(self.step(ctx=ctx))
            ctx.progress((i + 1) / count, f"token {i + 1} of {count}: {done[-1].token}")
        return done


__all__ = ["SAMPLING", "GenerationStep", "Generator"]
