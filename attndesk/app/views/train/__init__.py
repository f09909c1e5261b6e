"""The Train tab's view (``view``), its settings form (``form``) and its curves (``curves``)."""

from .view import TimelineSlider, TrainView

__all__ = ["TimelineSlider", "TrainView"]
