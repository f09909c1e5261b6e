"""The word list the long-text tests and the UI benchmarks build their inputs from (common
English words, "the" repeated, so some keys recur). No attndesk, no Qt: benchmarks import it as
``tests.words``."""

from __future__ import annotations

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "because",
    "it",
    "was",
    "tired",
    "and",
    "then",
    "the",
    "dog",
    "ran",
    "far",
    "away",
    "over",
    "the",
    "hill",
    "while",
    "birds",
    "sang",
    "softly",
    "in",
    "tall",
    "green",
    "trees",
    "near",
    "an",
    "old",
    "stone",
    "bridge",
]
