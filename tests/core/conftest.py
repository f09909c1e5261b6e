"""Shared by the core tests: ``text_of(n)``, a text of ``n`` words (the blocked, bounded and fast
paths are compared over it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

# a 16-word sentence with repeats ("the" three times), so some keys recur and rows differ
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "the",
    "mat",
    "while",
    "a",
    "dog",
    "watched",
    "it",
    "from",
    "the",
    "warm",
    "kitchen",
    "door",
]


@pytest.fixture(scope="session")
def text_of() -> Callable[[int], str]:
    """``text_of(n)``: ``n`` words of the sentence above, repeated as often as needed."""

    def text(n: int) -> str:
        return " ".join(WORDS[i % len(WORDS)] for i in range(n))

    return text
