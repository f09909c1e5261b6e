"""The Train tab: its view (``view``), its settings form (``form``), its curves (``curves``) and its
presenter (``presenter``)."""

from .view import TimelineSlider, TrainView

__all__ = ["TimelineSlider", "TrainView"]
