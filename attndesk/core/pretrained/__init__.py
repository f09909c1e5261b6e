"""A real pretrained encoder (all-MiniLM-L6-v2 or any local BERT folder) run through attndesk's own
attention layers, offline: safetensors for the weights, tokenizers for WordPiece, no transformers.

>>> from attndesk.core.pretrained import load_pretrained, run_pretrained
>>> result = run_pretrained(load_pretrained(), "The cat sat.")   # doctest: +SKIP
>>> result.weights.shape                                           # doctest: +SKIP
(6, 12, 6, 6)
"""

from .checkpoint import BertSpec, packaged_model_dir, read_spec
from .encoder import BertEncoder
from .result import PretrainedResult, cosine
from .run import (
    PACKAGED_NAME, PretrainedModel, clear_cache, encode, is_loaded, load_pretrained, pretrained_job,
    run_pretrained, sentence_embeddings,
)

__all__ = [
    "BertEncoder", "BertSpec", "PACKAGED_NAME", "PretrainedModel", "PretrainedResult", "clear_cache",
    "cosine", "encode", "is_loaded", "load_pretrained", "packaged_model_dir", "pretrained_job",
    "read_spec", "run_pretrained", "sentence_embeddings",
]
