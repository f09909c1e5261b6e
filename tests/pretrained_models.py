"""Small random-weight checkpoints of real architectures, saved the way transformers saves them,
with the packaged WordPiece tokenizer (vocabulary 30522): folders ``load_pretrained`` opens.

``CONFIGS`` holds one tiny config per architecture (width 32, 2-3 layers); ``build(name, folder)``
writes config.json + model.safetensors + the tokenizer files; ``build_bare`` saves the bare base
model (no LM head). ``VISION_CONFIGS`` / ``build_vision`` / ``build_two_tower`` do the same for
the vision families, with their image processors (``eager_vision``: the eager reference). Used by
the tests and the benchmark.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from attndesk.models import SUPPORTED, packaged_model_dir

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# the packaged tokenizer's [PAD], [CLS], [SEP]: the random models' pad/bos/eos
IDS = {"vocab_size": 30522, "pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}
_DEC = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    **IDS,
}

_ENC = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    **IDS,
}
_SEQ2SEQ = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
    **IDS,
}

CONFIGS: dict[str, dict] = {
    "bert": {
        "model_type": "bert",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        **IDS,
    },
    "modernbert": {
        "model_type": "modernbert",
        "hidden_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "local_attention": 4,
        "global_attn_every_n_layers": 3,
        "cls_token_id": 101,
        "sep_token_id": 102,
        **IDS,
    },
    "gpt2": {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, **IDS},
    "llama": {"model_type": "llama", **_DEC, "num_key_value_heads": 2},
    "mistral": {"model_type": "mistral", **_DEC, "num_key_value_heads": 1, "sliding_window": 3},
    "gemma2": {
        "model_type": "gemma2",
        **_DEC,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "sliding_window": 3,
        "attn_logit_softcapping": 5.0,
        "query_pre_attn_scalar": 16,
    },
    "qwen3": {"model_type": "qwen3", **_DEC, "num_key_value_heads": 2, "head_dim": 8},
    "t5": {
        "model_type": "t5",
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "decoder_start_token_id": 0,
        **IDS,
    },
    "bart": {"model_type": "bart", **_SEQ2SEQ, "decoder_start_token_id": 102},
    # the rest of the families the README names as checked against eager attention
    "roberta": {"model_type": "roberta", **_ENC, "max_position_embeddings": 80},  # positions start at pad + 1
    "xlm-roberta": {"model_type": "xlm-roberta", **_ENC, "max_position_embeddings": 80},
    "distilbert": {
        "model_type": "distilbert",
        "dim": 32,
        "n_layers": 2,
        "n_heads": 4,
        "hidden_dim": 64,
        "max_position_embeddings": 64,
        **IDS,
    },
    "electra": {"model_type": "electra", **_ENC, "embedding_size": 16},
    "gpt_neox": {"model_type": "gpt_neox", **_DEC},
    "opt": {
        "model_type": "opt",
        "hidden_size": 32,
        "ffn_dim": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
        "word_embed_proj_dim": 32,
        **IDS,
    },
    "qwen2": {"model_type": "qwen2", **_DEC, "num_key_value_heads": 2},
    "gemma": {"model_type": "gemma", **_DEC, "num_key_value_heads": 1, "head_dim": 8},
    "gemma3_text": {
        "model_type": "gemma3_text",
        **_DEC,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "sliding_window": 3,
        "query_pre_attn_scalar": 8,
    },
    "phi3": {"model_type": "phi3", **_DEC, "num_key_value_heads": 2},
    "olmo": {"model_type": "olmo", **_DEC},
    "olmo2": {"model_type": "olmo2", **_DEC, "num_key_value_heads": 2},
    "smollm3": {"model_type": "smollm3", **_DEC, "num_key_value_heads": 2},
    "gpt_oss": {  # learned per-head sinks, mixture-of-experts MLPs, sliding and full layers
        "model_type": "gpt_oss",
        **_DEC,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "sliding_window": 3,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "mt5": {
        "model_type": "mt5",
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "decoder_start_token_id": 0,
        **IDS,
    },
    "mbart": {"model_type": "mbart", **_SEQ2SEQ, "decoder_start_token_id": 102},
    "marian": {"model_type": "marian", **_SEQ2SEQ, "decoder_start_token_id": 0},
}


def auto_class(config):
    """The Auto class attndesk's loader uses for this config's family."""
    import transformers

    if getattr(config, "is_encoder_decoder", False):
        return transformers.AutoModelForSeq2SeqLM
    if SUPPORTED[config.model_type].family == "encoder":
        return transformers.AutoModel
    return transformers.AutoModelForCausalLM


def build(name: str, folder: Path, *, seed: int = 0, **changes) -> Path:
    """A random ``name`` checkpoint (CONFIGS[name] updated with ``changes``) in ``folder``."""
    import torch
    import transformers

    fields = dict(CONFIGS[name], **changes)
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    model = auto_class(config).from_config(config)
    folder = Path(folder)
    model.save_pretrained(folder)
    for file in TOKENIZER_FILES:
        shutil.copy(packaged_model_dir() / file, folder / file)
    return folder


def build_bare(name: str, folder: Path, *, seed: int = 0, **changes) -> Path:
    """A random ``name`` checkpoint saved as its bare base model (``LlamaModel``, ``BartModel``, ...:
    ``AutoModel``, no LM head), untied so the head cannot come from the embeddings."""
    import torch
    import transformers

    fields = dict(CONFIGS[name], **changes)
    fields.setdefault("tie_word_embeddings", False)
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    folder = Path(folder)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    for file in TOKENIZER_FILES:
        shutil.copy(packaged_model_dir() / file, folder / file)
    return folder


BYTE_LEVEL_TEXTS = (
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The cat sat on the mat.\nThe dog sat on the log.",
)


def build_byte_level(name: str, folder: Path, *, seed: int = 0, **changes) -> Path:
    """``build``'s checkpoint with a byte-level BPE tokenizer (GPT-2's scheme: ``Ġ`` for a space,
    ``Ċ`` for a newline) trained on ``BYTE_LEVEL_TEXTS``, in place of the WordPiece one; the model's
    vocabulary is the tokenizer's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    end = "<|endoftext|>"
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe.train_from_iterator(
        BYTE_LEVEL_TEXTS, trainers.BpeTrainer(vocab_size=400, special_tokens=[end], initial_alphabet=alphabet)
    )
    folder = build(name, folder, seed=seed, **{"vocab_size": bpe.get_vocab_size(), **changes})
    for file in TOKENIZER_FILES:
        (folder / file).unlink()
    PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=end, eos_token=end, unk_token=end).save_pretrained(folder)
    return folder


