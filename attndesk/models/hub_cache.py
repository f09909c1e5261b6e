"""The models already in the local Hugging Face cache, each with what it is and whether attndesk
runs it (and why not). Reads config.json and weight headers only: no network, no transformers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from attndesk.errors import ConfigError

from .checkpoint import read_config, read_spec
from .families import family_of


def hub_cache_dir() -> Path:
    """Where the hub keeps models: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "huggingface" / "hub"


@dataclass(frozen=True)
class CachedModel:
    """One cached model repository: its newest snapshot folder and what attndesk makes of it."""

    repo_id: str  # "org/name"
    path: Path | None  # the snapshot folder to open (None: nothing downloaded)
    model_type: str | None
    architecture: str  # config.json's architectures[0], or ""
    family: str | None  # "encoder" / "decoder" / "encoder-decoder"
    family_name: str  # "Gemma 2"
    parameters: int | None
    size_bytes: int  # weights on disk (or the whole snapshot when none are recognised)
    supported: bool
    reason: str  # why not, one line ("" when supported)


def _snapshot(repo: Path) -> Path | None:
    """The snapshot refs/main points at, else the most recently written one."""
    ref = repo / "refs" / "main"
    if ref.is_file():
        folder = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if folder.is_dir():
            return folder
    snapshots = [p for p in (repo / "snapshots").glob("*") if p.is_dir()] if (repo / "snapshots").is_dir() else []
    return max(snapshots, key=lambda p: p.stat().st_mtime) if snapshots else None


def _folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size  # follows the snapshot's links into blobs/
        except OSError:
            continue
    return total


def _describe(repo_id: str, folder: Path) -> CachedModel:
    try:
        spec = read_spec(folder, name=repo_id)
    except ConfigError as exc:
        return _refused(repo_id, folder, str(exc))
    cfg = read_config(folder)
    return CachedModel(
        repo_id=repo_id,
        path=folder,
        model_type=spec.model_type,
        architecture=(cfg.get("architectures") or [""])[0],
        family=spec.family,
        family_name=spec.family_name,
        parameters=spec.parameters,
        size_bytes=spec.disk_bytes,
        supported=True,
        reason="",
    )


def _refused(repo_id: str, folder: Path, reason: str) -> CachedModel:
    try:
        cfg = read_config(folder)
        info, _ = family_of(cfg)
        model_type, family, name = cfg.get("model_type"), info.family, info.name
        arch = (cfg.get("architectures") or [""])[0]
    except ConfigError:
        model_type, family, name, arch = None, None, "unknown", ""
    return CachedModel(
        repo_id=repo_id,
        path=folder,
        model_type=model_type,
        architecture=str(arch),
        family=family,
        family_name=name,
        parameters=None,
        size_bytes=_folder_bytes(folder),
        supported=False,
        reason=reason,
    )


def list_cached_models(cache_dir: str | Path | None = None) -> list[CachedModel]:
    """Every ``models--org--name`` repository in the cache, sorted by name (empty without a cache)."""
    root = hub_cache_dir() if cache_dir is None else Path(cache_dir).expanduser()
    if not root.is_dir():
        return []
    found = []
    for repo in sorted(root.glob("models--*")):
        repo_id = repo.name[len("models--") :].replace("--", "/")
        folder = _snapshot(repo)
        if folder is None:
            found.append(
                CachedModel(
                    repo_id,
                    None,
                    None,
                    "",
                    None,
                    "unknown",
                    None,
                    0,
                    False,
                    "nothing downloaded: the repository has no snapshot",
                )
            )
            continue
        found.append(_describe(repo_id, folder))
    return found


__all__ = ["CachedModel", "hub_cache_dir", "list_cached_models"]
