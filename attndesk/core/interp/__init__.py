"""Interpretability on a loaded model (``load_pretrained``): activation patching and its
first-order approximation, input attributions, attention flow, the logit lens and direct logit
attribution. Pure functions returning dataclasses of numpy arrays with their labels; the long
ones take ``progress(fraction, message)`` and a ``cancel`` ``threading.Event`` and size their
batches against a memory budget in bytes. Nothing here imports Qt."""

from .patching import (
    SITES,
    PatchingReport,
    PatchingResult,
    activation_patching,
    patch_heads,
)

__all__ = ["SITES", "PatchingReport", "PatchingResult", "activation_patching", "patch_heads"]
