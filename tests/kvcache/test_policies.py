"""Each policy's keep rule on hand-made cases, the selection's tie rule, budgets and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from attndesk.errors import ConfigError
from attndesk.kvcache import POLICIES, simulate, top_keys
from attndesk.kvcache.base import resolve_budget
from attndesk.kvcache.pyramidkv import layer_budgets

IDS = [(7 * i + 3) % 29000 + 1000 for i in range(24)]


def test_top_keys_ranks_protected_then_score_then_the_later_key():
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.5, 0.2])
    candidates = np.array([True, True, True, True, True, False])
    protected = np.array([False, False, False, True, False, False])
    kept = top_keys(scores, candidates, 3, protected)
    # key 3 is protected, key 1 has the best score; of the tied 0, 2, 4 the latest (4) wins; 5 is no candidate
    assert np.flatnonzero(kept).tolist() == [1, 3, 4]
    assert top_keys(scores, candidates, 10).sum() == 5
    per_head = top_keys(np.tile(scores, (2, 1)), np.tile(candidates, (2, 1)), np.array([1, 2]))
    assert per_head.sum(-1).tolist() == [1, 2]


def test_budget_as_tokens_or_ratio():
    assert resolve_budget(16, 40) == 16
    assert resolve_budget(0.5, 41) == 20  # int(41 * 0.5)
    assert resolve_budget(0.001, 40) == 1
    for bad in (0, -3, 0.0, 1.5, True, "8"):
        with pytest.raises(ConfigError):
            resolve_budget(bad, 40)


def test_streaming_keeps_sinks_and_a_window_from_the_first_row(llama, toy):
    for model, ids in ((llama, IDS), (toy, [i % 30 + 1 for i in IDS])):
        run = simulate(model, ids, "streaming", 7, sinks=2, generate=3)
        n = run.rows
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        rule = (j <= i) & ((j < 2) | (i - j < 7 - 2))
        assert (run.keep == rule).all()
        assert run.kept.max() == 7


def test_recency_keeps_the_newest_keys(llama):
    run = simulate(llama, IDS, "recency", 5)
    i, j = np.arange(run.rows)[:, None], np.arange(run.rows)[None, :]
    assert (run.keep == ((j <= i) & (i - j < 5))).all()


def test_prefill_policies_leave_the_prompt_full_and_push_out_their_lowest_key(llama):
    prompt = 18
    run = simulate(llama, IDS, "knorm", 8, prefill=prompt)
    causal = np.tril(np.ones((run.rows, run.rows), bool))
    assert (run.keep[:, :, :prompt] == causal[:prompt]).all()
    k = np.stack([np.linalg.norm(x.astype(np.float64), axis=-1) for x in _prefill_keys(llama, IDS[:prompt])])
    for t in range(prompt, run.rows):
        g = t - prompt + 1
        row = run.keep[:, :, t, : t + 1]
        assert (row.sum(-1) == 8).all()
        assert row[..., prompt:].all()  # every generated key, newest first
        for layer in range(2):
            for head in range(2):
                smallest = np.sort(np.argsort(k[layer, head], kind="stable")[: 8 - g])
                assert np.flatnonzero(row[layer, head, :prompt]).tolist() == smallest.tolist()


def _prefill_keys(model, ids):
    from attndesk.kvcache.model import kv_model
    from attndesk.kvcache.simulate import causal

    kvm = kv_model(model)
    return kvm.forward(ids, causal(kvm.layers, kvm.kv_heads, len(ids))).k


def test_h2o_keeps_a_recent_half_by_default(llama):
    prompt, steps = 14, 10
    run = simulate(llama, IDS[:prompt], "h2o", 8, generate=steps)
    assert (run.keep[:, :, -4:, -4:] == np.tril(np.ones((4, 4), bool))).all()  # the 4 newest stay
    assert (run.kept[:, :, prompt:] == 8).all()


def test_tova_and_h2o_decode_keep_at_most_the_budget(llama):
    for name in ("tova", "h2o"):
        run = simulate(llama, IDS[:16], name, 6, generate=6)
        assert (run.kept[:, :, 16:] == 6).all()
        # a cache: a key once evicted never comes back
        gone = ~run.keep[:, :, 16:-1, :] & np.tril(np.ones((run.rows, run.rows), bool))[16:-1]
        assert not (gone & run.keep[:, :, 17:, :]).any()


def test_pyramid_budgets_shrink_with_depth_and_average_the_budget():
    assert layer_budgets(200, 40, 4, 8, 2) == [60, 47, 33, 20]  # min = 40 / 2, max = 2 x 40 - min
    assert layer_budgets(200, 40, 4, 8, 20) == [40] * 4  # min 2 is below the window: every layer keeps b


def test_adakv_moves_budget_between_heads_within_a_layer(llama):
    run = simulate(llama, IDS, "adakv", 9, prefill=16, window=4)
    kept = run.kept[:, :, 16]
    assert (kept.sum(-1) == 2 * 9).all()  # the layer's total is the budget's
    assert (kept >= 1).all()


def test_duo_retrieval_heads_keep_everything_streaming_heads_a_window(llama):
    run = simulate(llama, IDS, "duo", 10, prefill=16, sinks=2, window=4)
    row = run.keep[:, :, 16, :17]
    retrieval = run.extra["retrieval_heads"]
    assert row[retrieval].all()
    streaming = row[~retrieval]
    assert streaming[:, :2].all() and streaming.sum(-1).max() <= 10
    assert run.kept[:, :, 16:].mean() <= 10


def test_oracle_keeps_the_full_rows_heaviest_keys(llama):
    run = simulate(llama, IDS, "oracle", 5, prefill=20)
    from attndesk.kvcache.model import kv_model
    from attndesk.kvcache.simulate import causal

    kvm = kv_model(llama)
    full = kvm.forward(IDS, causal(2, 2, len(IDS)))
    for t in range(20, len(IDS)):
        for layer in range(2):
            weights = full.weights[layer][:, t, : t + 1].reshape(2, 2, -1).astype(np.float64).sum(1)
            for head in range(2):
                best = np.argsort(-weights[head], kind="stable")[:5]
                assert set(np.flatnonzero(run.keep[layer, head, t])) == set(best.tolist())


def test_random_is_seeded(llama):
    a = simulate(llama, IDS, "random", 6, prefill=16, seed=3)
    b = simulate(llama, IDS, "random", 6, prefill=16, seed=3)
    c = simulate(llama, IDS, "random", 6, prefill=16, seed=4)
    assert (a.keep == b.keep).all() and not (a.keep == c.keep).all()


def test_every_policy_declares_its_options_and_refuses_others(llama):
    for name, policy in POLICIES.items():
        for spec in policy.option_fields():
            assert spec.tip and spec.label and spec.flag
        with pytest.raises(ConfigError, match=f"{name} takes no option 'nonsense'"):
            simulate(llama, IDS, name, 4, nonsense=1)


def test_refusals_are_one_line(llama, tmp_path):
    cases = [
        (dict(policy="streaming", budget=0), "keeps no key"),
        (dict(policy="streaming", budget=4, sinks=4), "must exceed the sinks"),
        (dict(policy="snapkv", budget=4), "window of 64 queries needs a longer prompt"),
        (dict(policy="nope", budget=4), "no KV-cache policy 'nope'"),
        (dict(policy="streaming", budget=4, sinks=-1), "sinks"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message) as info:
            simulate(llama, IDS, **kwargs)
        assert "\n" not in str(info.value)


def test_an_encoder_has_no_cache(tmp_path):
    from pretrained_models import build

    from attndesk.models import load_pretrained

    bert = load_pretrained(build("bert", tmp_path / "bert"))
    with pytest.raises(ConfigError, match="is an encoder: it reads the whole text at once and keeps no KV cache"):
        simulate(bert, "the cat sat", "streaming", 4)


def test_adakv_takes_another_policys_scores(llama):
    run = simulate(llama, IDS, "adakv", 8, prefill=16, scorer="knorm", alpha=0.5)
    kept = run.keep[:, :, 16, :16]  # the first decode row: 7 prompt keys per head on average, and its own
    scores = -np.stack([np.linalg.norm(k.astype(np.float64), axis=-1) for k in _prefill_keys(llama, IDS[:16])])
    for layer in range(2):
        assert kept[layer].sum() == 2 * 7
        guard = np.zeros((2, 16), bool)
        for head in range(2):
            guard[head, np.argsort(-scores[layer, head], kind="stable")[:3]] = True  # int(0.5 x 7) per head
        assert (kept[layer] >= guard).all()
        rest, dropped = scores[layer][kept[layer] & ~guard], scores[layer][~kept[layer]]
        assert rest.min() > dropped.max()  # the layer's best scores, whichever head they are in


def test_pyramidkv_is_snapkv_with_budgets_per_layer(toy):
    """Its options are SnapKV's and beta; where the pyramid does not apply (every layer keeps the
    budget) it keeps what SnapKV keeps."""

    snap, pyramid = POLICIES["snapkv"].option_fields(), POLICIES["pyramidkv"].option_fields()
    assert pyramid[: len(snap)] == snap and [p.name for p in pyramid[len(snap) :]] == ["beta"]
    ids = toy.task.probe().ids[0].tolist()
    assert layer_budgets(len(ids), 6, toy.cfg.layers, 4, 20) == [6] * toy.cfg.layers
    same = [simulate(toy, ids, name, 6, window=4, kernel=3).keep for name in ("snapkv", "pyramidkv")]
    np.testing.assert_array_equal(*same)
