"""The toy model's built-in word-level tokenizer: lower-case words and punctuation marks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

PAD, UNK = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1
# A word is a run of letters/digits (apostrophes inside words split off, like most tokenizers);
# every other non-space character is a token of its own.
_TOKEN_RE = re.compile(r"[^\W_]+|[^\w\s]|_", re.UNICODE)


@lru_cache(maxsize=1)
def _word_list() -> tuple[str, ...]:
    text = resources.files("attndesk.resources").joinpath("vocab.txt").read_text(encoding="utf-8")
    return tuple(w for w in text.splitlines() if w)


@dataclass(frozen=True)
class Tokenized:
    tokens: list[str]  # what the view shows: the word itself, or [PAD]; unknown words keep their text
    ids: list[int]
    unknown: list[bool]  # True where the word fell outside the vocabulary (id = UNK_ID)


class WordTokenizer:
    """Ids: [PAD]=0, [UNK]=1, then the ``vocab_size - 2`` most common words of a packaged list."""

    def __init__(self, vocab_size: int = 8192):
        words = _word_list()[: max(0, vocab_size - 2)]
        self.vocab_size = vocab_size
        self._ids = {w: i + 2 for i, w in enumerate(words)}

    def split(self, text: str) -> list[str]:
        return _TOKEN_RE.findall(text.lower())

    def encode(self, text: str, pad_to: int | None = None) -> Tokenized:
        words = self.split(text)
        ids = [self._ids.get(w, UNK_ID) for w in words]
        unknown = [i == UNK_ID for i in ids]
        tokens = list(words)
        if pad_to is not None and len(ids) < pad_to:
            extra = pad_to - len(ids)
            tokens += [PAD] * extra
            ids += [PAD_ID] * extra
            unknown += [False] * extra
        return Tokenized(tokens, ids, unknown)
