"""A trained (or training) model with its task, history and checkpoints: what ``train`` returns
and ``load_trained`` reads back."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from attndesk import __version__
from attndesk.attention.kernel import FAST_PATH_MIN_ELEMENTS
from attndesk.errors import ConfigError
from attndesk.files.atomic import StagedFolder, current_umask

from .checkpoints import CheckpointStore
from .config import TrainConfig
from .model import Decoder, build_model
from .tasks import Batch, Task, Text


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
        if not 1 <= ids.shape[1] <= self.cfg.length:
            raise ConfigError(f"ids hold {ids.shape[1]} tokens; this model reads 1 to {self.cfg.length}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.cfg.vocab):
            raise ConfigError(f"token ids must be in 0..{self.cfg.vocab - 1}, got {int(ids.min())}..{int(ids.max())}")
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
        return {
            "loss": float(loss),
            "accuracy": self.task.accuracy(logits, batch),
            "pattern": float(np.max(scores)),
            "scores": scores,
        }

    def at_checkpoint(self, step: int) -> TrainRun:
        """A copy of this run with the weights of the checkpoint at ``step``."""
        model = build_model(self.cfg)
        model.load_state_dict(self.checkpoints.get(step).state)
        return TrainRun(
            self.cfg,
            self.task,
            model,
            step=step,
            history=[r for r in self.history if r["step"] <= step],
            status=self.status,
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the folder ``path`` (all or nothing): see ``attndesk.train.store``."""
        save_run(self, path)


# --- writing a run (the format: attndesk.train.store) ------------------------------------------

FORMAT = "attndesk-trained"
FORMAT_VERSION = 1


def _version() -> str:

    return __version__


def run_metadata(run: TrainRun) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "attndesk_version": _version(),
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "task": run.cfg.task,
        "seed": run.cfg.seed,
        "step": run.step,
        "status": run.status,
        "message": run.message,
        "train_config": run.cfg.to_dict(),
        "token_labels": run.task.token_labels(),
        "checkpoint_steps": run.checkpoints.steps,
        "probe_ids": run.task.probe().ids[0].tolist(),
    }
    if isinstance(run.task, Text):
        meta["text_vocab"] = run.task.vocab
    return meta


def _contiguous(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.detach().contiguous() for name, t in state.items()}


def save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to the safetensors file ``path``, readable as the umask allows
    (safetensors creates its files private)."""
    save_file(_contiguous(tensors), str(path), metadata={"format": FORMAT} | (metadata or {}))
    os.chmod(path, 0o666 & ~current_umask())


def write_run_files(run: TrainRun, path_of: Callable[[str], Path], extra: dict[str, Any] | None = None) -> None:
    """Write the run's files where ``path_of(name)`` says (a staged folder's ``path``)."""
    meta = run_metadata(run) | (extra or {})
    save_tensors(run.model.state_dict(), path_of("model.safetensors"), {"step": str(run.step)})
    if run.checkpoints.items:
        tensors = {f"step{c.step:08d}/{name}": t for c in run.checkpoints.items for name, t in c.state.items()}
        save_tensors(tensors, path_of("checkpoints.safetensors"))
    path_of("history.json").write_text(json.dumps(run.history), encoding="utf-8")
    path_of("config.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")


def save_run(run: TrainRun, path: str | os.PathLike, *, extra: dict[str, Any] | None = None) -> Path:
    """Write ``run`` into the folder ``path``; files of the same names are replaced together."""
    target = Path(path).expanduser()
    try:
        with StagedFolder(target) as stage:
            write_run_files(run, stage.path, extra)
    except OSError as exc:
        raise ConfigError(f"cannot write the trained model to {target}: {exc.strerror or exc}") from None
    return target
