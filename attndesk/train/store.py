"""A trained run on disk: one folder, written all or nothing.

- ``config.json``: ``format`` "attndesk-trained", ``format_version``, the attndesk and torch
  versions, the task, seed, step, status, the full ``train_config``, the token labels (and the
  text vocabulary for ``task="text"``), the final metrics and the thread count it ran on;
- ``model.safetensors``: the weights after ``step`` updates;
- ``checkpoints.safetensors``: every kept checkpoint, tensors named ``step00000250/<name>``;
- ``history.json``: the rows of ``TrainRun.history``.

A folder of another ``format_version`` is refused with one line (ConfigError).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from attndesk.errors import ConfigError

from .checkpoints import CheckpointStore
from .config import TrainConfig
from .model import build_model
from .run import FORMAT, FORMAT_VERSION, TrainRun, save_run, save_tensors, write_run_files
from .tasks import Task, Text, make_task

_FILES = ("config.json", "model.safetensors", "history.json")


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """config.json of a trained-model folder, checked for its format; ConfigError in one line."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder of a trained model (no such folder)")
    missing = [name for name in _FILES if not (folder / name).is_file()]
    if missing:
        raise ConfigError(f"{folder} is not a trained attndesk model: {', '.join(missing)} missing")
    try:
        meta = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{folder / 'config.json'} cannot be read as JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ConfigError(f"{folder} is not a trained attndesk model (config.json has no format {FORMAT!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ConfigError(
            f"{folder} is a trained model of format version {meta.get('format_version')!r} "
            f"(attndesk {meta.get('attndesk_version', '?')}); this attndesk reads version "
            f"{FORMAT_VERSION}: re-train it with this version"
        )
    return meta


def _task_for(cfg: TrainConfig, meta: dict[str, Any]) -> Task:
    if cfg.task == "text":
        vocab = meta.get("text_vocab")
        if not isinstance(vocab, list) or not vocab:
            raise ConfigError("a saved text model must carry its vocabulary (text_vocab) in config.json")
        # the vocabulary itself is a text long enough to rebuild the task without the original file
        sep = "" if cfg.text_level == "char" else " "
        filler = sep.join(vocab[1:]) or "?"
        task = make_task(cfg.replace(text_path=None), (filler + sep) * (int(cfg.seq_len or 0) + 2))
        assert isinstance(task, Text)
        task.vocab = list(vocab)
        probe = meta.get("probe_ids")
        if isinstance(probe, list) and len(probe) == cfg.seq_len:
            task.fixed_probe = torch.tensor([probe], dtype=torch.int64)  # the text the run was shown
        return task
    return make_task(cfg)


def load_run(path: str | os.PathLike) -> TrainRun:
    """The run saved in ``path``: its weights, history and checkpoints (ConfigError for a folder
    that is not one, or of another format version)."""
    folder = Path(path).expanduser()
    meta = read_metadata(folder)
    cfg = TrainConfig.from_dict(meta["train_config"])
    task = _task_for(cfg, meta)
    model = build_model(cfg)
    try:
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        checkpoints = CheckpointStore(cfg.checkpoint_budget)
        if (folder / "checkpoints.safetensors").is_file():
            _load_checkpoints(checkpoints, load_file(str(folder / "checkpoints.safetensors")))
        history = json.loads((folder / "history.json").read_text(encoding="utf-8"))
    except (OSError, RuntimeError, ValueError) as exc:  # safetensors' and load_state_dict's errors
        raise ConfigError(
            f"{folder} holds weights that do not fit its config.json: {str(exc).splitlines()[0]}"
        ) from None
    run = TrainRun(
        cfg,
        task,
        model,
        step=int(meta["step"]),
        history=history,
        checkpoints=checkpoints,
        status=str(meta.get("status", "finished")),
        message=str(meta.get("message", "")),
    )
    return run


def run_files(run: TrainRun) -> dict[str, bytes]:
    """The files of ``run``'s folder without its checkpoints (the model after ``run.step`` updates),
    by name: what a bundle carries to reproduce the run's attention."""
    alone = dataclasses.replace(run, checkpoints=CheckpointStore(run.cfg.checkpoint_budget))
    with tempfile.TemporaryDirectory(prefix="attndesk-run-") as tmp:
        write_run_files(alone, lambda name: Path(tmp) / name)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir())}


def run_from_files(files: Mapping[str, bytes]) -> TrainRun:
    """The run whose folder's files are ``files`` (``run_files``); ConfigError as ``load_run``."""
    with tempfile.TemporaryDirectory(prefix="attndesk-run-") as tmp:
        for name, data in files.items():
            (Path(tmp) / Path(name).name).write_bytes(data)
        return load_run(tmp)


def _load_checkpoints(store: CheckpointStore, tensors: dict[str, torch.Tensor]) -> None:
    by_step: dict[int, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        tag, name = key.split("/", 1)
        by_step.setdefault(int(tag.removeprefix("step")), {})[name] = tensor
    store.items = []
    for step in sorted(by_step):
        store.add(step, by_step[step])


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "load_run",
    "read_metadata",
    "run_files",
    "run_from_files",
    "save_run",
    "save_tensors",
    "write_run_files",
]
