"""Which model types attndesk runs, and as what (encoder, decoder, encoder-decoder).

The table lists the families checked against transformers' eager attention (weights equal
within 1e-5, layer by layer). Other model types transformers knows are accepted when their
modeling code calls transformers' attention interface (the loader then checks, on a real
forward pass, that every layer's attention went through attndesk); types that compute their
attention themselves (Falcon, BLOOM, MPT, ...) are refused. Nothing here imports transformers.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

Family = Literal["encoder", "decoder", "encoder-decoder", "vision"]
FAMILIES: tuple[Family, ...] = ("encoder", "decoder", "encoder-decoder")  # the text families


Positions = Literal["learned", "rope", "relative bias", "sinusoidal"]


@dataclass(frozen=True)
class FamilyInfo:
    name: str  # how people call it: "Gemma 2"
    family: Family
    positions: Positions = "learned"  # how it encodes positions, as the window's parameters panel names it
    position_offset: int = 0  # rows of its learned position table before the first token's (RoBERTa's padding)


# model_type (config.json) -> what it is
SUPPORTED: dict[str, FamilyInfo] = {
    "bert": FamilyInfo("BERT", "encoder"),
    "roberta": FamilyInfo("RoBERTa", "encoder", position_offset=2),
    "xlm-roberta": FamilyInfo("XLM-RoBERTa", "encoder", position_offset=2),
    "distilbert": FamilyInfo("DistilBERT", "encoder"),
    "electra": FamilyInfo("ELECTRA", "encoder"),
    "modernbert": FamilyInfo("ModernBERT", "encoder", "rope"),
    "gpt2": FamilyInfo("GPT-2", "decoder"),
    "gpt_neox": FamilyInfo("GPT-NeoX", "decoder", "rope"),
    "opt": FamilyInfo("OPT", "decoder"),
    "llama": FamilyInfo("LLaMA", "decoder", "rope"),
    "mistral": FamilyInfo("Mistral", "decoder", "rope"),
    "qwen2": FamilyInfo("Qwen2", "decoder", "rope"),
    "qwen3": FamilyInfo("Qwen3", "decoder", "rope"),
    "gemma": FamilyInfo("Gemma", "decoder", "rope"),
    "gemma2": FamilyInfo("Gemma 2", "decoder", "rope"),
    "gemma3_text": FamilyInfo("Gemma 3", "decoder", "rope"),
    "phi3": FamilyInfo("Phi-3", "decoder", "rope"),
    "olmo": FamilyInfo("OLMo", "decoder", "rope"),
    "olmo2": FamilyInfo("OLMo 2", "decoder", "rope"),
    "smollm3": FamilyInfo("SmolLM3", "decoder", "rope"),
    "gpt_oss": FamilyInfo("GPT-OSS", "decoder", "rope"),  # learned sinks: s_aux in the backend's Scoring
    "t5": FamilyInfo("T5", "encoder-decoder", "relative bias"),
    "mt5": FamilyInfo("mT5", "encoder-decoder", "relative bias"),
    "bart": FamilyInfo("BART", "encoder-decoder"),
    "mbart": FamilyInfo("mBART", "encoder-decoder"),
    "marian": FamilyInfo("Marian", "encoder-decoder", "sinusoidal"),
}


@dataclass(frozen=True)
class VisionInfo:
    """A vision transformer family: which tokens come before the patches, and how it is built.

    ``classes``: the transformers classes accepted from config.json's ``architectures`` (the
    first, the bare tower, is used when none is named); ``registers``: the config field counting
    register tokens; ``tower``: the sub-config of a two-tower checkpoint (CLIP, SigLIP) whose
    vision tower is loaded; ``windows``: Swin's windowed attention (stages of windows, no class
    token); ``interpolate``: the forward takes ``interpolate_pos_encoding``.
    """

    name: str
    classes: tuple[str, ...]
    class_token: bool = True
    distillation: bool = False
    registers: str | None = None
    tower: str | None = None
    windows: bool = False
    interpolate: bool = True


# model_type (config.json) -> a vision family attndesk runs on images
VISION: dict[str, VisionInfo] = {
    "vit": VisionInfo("ViT", ("ViTModel", "ViTForImageClassification")),
    "deit": VisionInfo(
        "DeiT",
        ("DeiTModel", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher"),
        distillation=True,
    ),
    "dinov2": VisionInfo("DINOv2", ("Dinov2Model", "Dinov2ForImageClassification"), interpolate=False),
    "dinov2_with_registers": VisionInfo(
        "DINOv2 with registers",
        ("Dinov2WithRegistersModel", "Dinov2WithRegistersForImageClassification"),
        registers="num_register_tokens",
        interpolate=False,
    ),
    "clip_vision_model": VisionInfo("CLIP vision tower", ("CLIPVisionModel", "CLIPVisionModelWithProjection")),
    "clip": VisionInfo("CLIP vision tower", ("CLIPVisionModel",), tower="vision_config"),
    "siglip_vision_model": VisionInfo("SigLIP vision tower", ("SiglipVisionModel",), class_token=False),
    "siglip": VisionInfo("SigLIP vision tower", ("SiglipVisionModel",), class_token=False, tower="vision_config"),
    "swin": VisionInfo(
        "Swin", ("SwinModel", "SwinForImageClassification"), class_token=False, windows=True, interpolate=False
    ),
}

# Facts of types outside the table that load through the interface (same fields as FamilyInfo's)
_OTHER_FACTS: dict[str, dict] = {"camembert": {"position_offset": 2}}

# Known to compute attention outside the interface (no weights would reach attndesk).
BYPASSES = {
    "falcon": "Falcon",
    "bloom": "BLOOM",
    "mpt": "MPT",
    "gptj": "GPT-J",
    "gpt_neo": "GPT-Neo",
    "codegen": "CodeGen",
    "deberta": "DeBERTa",
    "deberta-v2": "DeBERTa-v2",
    "mpnet": "MPNet",
}
# model_type -> the transformers.models sub-package holding its modeling code, where the names differ
_MODULE_OF = {"gemma3_text": "gemma3", "xlm-roberta": "xlm_roberta", "deberta-v2": "deberta_v2"}
INTERFACE_MARK = "ALL_ATTENTION_FUNCTIONS"  # what modeling code that uses the interface refers to


def supported_names() -> str:
    """ "encoders: BERT, RoBERTa, ...; decoders: GPT-2, ...; encoder-decoders: T5, ..." (for messages)."""
    parts = []
    for family in FAMILIES:
        names = [info.name for info in SUPPORTED.values() if info.family == family]
        parts.append(f"{family}s: {', '.join(names)}")
    parts.append(f"vision: {', '.join(dict.fromkeys(info.name for info in VISION.values()))}")
    return "; ".join(parts)


def modeling_file(model_type: str) -> Path | None:
    """transformers' modeling_<type>.py for ``model_type``, found without importing transformers."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package = _MODULE_OF.get(model_type, model_type.replace("-", "_"))
    root = Path(next(iter(spec.submodule_search_locations))) / "models" / package
    found = sorted(root.glob("modeling_*.py")) if root.is_dir() else []
    exact = root / f"modeling_{package}.py"
    return exact if exact in found else (found[0] if found else None)


