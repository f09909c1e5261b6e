"""Every task's generator format, exact accuracy and pattern score, on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.train import TrainConfig, make_task
from attndesk.train.tasks import Batch


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _perfect(task, batch: Batch, layers: int = 1, heads: int = 2) -> torch.Tensor:
    """Weights [B, layers, H, L, L] that follow the task's pattern exactly in head 0 (uniform
    causal rows in every other head), for queries where it applies."""
    keys, queries = task.pattern_targets(batch)
    length = batch.ids.shape[1]
    uniform = torch.tril(torch.ones(length, length))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    w = uniform.expand(batch.ids.shape[0], layers, heads, length, length).clone()
    rows = keys / keys.sum(-1, keepdim=True).clamp(min=1)
    w[:, 0, 0] = torch.where(queries[..., None], rows, uniform)
    return w


def test_induction_format_and_scores():
    cfg = TrainConfig(task="induction", vocab_size=32, seq_len=32)
    task = make_task(cfg)
    batch = task.sample(64, _gen())
    ids = batch.ids
    assert ids.dtype == torch.int64 and ids.shape == (64, 32)
    assert (ids[:, 0] == 0).all() and (ids[:, 1:] >= 1).all() and (ids[:, 1:] < 32).all()
    n = task.segment_lengths(batch)
    assert n.min() >= 2 and n.max() <= 15 and len(set(n.tolist())) > 3  # the length varies
    for b in range(64):
        seg = ids[b, 1 : 1 + n[b]]
        assert len(set(seg.tolist())) == n[b]  # distinct tokens: the earlier occurrence is unique
        assert torch.equal(ids[b, 1:], seg.repeat(32)[:31])
        scored = batch.mask[b].nonzero().flatten()
        assert scored.min() == n[b] + 1 and scored.max() == 30  # inside the repeat only
        assert torch.equal(batch.targets[b, :-1], ids[b, 1:])
        keys, _ = task.pattern_targets(batch)
        t = 30  # the keys after every earlier occurrence of ids[t]
        assert keys[b, t].nonzero().flatten().tolist() == list(range(t - n[b] * ((t - 1) // n[b]) + 1, t, n[b]))
    perfect = _perfect(task, batch)
    scores = task.pattern_scores(perfect, batch)
    assert scores.shape == (1, 2) and scores[0, 0] == pytest.approx(1.0) and scores[0, 1] < 0.2


def test_accuracy_is_exact_over_the_scored_positions():
    task = make_task(TrainConfig(task="induction", vocab_size=8, seq_len=9))
    batch = task.sample(4, _gen(1))
    logits = torch.nn.functional.one_hot(batch.targets, 8).float()
    assert task.accuracy(logits, batch) == 1.0
    wrong = batch.mask.nonzero()[:3]
    for b, t in wrong:  # three scored positions wrong out of the scored count
        logits[b, t] = torch.nn.functional.one_hot((batch.targets[b, t] + 1) % 8, 8).float()
    logits[~batch.mask] = 0  # unscored positions never count
    assert task.accuracy(logits, batch) == pytest.approx(1 - 3 / int(batch.mask.sum()))


@pytest.mark.parametrize("name", ["copy", "reverse", "sort"])
def test_transductions(name):
    task = make_task(TrainConfig(task=name, vocab_size=12, seq_len=18))
    batch = task.sample(32, _gen(2))
    n = 8
    x, sep, y = batch.ids[:, 1:9], batch.ids[:, 9], batch.ids[:, 10:]
    assert (batch.ids[:, 0] == 0).all() and (sep == 1).all() and (x >= 2).all()
    expect = {"copy": x, "reverse": x.flip(1), "sort": x.sort(1).values}[name]
    assert torch.equal(y, expect)
    assert batch.mask[0].nonzero().flatten().tolist() == list(range(n + 1, 2 * n + 1))
    scores = task.pattern_scores(_perfect(task, batch), batch)
    assert scores[0, 0] == pytest.approx(1.0)


def test_reverse_scores_the_anti_diagonal():
    task = make_task(TrainConfig(task="reverse", vocab_size=6, seq_len=8))  # n = 3
    batch = Batch(
        torch.tensor([[0, 2, 3, 4, 1, 4, 3, 2]]),
        torch.zeros(1, 8, dtype=torch.int64),
        torch.zeros(1, 8, dtype=torch.bool),
    )
    keys, queries = task.pattern_targets(batch)
    assert queries[0].nonzero().flatten().tolist() == [4, 5, 6]
    # query 4 (SEP) predicts y1 = x3 at position 3; query 6 predicts y3 = x1 at position 1
    assert [int(keys[0, q].argmax()) for q in (4, 5, 6)] == [3, 2, 1]


def test_sort_scores_every_equal_source():
    task = make_task(TrainConfig(task="sort", vocab_size=6, seq_len=8))
    batch = Batch(
        torch.tensor([[0, 3, 2, 3, 1, 2, 3, 3]]),
        torch.zeros(1, 8, dtype=torch.int64),
        torch.zeros(1, 8, dtype=torch.bool),
    )
    keys, _ = task.pattern_targets(batch)
    assert keys[0, 4].nonzero().flatten().tolist() == [2]  # y1 = 2 sits at x2
    assert keys[0, 5].nonzero().flatten().tolist() == [1, 3]  # y2 = 3 sits at x1 and x3


def test_previous_token():
    task = make_task(TrainConfig(task="previous-token", vocab_size=16, seq_len=24))
    batch = task.sample(8, _gen(3))
    assert torch.equal(batch.targets[:, 1:], batch.ids[:, :-1]) and not batch.mask[:, 0].any()
    length = 24
    w = torch.diag_embed(torch.ones(length - 1), offset=-1)
    w[0, 0] = 1.0
    scores = task.pattern_scores(w.expand(8, 1, 1, -1, -1), batch)
    assert scores[0, 0] == pytest.approx(1.0)


def test_brackets_depth_and_uniform_score():
    task = make_task(TrainConfig(task="brackets", vocab_size=8, seq_len=24))
    batch = task.sample(64, _gen(4))
    step = torch.where(batch.ids[:, 1:] == 1, 1, -1)
    depth = step.cumsum(1)
    assert (depth >= 0).all() and (depth <= 4).all()
    assert torch.equal(batch.targets[:, 1:], 3 + depth)
    uniform = torch.tril(torch.ones(24, 24))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert task.pattern_scores(uniform.expand(64, 1, 1, -1, -1), batch)[0, 0] == pytest.approx(1.0)
    diagonal = torch.eye(24).expand(64, 1, 1, -1, -1)  # each query on itself: overlap 1/(t+1)
    expected = np.mean([1 / (t + 1) for t in range(1, 24)])
    assert task.pattern_scores(diagonal, batch)[0, 0] == pytest.approx(expected)


def test_text_char_and_word():
    text = "the cat sat on the mat. the cat ran."
    task = make_task(TrainConfig(task="text", vocab_size=6, seq_len=8), text)
    assert task.vocab[0] == "<unk>" and task.vocab[1] in (" ", "t")
    batch = task.sample(4, _gen(5))
    assert torch.equal(batch.targets[:, :-1], batch.ids[:, 1:]) and batch.mask.all()
    words = make_task(TrainConfig(task="text", vocab_size=50, seq_len=4, text_level="word"), text)
    assert words.vocab[1] == "the" and "." in words.vocab


def test_text_file_errors(tmp_path):
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"abc\x00def")
    empty = tmp_path / "e.txt"
    empty.write_text("  \n")
    with pytest.raises(ConfigError, match="binary"):
        make_task(TrainConfig(task="text", text_path=str(binary)))
    with pytest.raises(ConfigError, match="empty"):
        make_task(TrainConfig(task="text", text_path=str(empty)))
    with pytest.raises(ConfigError, match="fewer than seq_len"):
        make_task(TrainConfig(task="text", seq_len=64), "short text")


def test_needle_plants_one_key_and_asks_for_its_value():
    task = make_task(TrainConfig(task="needle", vocab_size=10, seq_len=24))
    batch = task.sample(200, _gen(4))
    ids, m = batch.ids, task.VALUE_TOKENS
    assert ids.shape == (200, 24) and (ids[:, 0] == 0).all() and (ids[:, 24 - m - 2] == 1).all()
    places = []
    for b in range(200):
        row = ids[b].tolist()
        hay, key, value = row[1 : 24 - m - 2], row[24 - m - 1], row[24 - m :]
        assert 1 not in hay and 0 not in hay and hay.count(key) == 1 and key not in value
        at = hay.index(key)
        assert hay[at + 1 : at + 1 + m] == value  # the value follows the key in the haystack
        places.append(at)
        assert batch.mask[b].nonzero().flatten().tolist() == [24 - m - 1 + i for i in range(m)]
        assert batch.targets[b, batch.mask[b]].tolist() == value
        assert int(task.needle_positions(batch)[b]) == at + 1
    assert min(places) == 0 and max(places) == 24 - 3 - m - m - 1  # every place in the haystack is drawn
    keys, queries = task.pattern_targets(batch)
    assert queries.sum(1).eq(m).all() and keys.sum(dim=(1, 2)).eq(m).all()
    scores = task.pattern_scores(_perfect(task, batch), batch)
    assert scores[0, 0] == pytest.approx(1.0) and scores[0, 1] < 0.2


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"task": "induction", "vocab_size": 8, "seq_len": 32}, "raise vocab_size to 16"),
        ({"task": "reverse", "seq_len": 17}, "even seq_len"),
        ({"task": "brackets", "vocab_size": 4}, "vocab_size >= 5"),
        ({"task": "needle", "vocab_size": 4}, "vocab_size >= 5"),
        ({"task": "needle", "seq_len": 7}, "seq_len >= 8"),
        ({"task": "induction", "heads": 3}, "heads do not divide"),
        ({"task": "induction", "kv_heads": 3}, "K/V heads"),
        ({"task": "nope"}, "task"),
    ],
)
def test_shapes_a_task_cannot_use(changes, words):
    with pytest.raises(ConfigError, match=words):
        make_task(TrainConfig(**changes))


def test_probe_is_fixed_across_seeds():
    a = make_task(TrainConfig(task="induction", seed=0)).probe().ids
    b = make_task(TrainConfig(task="induction", seed=5)).probe().ids
    assert torch.equal(a, b) and a.shape == (1, 32)


@pytest.mark.parametrize("name", ["needle", "copy", "reverse", "sort"])
def test_answer_rows_are_the_scored_rows_of_the_layout(name):
    task = make_task(TrainConfig(task=name, vocab_size=12, seq_len=24))
    batch = task.sample(5, torch.Generator().manual_seed(3))
    for ids, mask in zip(batch.ids.tolist(), batch.mask):
        assert task.answer_rows(ids) == mask.nonzero().flatten().tolist()
        assert task.answer_rows(ids[:-1]) is None  # another length
        assert task.answer_rows([5] + ids[1:]) is None  # no BOS
    assert make_task(TrainConfig(task="induction")).answer_rows([0] * 10) is None  # not marked by place
