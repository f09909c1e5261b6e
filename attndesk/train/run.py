"""A trained (or training) model with its task, history and checkpoints: what ``train`` returns
and ``load_trained`` reads back."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attndesk.core.attention import FAST_PATH_MIN_ELEMENTS
from attndesk.core.errors import ConfigError

from .checkpoints import CheckpointStore
from .config import TrainConfig
from .model import Decoder
from .tasks import Batch, Task


@dataclass(eq=False)
class TrainRun:
    """``model`` after ``step`` updates; ``history`` rows ``{"step", "loss", "time_s"}`` plus
    ``accuracy`` and ``pattern`` on evaluation steps; ``status`` "new", "finished", "stopped"
    or "diverged" with a one-line ``message``."""

    cfg: TrainConfig
    task: Task
    model: Decoder
    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: CheckpointStore = field(default_factory=lambda: CheckpointStore(64 * 2**20))
    status: str = "new"
    message: str = ""

    def _check_ids(self, ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.dim() != 2:
            got = f"{ids.dtype} {list(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ConfigError(f"ids must be an int64 tensor [batch, length], got {got}")
        if not 1 <= ids.shape[1] <= self.cfg.seq_len:
            raise ConfigError(f"ids hold {ids.shape[1]} tokens; this model reads 1 to {self.cfg.seq_len}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.cfg.vocab_size):
            raise ConfigError(f"token ids must be in 0..{self.cfg.vocab_size - 1}, got {int(ids.min())}..{int(ids.max())}")
        return ids

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, L, vocab], attention [B, layers, heads, L, L]) in eval mode, no gradient."""
        ids = self._check_ids(ids)
        self.model.eval()
        # chunks small enough for the reference path: the CPU fast path pays per sequence and
        # only wins on long ones
        cells = self.cfg.heads * ids.shape[1] ** 2
        chunk = max(1, (FAST_PATH_MIN_ELEMENTS - 1) // cells)
        logits, weights = [], []
        with torch.no_grad():
            for part in ids.split(chunk):
                out, w = self.model(part)
                logits.append(out)
                weights.append(torch.stack(w, dim=1))
        return torch.cat(logits), torch.cat(weights)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.forward(ids)[0]

    def attention(self, ids: torch.Tensor) -> torch.Tensor:
        return self.forward(ids)[1]

    def evaluate(self, batch: Batch) -> dict[str, Any]:
        """Loss, exact accuracy and pattern scores [layers, heads] (``pattern`` = the best head)."""
        logits, weights = self.forward(batch.ids)
        loss = F.cross_entropy(logits[batch.mask], batch.targets[batch.mask])
        scores = self.task.pattern_scores(weights, batch)
        return {"loss": float(loss), "accuracy": self.task.accuracy(logits, batch),
                "pattern": float(np.max(scores)), "scores": scores}

    def at_checkpoint(self, step: int) -> TrainRun:
        """A copy of this run with the weights of the checkpoint at ``step``."""
        model = Decoder(self.cfg)
        model.load_state_dict(self.checkpoints.get(step).state)
        return TrainRun(self.cfg, self.task, model, step=step, history=[r for r in self.history if r["step"] <= step],
                        status=self.status)

    def save(self, path: str | os.PathLike) -> None:
        """Write the folder ``path`` (all or nothing): see ``attndesk.train.store``."""
        from .store import save_run

        save_run(self, path)
