"""The Ray engine (Ray Data actors on a local 2-worker Ray) writes the same store as the local engine."""

from __future__ import annotations

import pandas as pd
import pytest

from attndesk.corpus import analyze_corpus
from tests.corpus.conftest import TEXTS


@pytest.mark.slow  # ~40 s on 2 shared cores: starting Ray and two actors that import torch and transformers
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time, on one xdist worker
def test_ray_engine_writes_the_local_store(models, bert_store, tmp_path):
    ray = pytest.importorskip("ray")
    store = analyze_corpus(
        TEXTS,
        tmp_path / "ray",
        model=models["bert"],
        max_tokens=16,
        shard_size=3,
        atlas_points=12,
        engine="ray",
        workers=2,
    )
    assert not ray.is_initialized()  # the local Ray it started is shut down again
    for name in ("texts", "per_text", "heads", "atlas", "atlas_quality"):
        pd.testing.assert_frame_equal(
            store.sql(f"SELECT * FROM {name} ORDER BY ALL"),
            bert_store.sql(f"SELECT * FROM {name} ORDER BY ALL"),
            obj=name,
        )
    store.close()
