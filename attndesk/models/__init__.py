"""Any local transformer model, run by transformers with attndesk's attention registered as its
attention implementation: encoders (BERT, ...), decoders (GPT-2, LLaMA, Gemma, ...) and
encoder-decoders (T5, BART, Marian), offline. Every attention weight is computed by
``attndesk.attention.kernel.attend``. transformers is imported by the loader, never here.

>>> from attndesk.models import load_pretrained, run_pretrained
>>> result = run_pretrained(load_pretrained(), "The cat sat.")   # doctest: +SKIP
>>> result.weights.shape                                           # doctest: +SKIP
(6, 12, 6, 6)

Vision checkpoints (ViT, DeiT, DINOv2, CLIP's and SigLIP's vision towers, Swin) take an image
instead: ``run_pretrained(load_pretrained(folder), "cat.png")`` returns a ``VisionResult``.

Modules: ``families`` (which model types run, and as what), ``checkpoint`` (a folder checked
before anything heavy runs), ``loader`` (``load_pretrained``), ``backend`` (``attend`` as
transformers' attention implementation), ``sites`` (which module is which attention layer),
``run`` (``run_pretrained``: every layer's attention), ``vision`` (an image's run), ``generate``
(the generation stepper), ``images`` (sample images: the shipped pictures and the 8x8 digits), ``token_text`` (the text a person reads for a raw token) and
``hub_cache`` (the models already in the local Hugging Face cache).
"""

from .checkpoint import PACKAGED_NAME, ModelSpec, packaged_model_dir, read_spec
from .families import SUPPORTED, VISION, supported_names
from .generate import GenerationStep, Generator
from .hub_cache import CachedModel, hub_cache_dir, list_cached_models
from .loader import LoadedModel, clear_cache, is_loaded, load_pretrained, loaded_model
from .result import NextToken, PretrainedResult, cosine, kl_divergence
from .run import encode, pretrained_job, run_pretrained, sentence_embeddings
from .token_text import id_texts, token_text, token_texts
from .vision import VisionResult, read_image

__all__ = [
    "PACKAGED_NAME",
    "SUPPORTED",
    "VISION",
    "CachedModel",
    "GenerationStep",
    "Generator",
    "LoadedModel",
    "ModelSpec",
    "NextToken",
    "PretrainedResult",
    "VisionResult",
    "clear_cache",
    "cosine",
    "encode",
    "hub_cache_dir",
    "id_texts",
    "is_loaded",
    "kl_divergence",
    "list_cached_models",
    "load_pretrained",
    "loaded_model",
    "packaged_model_dir",
    "pretrained_job",
    "read_image",
    "read_spec",
    "run_pretrained",
    "sentence_embeddings",
    "supported_names",
    "token_text",
    "token_texts",
]
