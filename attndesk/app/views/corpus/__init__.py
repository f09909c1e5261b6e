"""The Corpus tab's view (``view``), its run controls (``controls``) and its plots (``plots``)."""

from .view import CorpusView

__all__ = ["CorpusView"]
