"""``POLICIES``: every eviction policy by name, in the order the lab and the CLI list them."""

from __future__ import annotations

from . import (
    adakv,
    duo,
    expected_attention,
    h2o,
    keydiff,
    knorm,
    oracle,
    pyramidkv,
    random_keys,
    recency,
    snapkv,
    streaming,
    tova,
)
from .base import Policy

POLICIES: dict[str, Policy] = {
    module.POLICY.name: module.POLICY
    for module in (
        streaming,
        h2o,
        snapkv,
        tova,
        knorm,
        pyramidkv,
        adakv,
        keydiff,
        expected_attention,
        duo,
        random_keys,
        recency,
        oracle,
    )
}

__all__ = ["POLICIES"]
