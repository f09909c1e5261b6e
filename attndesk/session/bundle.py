"""Reproducible bundles: one ``.zip`` with everything needed to compute a run again and check it.

A bundle holds ``manifest.json`` (format, version, the environment: attndesk, torch,
transformers, numpy, Python, platform; the model's identity: folder, config.json, SHA-256 of the
weight and tokenizer files; the list of arrays and figures), ``session.json`` (the window's
session: every parameter), ``texts/*.txt`` (the inputs), ``weights/*.npy`` (the exact float32
weights, ``allow_pickle=False``), ``figures/*`` (images, the interactive page), ``inputs/*``
(an input that is no text: a vision run's image, as PNG), ``circuits/*`` (edge circuits of the
model, as ``attndesk circuit`` writes them: their edges, question and faithfulness) and, for a
model that exists nowhere else (a trained toy model), ``model/*`` (its files).

- ``write_bundle``: the zip, written atomically (a failure leaves no partial file).
- ``read_bundle``: manifest, session and arrays back; ``BundleError`` for a file that is not a
  bundle, a newer format or a newer attndesk.
- ``run_weights``: the named arrays of a toy or real-model run, the names a bundle uses.
- ``model_identity`` / ``check_model``: what the model was, and whether a folder still is it.
- ``largest_difference``: the recomputed arrays against the bundled ones.

Qt-free and app-free: the session arrives as the JSON the window's ``session_json`` makes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from attndesk import __version__
from attndesk.files.atomic import atomic_write

BUNDLE_FORMAT = "attndesk-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
SESSION = "session.json"
MAX_MANIFEST_BYTES = 16 * 2**20
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5")
_TOKENIZER_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "merges.txt",
    "vocab.json",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
)


class BundleError(ValueError):
    """The bundle cannot be written, read or reproduced here; the message says why in one line."""


@dataclass
class Bundle:
    """A read bundle: the manifest, the session JSON, the input texts and the bundled arrays."""

    manifest: dict[str, Any]
    session: dict[str, Any]
    texts: dict[str, str] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    model_files: dict[str, bytes] = field(default_factory=dict)
    inputs: dict[str, bytes] = field(default_factory=dict)  # name -> bytes (inputs/NAME: a vision run's image)
    circuits: dict[str, bytes] = field(default_factory=dict)  # name -> circuit JSON (circuits/NAME)


# ---------------------------------------------------------------------------------------------
# identity


def environment() -> dict[str, str]:
    """The versions and machine that shaped the numbers."""
    import torch

    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = ""
    return {
        "attndesk": __version__,
        "torch": torch.__version__,
        "transformers": tf_version,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }


def _sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(2**20), b""):
                digest.update(block)
    return digest.hexdigest()


def _weight_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.iterdir() if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name.endswith(".index.json"))
    )


def model_identity(folder: str | os.PathLike, *, packaged: bool = False) -> dict[str, Any]:
    """A model folder as a bundle records it: path, config.json, hashes of weights and tokenizer."""
    folder = Path(folder).expanduser().resolve()
    weights = _weight_files(folder)
    tokenizer = sorted(folder / n for n in _TOKENIZER_NAMES if (folder / n).is_file())
    processor = folder / "preprocessor_config.json"  # a vision model's image processor
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    return {
        "kind": "pretrained",
        "path": str(folder),
        "packaged": packaged,
        "config": config,
        "weight_files": [p.name for p in weights],
        "weights_sha256": _sha256(weights),
        "tokenizer_sha256": _sha256(tokenizer),
        **({"processor_sha256": _sha256([processor])} if processor.is_file() else {}),
    }


def check_model(identity: Mapping[str, Any], folder: str | os.PathLike | None = None) -> Path:
    """The folder to load (``folder``, else the recorded path); BundleError when it is missing or
    its weights are not the bundled model's."""
    where = Path(folder if folder is not None else identity["path"]).expanduser()
    if not (where / "config.json").is_file():
        if folder is not None:  # the place was given: say what is wrong with it, not how to give one
            raise BundleError(
                f"{where}, given as the bundle's model folder, holds no config.json: give the folder "
                "that holds the model's config.json and weights"
            )
        raise BundleError(
            f"the bundle's model folder {where} is not on this machine (no config.json there): copy "
            "the model there, or give its place with --model PATH"
        )
    digest = _sha256(_weight_files(where.resolve()))
    if digest != identity.get("weights_sha256"):
        raise BundleError(
            f"the model in {where} is not the bundle's: its weights hash {digest[:12]}… differs from the "
            f"bundled {str(identity.get('weights_sha256'))[:12]}…"
        )
    processor = identity.get("processor_sha256")
    if processor is not None and _sha256([where.resolve() / "preprocessor_config.json"]) != processor:
        raise BundleError(f"the image processor in {where} is not the bundle's: its preprocessor_config.json differs")
    return where


