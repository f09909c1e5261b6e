"""The training tasks: seeded batch generators with a documented format, an exact accuracy and
the attention pattern a solution needs, measured on the model's weights.

Every task yields ``Batch(ids, targets, mask)``: ``ids`` int64 [B, L], ``targets`` [B, L] the
token each position must predict, ``mask`` bool [B, L] the positions that are scored (the loss
and the accuracy use only those). Accuracy = argmax(logits) == target over the mask, exactly.

A pattern score is per layer and head, in [0, 1]: the mean, over the queries where the pattern
applies, of the attention weight on the keys the pattern names (``pattern_targets``); the
task's score is the best head's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch

from attndesk.errors import ConfigError
from attndesk.files.textfile import read_text_file

from .config import TrainConfig

PROBE_SEED = 20_240_601  # the fixed probe input: the same sequence at every step and seed


@dataclass
class Batch:
    ids: torch.Tensor  # int64 [B, L]
    targets: torch.Tensor  # int64 [B, L]
    mask: torch.Tensor  # bool [B, L]: scored positions


def _lm_targets(ids: torch.Tensor) -> torch.Tensor:
    """targets[t] = ids[t + 1] (the last position gets 0 and must be left out of the mask)."""
    targets = torch.zeros_like(ids)
    targets[:, :-1] = ids[:, 1:]
    return targets


class Task:
    """A task: ``sample`` a batch, ``accuracy`` of logits, ``pattern_scores`` of weights."""

    name = ""
    pattern = ""  # the attention pattern a solution needs
    about = ""  # one line for the window and the CLI

    def __init__(self, cfg: TrainConfig):
        self.vocab_size, self.seq_len = int(cfg.vocab), int(cfg.length)

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def token_labels(self) -> list[str]:
        return [str(i) for i in range(self.vocab_size)]

    def labels(self, ids: torch.Tensor) -> list[str]:
        names = self.token_labels()
        return [names[int(i)] for i in ids]

    def answer_rows(self, ids: Sequence[int]) -> list[int] | None:
        """The rows a sequence of this task's layout is scored at (each predicts an answer token),
        or None where the task does not mark its answers by place or ``ids`` is not of its layout."""
        return None

    def probe(self) -> Batch:
        """One fixed sequence (the same for every seed): the input of probe snapshots and figures."""
        return self.sample(1, torch.Generator().manual_seed(PROBE_SEED))

    @staticmethod
    def accuracy(logits: torch.Tensor, batch: Batch) -> float:
        """The share of scored positions whose argmax is the target (exact, no tolerance)."""
        hits = (logits.argmax(dim=-1) == batch.targets)[batch.mask]
        return float(hits.double().mean()) if hits.numel() else float("nan")

    def pattern_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys [B, L, L] float: 1 on the keys the pattern names, queries [B, L] bool)."""
        raise NotImplementedError

    def pattern_scores(self, weights: torch.Tensor, batch: Batch) -> np.ndarray:
        """weights [B, layers, H, L, L] -> [layers, H]: the mean weight on the pattern's keys."""
        keys, queries = self.pattern_targets(batch)
        on_keys = (weights.double() * keys[:, None, None].double()).sum(-1)  # [B, layers, H, L]
        q = queries[:, None, None].expand_as(on_keys)
        total = (on_keys * q).sum(dim=(0, 3))
        return (total / q[:, 0, 0].sum().clamp(min=1)).numpy()


