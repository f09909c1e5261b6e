"""attndesk's attention core: pure torch + numpy, no Qt.

>>> from attndesk.core import AttentionConfig, run_attention
>>> result = run_attention(AttentionConfig(num_heads=2, embed_dim=8), "the cat sat")
>>> result.weights.shape
(2, 3, 3)
"""

from .attention import MultiHeadAttention, SingleHeadAttention, masked_softmax, scaled_dot_product_attention
from .config import MASK_KINDS, POSITIONS, AttentionConfig, divisors
from .devices import available_devices, device_availability
from .errors import Cancelled, ConfigError, ConfigTypeError
from .masks import causal_mask, padding_mask
from .memory import estimate_run, format_bytes
from .pipeline import run_attention
from .positional import sinusoidal_encoding
from .pretrained import PretrainedResult, load_pretrained, run_pretrained
from .result import AttentionResult
from .types import MEAN, AttentionMap, Head, Intermediates

__all__ = [
    "MASK_KINDS",
    "MEAN",
    "POSITIONS",
    "AttentionConfig",
    "AttentionMap",
    "AttentionResult",
    "Cancelled",
    "ConfigError",
    "ConfigTypeError",
    "Head",
    "Intermediates",
    "MultiHeadAttention",
    "PretrainedResult",
    "SingleHeadAttention",
    "available_devices",
    "causal_mask",
    "device_availability",
    "divisors",
    "estimate_run",
    "format_bytes",
    "load_pretrained",
    "masked_softmax",
    "padding_mask",
    "run_attention",
    "run_pretrained",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