def eager(folder: Path):
    """The same checkpoint with transformers' own eager attention (the reference)."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    return auto_class(config).from_pretrained(folder, attn_implementation="eager", local_files_only=True).eval()


# -- vision ---------------------------------------------------------------------------------------
_VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8}
_LABELS = {"num_labels": 3}

# name -> (model_type, config fields, the class saved, the image processor and its fields)
VISION_CONFIGS: dict[str, tuple[str, dict, str, str, dict]] = {
    "vit": ("vit", {**_VIT, "intermediate_size": 64, **_LABELS}, "ViTForImageClassification", "ViTImageProcessor", {}),
    "deit": (
        "deit",
        {**_VIT, "intermediate_size": 64, **_LABELS},
        "DeiTForImageClassificationWithTeacher",
        "ViTImageProcessor",
        {},
    ),
    "dinov2": ("dinov2", {**_VIT, "mlp_ratio": 2, **_LABELS}, "Dinov2ForImageClassification", "BitImageProcessor", {}),
    "dinov2_with_registers": (
        "dinov2_with_registers",
        {**_VIT, "mlp_ratio": 2, "num_register_tokens": 2, **_LABELS},
        "Dinov2WithRegistersForImageClassification",
        "BitImageProcessor",
        {},
    ),
    "clip_vision_model": (
        "clip_vision_model",
        {**_VIT, "intermediate_size": 64, "projection_dim": 16},
        "CLIPVisionModel",
        "CLIPImageProcessor",
        {},
    ),
    "siglip_vision_model": (
        "siglip_vision_model",
        {**_VIT, "intermediate_size": 64},
        "SiglipVisionModel",
        "SiglipImageProcessor",
        {},
    ),
    "swin": (
        "swin",
        {"embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "window_size": 2, "image_size": 32, "patch_size": 4},
        "SwinForImageClassification",
        "ViTImageProcessor",
        {},
    ),
}
VISION_SIZE = 32  # the tiny models' configured image side


def _processor(kind: str, side: int | tuple[int, int], **changes):
    import transformers

    height, width = (side, side) if isinstance(side, int) else side
    if kind in ("BitImageProcessor", "CLIPImageProcessor"):  # a shortest-edge resize, then a centre crop
        fields = {"size": {"shortest_edge": min(height, width)}, "crop_size": {"height": height, "width": width}}
    else:
        fields = {"size": {"height": height, "width": width}}
    return getattr(transformers, kind)(**{**fields, **changes})


def build_vision(
    name: str,
    folder: Path,
    *,
    seed: int = 0,
    side: int | tuple[int, int] = VISION_SIZE,
    processor: bool = True,
    **changes,
) -> Path:
    """A random vision checkpoint ``name`` (VISION_CONFIGS) with its image processor, resizing to
    ``side`` (an int, or (height, width): a non-square grid, interpolated positions)."""
    import torch
    import transformers

    model_type, fields, cls, kind, extra = VISION_CONFIGS[name]
    config = transformers.AutoConfig.for_model(model_type, **{**fields, **changes})
    torch.manual_seed(seed)
    folder = Path(folder)
    getattr(transformers, cls)(config).save_pretrained(folder)
    if processor:
        _processor(kind, side, **extra).save_pretrained(folder)
    return folder


def eager_vision(folder: Path):
    """The same vision checkpoint with transformers' own eager attention (the reference)."""
    import json

    import transformers

    cls = json.loads((Path(folder) / "config.json").read_text())["architectures"][0]
    return getattr(transformers, cls).from_pretrained(folder, attn_implementation="eager", local_files_only=True).eval()


def build_two_tower(model_type: str, folder: Path, *, seed: int = 0) -> Path:
    """A random two-tower checkpoint (``"clip"`` or ``"siglip"``: CLIPModel / SiglipModel, a text
    and a vision tower) with its image processor: attndesk loads its vision tower."""
    import torch
    import transformers

    tower = {**_VIT, "intermediate_size": 64}
    text = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    config = transformers.AutoConfig.for_model(
        model_type, vision_config=tower, text_config={**text, "vocab_size": 100, "max_position_embeddings": 16}
    )
    torch.manual_seed(seed)
    folder = Path(folder)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    kind = "CLIPImageProcessor" if model_type == "clip" else "SiglipImageProcessor"
    _processor(kind, VISION_SIZE).save_pretrained(folder)
    return folder
