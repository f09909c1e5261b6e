"""The Corpus tab's view (``view``) and its plots (``plots``)."""

from .view import CorpusView

__all__ = ["CorpusView"]
