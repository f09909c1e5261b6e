"""Image tasks for the trainer (Qt-free): scikit-learn's 8x8 digits with a fixed split and
procedurally drawn shapes with their masks, small ViT and DINOv2 classifiers built from
transformers' configs, their training, and the vision presets shipped as transformers folders:
``data`` (the images), ``models`` (the classifiers), ``trainer`` and ``presets``.

See docs/vision.md.
"""

from __future__ import annotations

from .data import SHAPE_CLASSES, ImageSet, digits, digits_split, draw_shape, shapes
from .models import ARCHITECTURES, VisionSpec, build_model, image_processor, pixel_values
from .trainer import VisionRun, accuracy, evaluation_set, predict, train_vision

__all__ = [
    "ARCHITECTURES",
    "SHAPE_CLASSES",
    "ImageSet",
    "VisionRun",
    "VisionSpec",
    "accuracy",
    "build_model",
    "digits",
    "digits_split",
    "draw_shape",
    "evaluation_set",
    "image_processor",
    "pixel_values",
    "predict",
    "shapes",
    "train_vision",
]
