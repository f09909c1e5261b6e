"""The Corpus tab: its view (``view``), its run controls (``controls``), its plots (``plots``) and its
presenter (``presenter``)."""

from .view import CorpusView

__all__ = ["CorpusView"]
