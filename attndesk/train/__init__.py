"""Train small decoders built from attndesk's own attention layer on toy tasks (Qt-free).

>>> from attndesk.train import TrainConfig, train, load_trained   # doctest: +SKIP
>>> run = train(TrainConfig(task="induction", seed=0))             # doctest: +SKIP
>>> run.save("induction-run"); load_trained("induction-run").attention(ids)  # doctest: +SKIP

See docs/train.md for the tasks, the presets and the figures; ``images`` holds the image tasks
and their vision models (docs/vision.md).

Modules: ``config`` (``TrainConfig``), ``tasks`` (the seeded batch generators), ``model`` (the
decoder, built from attndesk's own attention), ``trainer`` (the loop), ``run`` (``TrainRun``: a
model with its task, history and checkpoints), ``checkpoints`` (kept in memory within a budget),
``store`` (a run on disk, all or nothing), ``stages`` (a trained model's attention as the toy
views' result) and ``presets`` (the shipped trained models).
"""

from __future__ import annotations

from .config import TASK_NAMES, TRAIN_POSITIONS, TrainConfig
from .run import TrainRun
from .store import load_run
from .tasks import TASKS, Batch, Task, make_task
from .trainer import ProbeSnapshot, StepReport, Trainer, train


def load_trained(path):
    """The run saved in the folder ``path`` (see ``attndesk.train.store``)."""

    return load_run(path)


__all__ = [
    "TASKS",
    "TASK_NAMES",
    "TRAIN_POSITIONS",
    "Batch",
    "ProbeSnapshot",
    "StepReport",
    "Task",
    "TrainConfig",
    "TrainRun",
    "Trainer",
    "load_trained",
    "make_task",
    "train",
]