def uses_interface(model_type: str) -> bool | None:
    """Whether transformers' code for ``model_type`` calls the attention interface (None: unknown type)."""
    path = modeling_file(model_type)
    if path is None:
        return None
    try:
        return INTERFACE_MARK in path.read_text(encoding="utf-8")
    except OSError:
        return None


@lru_cache(maxsize=8)
def auto_mapping_types(mapping: str) -> frozenset[str]:
    """The model types in transformers' auto mapping ``mapping`` ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    read from its source text (no import); empty when transformers is not installed."""
    try:
        spec = importlib.util.find_spec("transformers")
        root = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
        text = (root / "models" / "auto" / "modeling_auto.py").read_text(encoding="utf-8") if root else ""
    except (ImportError, ValueError, OSError):
        return frozenset()
    start = text.find(f"\n{mapping} = OrderedDict(")
    if start < 0:
        return frozenset()
    block = text[start : text.find("\n)\n", start)]
    return frozenset(re.findall(r'\(\s*"([^"]+)",\s*"', block))


def infer_family(config: dict) -> Family:
    """encoder / decoder / encoder-decoder of a model type outside the table, from its config, or
    from transformers' auto mappings when its architectures name only the bare base model
    ("GraniteModel": a causal-LM type that has no masked-LM variant is a decoder)."""
    model_type = str(config.get("model_type") or "")
    if config.get("is_encoder_decoder") or model_type in auto_mapping_types(
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"
    ):
        return "encoder-decoder"
    names = " ".join(config.get("architectures") or [])
    if config.get("is_decoder") or "CausalLM" in names or "LMHead" in names:
        return "decoder"
    if model_type in auto_mapping_types("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES") and model_type not in auto_mapping_types(
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES"
    ):
        return "decoder"
    return "encoder"


def family_of(config: dict) -> tuple[FamilyInfo, str | None]:
    """(what the model is, why it is refused or None). Reads config.json's fields only."""
    model_type = str(config.get("model_type") or "")
    archs = ", ".join(config.get("architectures") or []) or "no architectures listed"
    what = f"model_type {model_type!r} ({archs})"
    if model_type in SUPPORTED:
        return SUPPORTED[model_type], None
    if model_type in BYPASSES:
        info = FamilyInfo(BYPASSES[model_type], infer_family(config))
        return info, (
            f"unsupported architecture: {what} computes its attention itself, outside "
            f"transformers' attention interface, so attndesk cannot see its weights; "
            f"supported: {supported_names()}"
        )
    if not model_type:
        return FamilyInfo("unknown", "encoder"), "config.json has no model_type: it is not a transformers checkpoint"
    info = FamilyInfo(model_type, infer_family(config), **_OTHER_FACTS.get(model_type, {}))
    uses = uses_interface(model_type)
    if uses is None:
        return (
            info,
            f"unsupported architecture: {what} is unknown to the installed transformers; supported: {supported_names()}",
        )
    if not uses:
        return info, (
            f"unsupported architecture: {what} computes its attention outside transformers' "
            f"attention interface; supported: {supported_names()}"
        )
    return info, None


__all__ = [
    "BYPASSES",
    "FAMILIES",
    "SUPPORTED",
    "VISION",
    "Family",
    "FamilyInfo",
    "Positions",
    "VisionInfo",
    "family_of",
    "infer_family",
    "supported_names",
    "uses_interface",
]
