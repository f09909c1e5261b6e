"""Train a vision model of a ``VisionSpec`` on its image task (Qt-free).

Plain minibatch training: AdamW with a one-cycle learning rate, cross-entropy, the order of the
images from a generator seeded with the spec's seed, the weights from ``torch.manual_seed``.
The digits train on the fixed training rows every epoch; the shapes on ``train_images`` newly
drawn images each epoch (epoch ``e`` draws images ``e * n .. (e + 1) * n - 1`` of the train
split), so the model never sees a shape twice. The test set is evaluated after every epoch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from attndesk.jobs import JobContext, job_context

from .data import DIGITS_SPLIT_SEED, DIGITS_TEST_PER_CLASS, ImageSet, digits, shapes
from .models import VisionSpec, build_model, image_processor, pixel_values


@dataclass
class VisionRun:
    """A trained model, its image processor and what its training records: the spec, the split,
    each epoch's mean loss and test accuracy (``history``), the final test accuracy, the time and
    the thread count it trained on."""

    spec: VisionSpec
    model: Any  # a transformers image classifier
    processor: Any
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    threads: int = 0

    @property
    def accuracy(self) -> float:
        return self.history[-1]["test_accuracy"] if self.history else float("nan")


def evaluation_set(spec: VisionSpec) -> ImageSet:
    """The images a spec's model is evaluated on: the digits' test rows, or the shapes' test split."""
    if spec.task == "digits":
        return digits("test")
    return shapes("test", spec.test_images, seed=spec.seed)


def split_record(spec: VisionSpec) -> dict[str, Any]:
    """The split as a run records it: for the digits the split's seed and every test row of
    ``load_digits``; for the shapes the drawing seed and how many images each split has."""
    if spec.task == "digits":
        return {
            "source": "sklearn.datasets.load_digits",
            "split_seed": DIGITS_SPLIT_SEED,
            "test_per_class": DIGITS_TEST_PER_CLASS,
            "test_rows": [int(r) for r in digits("test").index],
            "train_images": len(digits("train")),
        }
    return {
        "source": "attndesk.train.images.data.shapes",
        "seed": spec.seed,
        "train_images": spec.train_images * spec.epochs,
        "train_drawn_per_epoch": spec.train_images,
        "test_images": spec.test_images,
    }


@torch.no_grad()
def predict(model: Any, pixels: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """The model's class probabilities ``[n, classes]`` for ``[n, 3, H, W]`` pixel values."""
    model.eval()
    out = [
        torch.softmax(model(pixel_values=pixels[i : i + batch]).logits, dim=-1) for i in range(0, len(pixels), batch)
    ]
    return torch.cat(out)


def accuracy(model: Any, processor, data: ImageSet) -> float:
    """The fraction of ``data`` the model classifies right, through ``processor``."""
    guess = predict(model, pixel_values(processor, data.images)).argmax(-1).numpy()
    return float((guess == data.labels).mean())


def _epoch_data(spec: VisionSpec, processor, epoch: int, fixed: tuple[torch.Tensor, torch.Tensor] | None):
    if fixed is not None:
        return fixed
    drawn = shapes("train", spec.train_images, seed=spec.seed, start=epoch * spec.train_images)
    return pixel_values(processor, drawn.images), torch.as_tensor(drawn.labels)


def train_vision(spec: VisionSpec, *, ctx: JobContext | None = None) -> VisionRun:
    """Train a model of ``spec`` for its epochs (stopping early, with what it has, when ``ctx``
    is cancelled); the thread count is the caller's."""
    ctx = job_context(ctx)
    wall, cpu = time.perf_counter(), time.process_time()
    processor = image_processor(spec)
    test = evaluation_set(spec)
    test_pixels = pixel_values(processor, test.images)
    fixed = None
    if spec.task == "digits":
        train = digits("train")
        fixed = (pixel_values(processor, train.images), torch.as_tensor(train.labels))
    classes = test.classes
    torch.manual_seed(spec.seed)
    model = build_model(spec, classes)
    order = torch.Generator().manual_seed(spec.seed)
    per_epoch = len(fixed[1]) if fixed is not None else spec.train_images
    batches = -(-per_epoch // spec.batch)
    optimiser = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, max_lr=spec.lr, total_steps=spec.epochs * batches, pct_start=0.1
    )
    run = VisionRun(spec, model, processor, threads=torch.get_num_threads())
    for epoch in range(spec.epochs):
        if ctx.cancelled:
            break
        x, y = _epoch_data(spec, processor, epoch, fixed)
        model.train()
        perm = torch.randperm(len(y), generator=order)
        total = 0.0
        for start in range(0, len(y), spec.batch):
            rows = perm[start : start + spec.batch]
            loss = torch.nn.functional.cross_entropy(model(pixel_values=x[rows]).logits, y[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += loss.item() * len(rows)
        guess = predict(model, test_pixels).argmax(-1).numpy()
        row = {"epoch": epoch + 1, "loss": total / len(y), "test_accuracy": float((guess == test.labels).mean())}
        run.history.append(row)
        ctx.report(row)
        ctx.progress(
            (epoch + 1) / spec.epochs, f"epoch {epoch + 1} of {spec.epochs}: test accuracy {row['test_accuracy']:.3f}"
        )
    model.eval()
    run.seconds = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    return run


__all__ = ["VisionRun", "accuracy", "evaluation_set", "predict", "split_record", "train_vision"]