class Induction(Task):
    """``[BOS, s_1..s_n, s_1..s_n, s_1 ...]``: BOS (token 0), then a segment of n distinct random
    tokens from 1..V-1, n uniform in [2, (L-1)//2] per sequence, repeated to the end. Scored: every
    position inside a repeat (its token occurred n earlier), predicting the next token. The segment
    length varies, so only content (find the earlier occurrence, copy what followed) solves it.
    Pattern ``induction``: a query in a repeat weighs the keys after its token's earlier occurrences."""

    name, pattern = "induction", "induction"
    about = "a random segment repeated to the end: continue the repeat (induction heads)"

    def __init__(self, cfg: TrainConfig):
        super().__init__(cfg)
        self.longest = (self.seq_len - 1) // 2
        if self.vocab_size - 1 < self.longest:
            raise ConfigError(
                f"induction draws segments of up to (seq_len - 1) // 2 = {self.longest} distinct tokens, but "
                f"vocab_size {self.vocab_size} has only {self.vocab_size - 1} data tokens: raise vocab_size to "
                f"{self.longest + 1} or shorten seq_len to {2 * (self.vocab_size - 1) + 1}",
                field="vocab_size",
            )

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        length = self.seq_len
        seg_len = torch.randint(2, self.longest + 1, (batch,), generator=generator)
        segment = torch.rand(batch, self.vocab_size - 1, generator=generator).argsort(dim=1)[:, : self.longest] + 1
        index = torch.arange(length - 1)[None] % seg_len[:, None]
        ids = torch.zeros(batch, length, dtype=torch.int64)
        ids[:, 1:] = torch.gather(segment, 1, index)
        t = torch.arange(length)[None]
        mask = (t >= seg_len[:, None] + 1) & (t <= length - 2)
        return Batch(ids, _lm_targets(ids), mask)

    def segment_lengths(self, batch: Batch) -> torch.Tensor:
        """n per sequence: the first position after 1 whose token is ids[1]."""
        ids = batch.ids
        same = ids[:, 2:] == ids[:, 1:2]
        return same.int().argmax(dim=1) + 1

    def pattern_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Query t in a repeat -> every key j <= t whose previous token ids[j-1] (j-1 < t) equals
        ids[t]: the token after each earlier occurrence (each holds the answer)."""
        ids = batch.ids
        n = self.segment_lengths(batch)
        length = ids.shape[1]
        t = torch.arange(length)
        queries = t[None] >= n[:, None] + 1
        keys = torch.zeros(ids.shape[0], length, length)
        earlier = (t[None, :] - 1 < t[:, None]) & (t[None, :] >= 2)  # [query t, key j]: 2 <= j <= t
        same = ids[:, None, :-1] == ids[:, :, None]  # [B, t, j-1]: ids[j-1] == ids[t]
        keys[:, :, 1:] = (same & earlier[None, :, 1:]).float()
        return keys, queries

    def token_labels(self) -> list[str]:
        return ["BOS"] + [f"t{i}" for i in range(1, self.vocab_size)]


class _Transduce(Task):
    """``[BOS, x_1..x_n, SEP, y_1..y_n]`` with BOS 0, SEP 1, data tokens 2..V-1 and n = (L-2)/2;
    scored: SEP..y_{n-1}, predicting y_1..y_n (``y`` is the task's function of ``x``)."""

    def __init__(self, cfg: TrainConfig):
        super().__init__(cfg)
        if self.seq_len % 2:
            raise ConfigError(
                f"{self.name} needs an even seq_len (BOS, n tokens, SEP, n answers), got "
                f"{self.seq_len}: use {self.seq_len - 1} or {self.seq_len + 1}",
                field="seq_len",
            )
        if self.vocab_size < 4:
            raise ConfigError(
                f"{self.name} needs vocab_size >= 4 (BOS, SEP and two data tokens), got {self.vocab_size}",
                field="vocab_size",
            )
        self.n = (self.seq_len - 2) // 2

    def answer(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        x = torch.randint(2, self.vocab_size, (batch, self.n), generator=generator)
        ids = torch.cat(
            [torch.zeros(batch, 1, dtype=torch.int64), x, torch.ones(batch, 1, dtype=torch.int64), self.answer(x)],
            dim=1,
        )
        t = torch.arange(self.seq_len)[None].expand(batch, -1)
        return Batch(ids, _lm_targets(ids), (t >= self.n + 1) & (t <= 2 * self.n))

    def answer_rows(self, ids: Sequence[int]) -> list[int] | None:
        n = self.n
        if len(ids) != self.seq_len or ids[0] != 0 or ids[n + 1] != 1:
            return None
        return list(range(n + 1, 2 * n + 1))

    def source_keys(self, batch: Batch) -> torch.Tensor:
        """[B, n, n]: 1 where x_k (key position k + 1) is the source of answer i."""
        raise NotImplementedError

    def pattern_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        b_count, length, n = batch.ids.shape[0], self.seq_len, self.n
        keys = torch.zeros(b_count, length, length)
        keys[:, n + 1 : 2 * n + 1, 1 : n + 1] = self.source_keys(batch)
        queries = torch.zeros(b_count, length, dtype=torch.bool)
        queries[:, n + 1 : 2 * n + 1] = True
        return keys, queries

    def token_labels(self) -> list[str]:
        return ["BOS", "SEP"] + [str(i) for i in range(self.vocab_size - 2)]


class Copy(_Transduce):
    __doc__ = (_Transduce.__doc__ or "") + "\n    ``y = x``. Pattern ``copy``: answer i weighs x_i (a fixed offset n)."
    name, pattern, about = "copy", "copy", "copy the tokens after SEP"

    def answer(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    def source_keys(self, batch: Batch) -> torch.Tensor:
        return torch.eye(self.n).expand(batch.ids.shape[0], -1, -1)


class Reverse(_Transduce):
    __doc__ = (
        _Transduce.__doc__ or ""
    ) + "\n    ``y = x reversed``. Pattern ``anti-diagonal``: answer i weighs x_(n+1-i)."
    name, pattern, about = "reverse", "anti-diagonal", "write the tokens in reverse after SEP"

    def answer(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(1)

    def source_keys(self, batch: Batch) -> torch.Tensor:
        return torch.eye(self.n).flip(1).expand(batch.ids.shape[0], -1, -1)


class Sort(_Transduce):
    __doc__ = (
        _Transduce.__doc__ or ""
    ) + "\n    ``y = x sorted``. Pattern ``sorted-source``: answer i weighs the x equal to y_i."
    name, pattern, about = "sort", "sorted-source", "write the tokens sorted after SEP"

    def answer(self, x: torch.Tensor) -> torch.Tensor:
        return x.sort(dim=1).values

    def source_keys(self, batch: Batch) -> torch.Tensor:
        n = self.n
        x, y = batch.ids[:, 1 : n + 1], batch.ids[:, n + 2 :]
        return (y[:, :, None] == x[:, None, :]).float()  # [B, answer, source]


class PreviousToken(Task):
    """``[BOS, r_1..r_(L-1)]``, random tokens 1..V-1; position t >= 1 must output r_(t-1) (BOS at t = 1).
    Pattern ``previous-token``: query t weighs key t - 1. Needs positions (not ``none``)."""

    name, pattern, about = "previous-token", "previous-token", "output the token before this one"

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        ids = torch.randint(1, self.vocab_size, (batch, self.seq_len), generator=generator)
        ids[:, 0] = 0
        targets = torch.zeros_like(ids)
        targets[:, 1:] = ids[:, :-1]
        mask = torch.ones_like(ids, dtype=torch.bool)
        mask[:, 0] = False
        return Batch(ids, targets, mask)

    def pattern_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        b_count, length = batch.ids.shape
        keys = torch.diag_embed(torch.ones(length - 1), offset=-1).expand(b_count, -1, -1)
        queries = torch.ones(b_count, length, dtype=torch.bool)
        queries[:, 0] = False
        return keys, queries

    def token_labels(self) -> list[str]:
        return ["BOS"] + [f"t{i}" for i in range(1, self.vocab_size)]


class Brackets(Task):
    """``[BOS, b_1..b_(L-1)]`` with ``(`` = 1 and ``)`` = 2, a random walk of depth 0..D
    (D = V - 4; ``(`` or ``)`` with equal odds, forced at depth 0 and D). Position t >= 1 outputs
    the depth after b_t as token 3 + depth. Pattern ``uniform-prefix``: counting needs a head
    spread evenly over the prefix; its score is 1 - total variation from uniform over keys 0..t."""

    name, pattern, about = "brackets", "uniform-prefix", "say the nesting depth after each bracket"

    def __init__(self, cfg: TrainConfig):
        super().__init__(cfg)
        self.depth = self.vocab_size - 4
        if self.depth < 1:
            raise ConfigError(
                f"brackets needs vocab_size >= 5 (BOS, '(', ')' and depths 0..V-4), got {self.vocab_size}",
                field="vocab_size",
            )

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        coin = torch.rand(batch, self.seq_len - 1, generator=generator) < 0.5
        ids = torch.zeros(batch, self.seq_len, dtype=torch.int64)
        targets = torch.zeros_like(ids)
        depth = torch.zeros(batch, dtype=torch.int64)
        for t in range(1, self.seq_len):  # a short loop over positions, vectorised over the batch
            opens = torch.where(depth == 0, True, torch.where(depth == self.depth, False, coin[:, t - 1]))
            depth = depth + torch.where(opens, 1, -1)
            ids[:, t] = torch.where(opens, 1, 2)
            targets[:, t] = 3 + depth
        mask = torch.ones_like(ids, dtype=torch.bool)
        mask[:, 0] = False
        return Batch(ids, targets, mask)

    def pattern_scores(self, weights: torch.Tensor, batch: Batch) -> np.ndarray:
        length = weights.shape[-1]
        uniform = torch.tril(torch.ones(length, length, dtype=torch.float64))
        uniform = uniform / uniform.sum(-1, keepdim=True)
        overlap = torch.minimum(weights.double(), uniform).sum(-1)[..., 1:]  # [B, layers, H, L-1]
        return overlap.mean(dim=(0, 3)).numpy()

    def token_labels(self) -> list[str]:
        return ["BOS", "(", ")"] + [f"d{i}" for i in range(self.vocab_size - 3)]


class Needle(Task):
    """Needle in a haystack: ``[BOS, filler.., k, v_1..v_m, filler.., SEP, k, v_1..v_m]`` with BOS 0,
    SEP 1 (the query marker) and data tokens 2..V-1. The needle is a key ``k`` followed by its
    value of m = ``VALUE_TOKENS`` tokens, planted at a uniform place in filler drawn uniformly
    from the data tokens other than ``k`` (so the key occurs once in the haystack; the value's
    tokens differ from ``k`` too). The query ``SEP k`` asks for the value; scored: the query's
    ``k`` and v_1..v_(m-1), predicting v_1..v_m. Pattern ``needle``: answer i weighs the needle's
    v_i, the token it must copy (what a retrieval head does)."""

    name, pattern, about = "needle", "needle", "a key and its value hidden in filler: give the value when asked"
    VALUE_TOKENS = 2

    def __init__(self, cfg: TrainConfig):
        super().__init__(cfg)
        m = self.VALUE_TOKENS
        if self.vocab_size < 5:
            raise ConfigError(
                f"needle needs vocab_size >= 5 (BOS, SEP, a key and at least two other data tokens), got "
                f"{self.vocab_size}",
                field="vocab_size",
            )
        self.haystack = self.seq_len - 3 - m  # between BOS and the query SEP, k, v_1..v_m
        if self.haystack < 1 + m:
            raise ConfigError(
                f"needle needs seq_len >= {2 * m + 4} (BOS, the needle of {1 + m} tokens, SEP and the "
                f"{1 + m}-token query), got {self.seq_len}",
                field="seq_len",
            )

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        m, hay, vocab = self.VALUE_TOKENS, self.haystack, self.vocab_size
        key = torch.randint(2, vocab, (batch, 1), generator=generator)

        def not_key(shape: tuple[int, ...]) -> torch.Tensor:  # uniform over the data tokens except k
            draw = torch.randint(2, vocab - 1, shape, generator=generator)
            return draw + (draw >= key).long()

        filler, value = not_key((batch, hay)), not_key((batch, m))
        place = torch.randint(0, hay - m, (batch, 1), generator=generator)  # the key's index in the haystack
        index = place + torch.arange(1, m + 1)[None]
        filler.scatter_(1, place, key)
        filler.scatter_(1, index, value)
        bos, sep = torch.zeros(batch, 1, dtype=torch.int64), torch.ones(batch, 1, dtype=torch.int64)
        ids = torch.cat([bos, filler, sep, key, value], dim=1)
        t = torch.arange(self.seq_len)[None].expand(batch, -1)
        return Batch(ids, _lm_targets(ids), (t >= self.seq_len - 1 - m) & (t <= self.seq_len - 2))

    def answer_rows(self, ids: Sequence[int]) -> list[int] | None:
        m = self.VALUE_TOKENS
        if len(ids) != self.seq_len or ids[0] != 0 or ids[self.seq_len - 2 - m] != 1:
            return None
        return list(range(self.seq_len - 1 - m, self.seq_len - 1))

    def needle_positions(self, batch: Batch) -> torch.Tensor:
        """[B]: the position of the planted key in ``ids`` (its value follows it)."""
        hay = batch.ids[:, 1 : 1 + self.haystack]
        key = batch.ids[:, self.seq_len - 1 - self.VALUE_TOKENS]
        return (hay == key[:, None]).int().argmax(dim=1) + 1

    def answer_sources(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(queries [m]: the scored positions, sources [B, m]: the needle position each one copies)."""
        m = self.VALUE_TOKENS
        queries = torch.arange(self.seq_len - 1 - m, self.seq_len - 1)
        return queries, self.needle_positions(batch)[:, None] + torch.arange(1, m + 1)[None]

    def pattern_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        b_count, length = batch.ids.shape
        queries, sources = self.answer_sources(batch)
        keys = torch.zeros(b_count, length, length)
        rows = torch.arange(b_count)[:, None]
        keys[rows, queries[None], sources] = 1.0
        scored = torch.zeros(b_count, length, dtype=torch.bool)
        scored[:, queries] = True
        return keys, scored

    def token_labels(self) -> list[str]:
        return ["BOS", "SEP"] + [str(i) for i in range(self.vocab_size - 2)]


_WORD = re.compile(r"\w+|[^\w\s]")


def sample_text() -> str:
    """The bundled text for ``task="text"`` without a file."""
    return resources.files("attndesk.resources").joinpath("sample.txt").read_text(encoding="utf-8")


def read_training_text(path: str | None) -> str:
    """The text of ``path`` (the core's reader: binary, empty, huge and non-UTF-8 files are a
    ConfigError with one line) or the bundled sample."""

    return sample_text() if path is None else read_text_file(path)


class Text(Task):
    """Next-token prediction on a text, character or word level. Vocabulary: ``<unk>`` (0) and the
    vocab_size - 1 most frequent characters or words (ties in first-seen order). A batch is
    random windows of L tokens, each predicting the next; all positions scored. Pattern
    ``previous-token`` (query t weighs key t - 1), the head small text models form first."""

    name, pattern, about = "text", "previous-token", "predict the next character or word of a text"
    fixed_probe: torch.Tensor | None = None  # a loaded model's probe: its own text, not the filler

    def __init__(self, cfg: TrainConfig, text: str | None = None):
        super().__init__(cfg)
        self.level = cfg.text_level
        text = read_training_text(cfg.text_path) if text is None else text
        pieces = list(text) if self.level == "char" else _WORD.findall(text)
        ranked = [p for p, _ in Counter(pieces).most_common(self.vocab_size - 1)]
        self.vocab = ["<unk>"] + ranked
        index = {p: i for i, p in enumerate(self.vocab)}
        self.corpus = torch.tensor([index.get(p, 0) for p in pieces], dtype=torch.int64)
        if self.corpus.numel() < self.seq_len + 1:
            raise ConfigError(
                f"the text has {self.corpus.numel():,} {self.level}s, fewer than seq_len + 1 = "
                f"{self.seq_len + 1}: give a longer text or a shorter seq_len",
                field="seq_len",
            )

    def sample(self, batch: int, generator: torch.Generator) -> Batch:
        starts = torch.randint(0, self.corpus.numel() - self.seq_len, (batch,), generator=generator)
        window = starts[:, None] + torch.arange(self.seq_len + 1)[None]
        chunk = self.corpus[window]
        return Batch(
            chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous(), torch.ones(batch, self.seq_len, dtype=torch.bool)
        )

    def probe(self) -> Batch:
        if self.fixed_probe is None:
            return super().probe()
        ids = self.fixed_probe
        targets = torch.zeros_like(ids)
        targets[:, :-1] = ids[:, 1:]
        mask = torch.ones_like(ids, dtype=torch.bool)
        mask[:, -1] = False
        return Batch(ids, targets, mask)

    def pattern_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return PreviousToken.pattern_targets(self, batch)  # type: ignore[arg-type]

    def token_labels(self) -> list[str]:
        shown = [repr(p)[1:-1] if self.level == "char" else p for p in self.vocab]
        return shown + [f"<{i}>" for i in range(len(shown), self.vocab_size)]


TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (Induction, Copy, Reverse, Sort, PreviousToken, Brackets, Needle, Text)
}


def make_task(cfg: TrainConfig, text: str | None = None) -> Task:
    """The task of ``cfg`` (validated first); ConfigError for a shape the task cannot use."""
    cfg.validate()
    if cfg.task == "text":
        return Text(cfg, text)
    return TASKS[cfg.task](cfg)
