"""The local engine's thread count: chosen by the load before each shard (or ``workers``), set
around the shard's work and restored after."""

from __future__ import annotations

import pytest
import torch

from attndesk.corpus import analyze_corpus, engine
from attndesk.system import threads
from tests.corpus.conftest import TEXTS


@pytest.mark.parametrize(("workers", "expected"), [(None, [3, 1, 1]), (2, [2, 2, 2])])
def test_each_shard_runs_on_the_count_chosen_for_the_load_then_it_is_restored(
    models, tmp_path, monkeypatch, workers, expected
):
    seen: list[int] = []
    run_shard = engine.run_shard

    def spy(*args, **kwargs):  # the real shard, noting the count it runs on
        seen.append(torch.get_num_threads())
        return run_shard(*args, **kwargs)

    loads = iter([0.0, 0.0] + [5.0] * 10)  # idle for the first choices, then busy
    monkeypatch.setattr(engine, "run_shard", spy)
    monkeypatch.setattr(threads, "WORK_PER_THREAD", 1.0)  # the tiny model's batches count as large work
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: next(loads))
    before = torch.get_num_threads()
    store = analyze_corpus(
        TEXTS, tmp_path / "store", model=models["bert"], max_tokens=16, shard_size=3, atlas_points=0, workers=workers
    )
    store.close()
    assert seen == expected
    assert torch.get_num_threads() == before