# ---------------------------------------------------------------------------------------------
# arrays


def run_weights(result: Any, layer: int | None = None) -> dict[str, np.ndarray]:
    """The exact float32 weights of a run by bundle name: a toy run's ``weights/attention.npy``
    [H, L, Lk]; a real model's ``weights/{part}_layer{n}.npy`` for every part and layer (or ``layer``)."""
    if hasattr(result, "parts"):
        out = {}
        for part in result.parts():
            stack = result.part_weights(part)
            for n in range(len(stack)) if layer is None else [layer] if layer < len(stack) else []:
                out[f"weights/{part}_layer{n}.npy"] = np.asarray(stack[n], dtype=np.float32)
        return out
    if not result.exact_weights:
        raise BundleError(
            "this run kept only an overview of its weights (they exceed the memory budget): a bundle "
            "holds exact weights, so use a shorter text or a larger memory budget"
        )
    return {"weights/attention.npy": np.asarray(result.weights, dtype=np.float32)}


def largest_difference(bundled: Mapping[str, np.ndarray], recomputed: Mapping[str, np.ndarray]) -> float:
    """max |bundled - recomputed| over every array; BundleError when names or shapes differ."""
    if set(bundled) != set(recomputed):
        missing = sorted(set(bundled) ^ set(recomputed))
        raise BundleError(f"the recomputed run has other arrays than the bundle: {', '.join(missing[:4])}")
    worst = 0.0
    for name, old in bundled.items():
        new = recomputed[name]
        if old.shape != new.shape:
            raise BundleError(f"{name}: the bundle holds {old.shape}, the run gave {new.shape}")
        if old.size:
            worst = max(worst, float(np.nanmax(np.abs(old.astype(np.float64) - new.astype(np.float64)))))
    return worst


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# the zip


def _manifest(
    model: Mapping[str, Any],
    run: Mapping[str, Any] | None,
    texts: Mapping[str, str],
    weights: Mapping[str, np.ndarray],
    files: Mapping[str, Mapping[str, bytes]],
    inputs: Mapping[str, bytes],
    circuits: Mapping[str, bytes],
) -> dict[str, Any]:
    """The bundle's manifest: its format and version, when and where it was made, the model, the
    run, and the name of every member (``files``: "figures" and "model_files", name -> bytes)."""
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "environment": environment(),
        "model": dict(model),
        "run": dict(run or {}),
        "texts": sorted(f"texts/{n}.txt" for n in texts),
        "weights": [{"name": n, "shape": list(a.shape), "dtype": "float32"} for n, a in weights.items()],
        "figures": sorted(f"figures/{n}" for n in files["figures"]),
        "model_files": sorted(f"model/{n}" for n in files["model_files"]),
        **({"inputs": sorted(f"inputs/{n}" for n in inputs)} if inputs else {}),
        **({"circuits": sorted(f"circuits/{n}" for n in circuits)} if circuits else {}),
    }


