"""Shared by the attention tests: ``text_of(n)``, a text of ``n`` words (the blocked, bounded and fast
paths are compared over it), from the word list every long-text test uses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.words import WORDS


@pytest.fixture(scope="session")
def text_of() -> Callable[[int], str]:
    """``text_of(n)``: ``n`` words of the shared word list (``tests.words``), repeated as often as needed."""

    def text(n: int) -> str:
        return " ".join(WORDS[i % len(WORDS)] for i in range(n))

    return text
