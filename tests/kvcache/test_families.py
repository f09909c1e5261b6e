"""Every decoder family attndesk runs goes through the compressed run: the keep masks enter each
family's attention (StreamingLLM's rule holds and changes the output; a sliding-window layer's own
window masks on top, and its KV cache holds only its last keys) and budget = everything is the full
run bit for bit; H2O's run through the cache equals its run row by row (a sliding-window or hybrid
cache, which cannot be cut at a row, takes whole passes)."""

from __future__ import annotations

import numpy as np
import pytest
from pretrained_models import CONFIGS, build

from attndesk.kvcache import kv_model, simulate
from attndesk.models import SUPPORTED, load_pretrained
from attndesk.models.loader import transformers_offline
from tests.kvcache.test_fast_path import StepByStep

DECODERS = [name for name in CONFIGS if SUPPORTED[CONFIGS[name]["model_type"]].family == "decoder"]
IDS = [(13 * i + 7) % 29000 + 1000 for i in range(14)]


@pytest.mark.parametrize("name", DECODERS)
def test_every_decoder_family(tmp_path, name):
    transformers_offline()
    wider = {"sliding_window": 8} if "sliding_window" in CONFIGS[name] else {}  # 3 keys: below any budget here
    model = load_pretrained(build(name, tmp_path / name, **wider))
    run = simulate(model, IDS, "streaming", 6, sinks=2, generate=2)
    i, j = np.arange(run.rows)[:, None], np.arange(run.rows)[None, :]
    assert (run.keep == ((j <= i) & ((j < 2) | (i - j < 4)))).all()
    assert run.kl[6:].max() > 0 and (run.kl[:6] == 0).all()
    full = simulate(model, IDS, "h2o", 100, generate=2)
    assert np.array_equal(full.logits, full.full_logits) and (full.kl == 0).all()
    fast = simulate(model, IDS, "h2o", 5, generate=2, prefill=9)
    slow = simulate(StepByStep(kv_model(model)), IDS, "h2o", 5, generate=2, prefill=9)
    assert np.array_equal(fast.keep, slow.keep) and np.array_equal(fast.ids, slow.ids)
    assert np.abs(fast.logits - slow.logits).max() < 1e-5 and fast.kl[9:].max() > 0