def write_bundle(
    path: str | os.PathLike,
    *,
    session: Mapping[str, Any],
    texts: Mapping[str, str],
    model: Mapping[str, Any],
    weights: Mapping[str, np.ndarray],
    figures: Mapping[str, bytes] | None = None,
    run: Mapping[str, Any] | None = None,
    model_files: Mapping[str, bytes] | None = None,
    inputs: Mapping[str, bytes] | None = None,
    circuits: Mapping[str, bytes] | None = None,
) -> Path:
    """Write the bundle ``path`` (.zip) atomically; returns it. ``texts`` name -> text (stored as
    texts/NAME.txt), ``weights`` bundle name -> array, ``figures`` file name -> bytes,
    ``run`` what was computed beyond the session (e.g. ``{"layer": None}``), ``model_files``
    file name -> bytes of the model itself (stored as model/NAME), ``inputs`` file name -> bytes of
    an input that is no text (stored as inputs/NAME), ``circuits`` file name -> a circuit's JSON
    (stored as circuits/NAME)."""
    path = Path(path).expanduser()
    if path.suffix.lower() != ".zip":
        raise BundleError(f"cannot write {path}: a bundle ends in .zip")
    figures = dict(figures or {})
    model_files = dict(model_files or {})
    inputs = dict(inputs or {})
    circuits = dict(circuits or {})
    manifest = _manifest(model, run, texts, weights, {"figures": figures, "model_files": model_files}, inputs, circuits)

    def write(fh) -> None:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False))
            zf.writestr(SESSION, json.dumps(dict(session), indent=2, ensure_ascii=False))
            for name, text in texts.items():
                zf.writestr(f"texts/{name}.txt", text)
            for name, array in weights.items():
                zf.writestr(name, _npy_bytes(np.asarray(array, dtype=np.float32)))
            for name, data in figures.items():
                zf.writestr(f"figures/{name}", data)
            for name, data in model_files.items():
                zf.writestr(f"model/{name}", data)
            for name, data in inputs.items():
                zf.writestr(f"inputs/{name}", data)
            for name, data in circuits.items():
                zf.writestr(f"circuits/{name}", data)

    folder = path.parent
    if not folder.is_dir():
        raise BundleError(f"cannot write {path}: the folder {folder} does not exist")
    try:
        return atomic_write(path, write)
    except OSError as exc:
        raise BundleError(f"cannot write {path}: {exc.strerror or exc}") from None


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _check_manifest(manifest: Any, name: str) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{name} is not an attndesk bundle: its manifest's format is missing or wrong")
    version = manifest.get("version")
    made_by = str((manifest.get("environment") or {}).get("attndesk", "?"))
    if not isinstance(version, int) or version > BUNDLE_VERSION:
        raise BundleError(
            f"{name} was made by attndesk {made_by} (bundle format {version!r}); this attndesk "
            f"{__version__} reads format {BUNDLE_VERSION}: update attndesk to reproduce it"
        )
    if _version_tuple(made_by) > _version_tuple(__version__):
        raise BundleError(
            f"{name} was made by attndesk {made_by}, newer than this attndesk {__version__}: "
            "update attndesk to reproduce it"
        )
    return manifest


def read_bundle(path: str | os.PathLike) -> Bundle:
    """The bundle at ``path``; BundleError (one line) for anything that is not a usable bundle."""
    path = Path(path).expanduser()
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if MANIFEST not in names or SESSION not in names:
                raise BundleError(f"{path.name} is not an attndesk bundle: no {MANIFEST} / {SESSION} inside")
            if zf.getinfo(MANIFEST).file_size > MAX_MANIFEST_BYTES:
                raise BundleError(f"{path.name}: its manifest is too large to be an attndesk bundle's")
            manifest = _check_manifest(json.loads(zf.read(MANIFEST)), path.name)
            session = json.loads(zf.read(SESSION))
            texts = {Path(n).stem: zf.read(n).decode("utf-8") for n in manifest.get("texts", []) if n in names}
            weights = {}
            for entry in manifest.get("weights", []):
                if entry["name"] not in names:
                    raise BundleError(f"{path.name} is incomplete: {entry['name']} is missing")
                weights[entry["name"]] = np.load(io.BytesIO(zf.read(entry["name"])), allow_pickle=False)
            model_files = {}
            for name in manifest.get("model_files", []):
                if name not in names:
                    raise BundleError(f"{path.name} is incomplete: {name} is missing")
                model_files[Path(name).name] = zf.read(name)
            inputs: dict[str, bytes] = {}
            circuits: dict[str, bytes] = {}
            for slot, store in (("inputs", inputs), ("circuits", circuits)):
                for name in manifest.get(slot, []):
                    if name not in names:
                        raise BundleError(f"{path.name} is incomplete: {name} is missing")
                    store[Path(name).name] = zf.read(name)
    except FileNotFoundError:
        raise BundleError(f"bundle {path} does not exist") from None
    except IsADirectoryError:
        raise BundleError(f"{path} is a folder, not a bundle (.zip)") from None
    except zipfile.BadZipFile:
        raise BundleError(f"{path.name} is not an attndesk bundle (not a zip file)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # unreadable, bad JSON / UTF-8 / npy
        if isinstance(exc, BundleError):
            raise
        raise BundleError(
            f"{path.name} cannot be read as an attndesk bundle: {' '.join(str(exc).split())[:200]}"
        ) from None
    figures = list(manifest.get("figures", []))
    return Bundle(manifest, session, texts, weights, figures, model_files, inputs, circuits)


def same_environment(manifest: Mapping[str, Any]) -> list[str]:
    """What differs between the bundle's environment and this one (empty: the same)."""
    then, now = manifest.get("environment") or {}, environment()
    keys = ("attndesk", "torch", "transformers", "numpy", "platform", "processor")
    return [f"{k} {then.get(k, '?')} -> {now[k]}" for k in keys if str(then.get(k)) != str(now[k])]


__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "Bundle",
    "BundleError",
    "check_model",
    "environment",
    "largest_difference",
    "model_identity",
    "read_bundle",
    "run_weights",
    "same_environment",
    "write_bundle",
]
