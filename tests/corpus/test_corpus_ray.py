"""The Ray engine (Ray Data actors on a local 2-worker Ray) writes the same store as the local engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from attndesk.corpus import analyze_corpus, open_corpus
from tests.corpus.conftest import TEXTS


@pytest.mark.slow  # ~45 s on 2 shared cores: a fresh interpreter starts Ray and two actors
def test_a_ray_run_writes_the_local_store_and_prints_only_attndesk_lines(ray_turn, models, bert_store, tmp_path):
    """`attndesk corpus --engine ray` in a fresh interpreter writes the store the local engine
    writes, and Ray's own notices (token authentication, progress bars, restartable actors) stay
    out of its stderr: every line there is attndesk's progress line."""
    pytest.importorskip("ray")
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    args = ["--model", str(models["bert"]), "--data", str(data), "--out", str(tmp_path / "store")]
    with ray_turn:
        proc = subprocess.run(
            [sys.executable, "-m", "attndesk", "corpus", "--engine", "ray", "--workers", "2", *args]
            + ["--max-tokens", "16", "--shard-size", "3", "--atlas-points", "12"],  # bert_store's settings
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert lines and all(line.startswith("corpus: ") for line in lines), proc.stderr
    assert lines[-1].startswith("corpus: 100% done: 8/8 texts")
    store = open_corpus(tmp_path / "store")
    for name in ("texts", "per_text", "heads", "atlas", "atlas_quality"):
        pd.testing.assert_frame_equal(
            store.sql(f"SELECT * FROM {name} ORDER BY ALL"),
            bert_store.sql(f"SELECT * FROM {name} ORDER BY ALL"),
            obj=name,
        )
    store.close()


@pytest.mark.slow  # ~25 s on 2 shared cores: starting Ray and an actor that imports torch and transformers
def test_ray_engine_writes_the_local_image_store(ray_turn, vision, tmp_path):
    """One actor (the text pass above runs two, whose shards arrive in any order)."""
    ray = pytest.importorskip("ray")
    import numpy as np
    from PIL import Image

    _model, _eager, folder = vision("deit")
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(4)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(images / f"p{i}.png")
    local = analyze_corpus(str(images), tmp_path / "local", model=folder, shard_size=2)
    with ray_turn:
        store = analyze_corpus(str(images), tmp_path / "ray", model=folder, shard_size=2, engine="ray", workers=1)
    assert not ray.is_initialized()
    for name in ("texts", "per_text", "heads"):
        pd.testing.assert_frame_equal(
            store.sql(f"SELECT * FROM {name} ORDER BY ALL"), local.sql(f"SELECT * FROM {name} ORDER BY ALL"), obj=name
        )
    store.close()
    local.close()
