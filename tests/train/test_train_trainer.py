"""The trainer: the contract, determinism bit for bit, stop / pause between steps, divergence,
checkpoints within a byte budget, probe snapshots, the caller's RNG untouched."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext
from attndesk.train import TrainConfig, Trainer, train
from attndesk.train.checkpoints import CheckpointStore, state_bytes
from attndesk.train.model import build_model, head_norms

TINY = {
    "embed_dim": 16,
    "heads": 2,
    "seq_len": 12,
    "vocab_size": 8,
    "eval_every": 3,
    "checkpoint_every": 2,
    "batch_size": 16,
}


def test_contract_shapes():
    cfg = TrainConfig(task="induction", seed=0, steps=4, **TINY)
    assert cfg.vocab_size == 8 and cfg.seq_len == 12
    run = train(cfg)
    assert [row["step"] for row in run.history] == [1, 2, 3, 4]
    assert all(np.isfinite(row["loss"]) for row in run.history)
    ids = torch.randint(1, 8, (3, 12))
    ids[:, 0] = 0
    assert run.logits(ids).shape == (3, 12, 8)
    weights = run.attention(ids)
    assert weights.shape == (3, 2, 2, 12, 12)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 2, 2, 12))
    assert (weights.triu(1) == 0).all()  # causal: nothing on later keys
    assert run.status == "finished" and run.step == 4


def test_defaults_are_the_induction_setup():
    cfg = TrainConfig(task="induction", seed=0)
    assert (cfg.layers, cfg.heads, cfg.embed_dim, cfg.mlp, cfg.batch_size, cfg.lr) == (2, 4, 64, False, 64, 3e-3)


@pytest.mark.parametrize(
    "variant",
    [
        {"position": "sinusoidal"},
        {"position": "learned", "layernorm": True, "mlp": True},
        {"position": "alibi", "window": 4},
        {"position": "none", "softcap": 5.0},
        {"position": "rope", "kv_heads": 1, "layers": 1},
    ],
)
def test_same_loss_curve_bit_for_bit(variant):
    cfg = TrainConfig(task="induction", seed=3, steps=5, **(TINY | variant))
    first, second = train(cfg), train(cfg)
    assert [r["loss"] for r in first.history] == [r["loss"] for r in second.history]
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    other = train(cfg.replace(seed=4))
    assert [r["loss"] for r in other.history] != [r["loss"] for r in first.history]


def test_the_callers_rng_is_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train(TrainConfig(task="copy", steps=2, **(TINY | {"seq_len": 10})))
    assert torch.equal(torch.rand(3), expected)


def test_the_decoder_uses_attndesks_attention():
    from attndesk.attention.kernel import MultiHeadAttention

    trainer = Trainer(TrainConfig(task="induction", steps=1, **TINY))
    layers = [m for m in trainer.run.model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(layers) == 2


def test_stop_between_steps_keeps_what_was_trained():
    stop = threading.Event()

    def on_step(report):
        if report.step == 3:
            stop.set()  # as the window's Stop button would, mid-run

    run = train(TrainConfig(task="induction", steps=50, **TINY), on_step=on_step, stop=stop)
    assert run.status == "stopped" and run.step == 3 and len(run.history) == 3
    assert "stopped at step 3" in run.message
    reference = train(TrainConfig(task="induction", steps=3, **TINY))
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, run.model.state_dict()[name])


def test_a_cancelled_job_context_stops_between_steps_with_reports_and_progress():
    ctx, steps, seen = None, [], []

    def on_report(report):
        steps.append(report.step)
        if report.step == 3:
            ctx.cancel()  # as the window's executor would, for a newer job or the window closing

    ctx = JobContext(lambda f, m: seen.append((f, m)), report=on_report)
    run = train(TrainConfig(task="induction", steps=50, **TINY), ctx=ctx)
    assert run.status == "stopped" and run.step == 3 and steps == [1, 2, 3]
    assert seen == [(i / 50, f"step {i} of 50") for i in (1, 2, 3)]


def test_pause_holds_the_loop_until_cleared():
    pause, stop = threading.Event(), threading.Event()
    trainer = Trainer(TrainConfig(task="induction", steps=6, **TINY))
    seen: list[int] = []
    pause.set()
    worker = threading.Thread(target=lambda: seen.extend(r.step for r in trainer.steps(pause=pause, stop=stop)))
    worker.start()
    worker.join(0.3)
    assert seen == [] and worker.is_alive()  # paused before the first step
    pause.clear()
    worker.join(30)
    assert not worker.is_alive() and seen == [1, 2, 3, 4, 5, 6]


def test_stop_while_paused():
    pause, stop = threading.Event(), threading.Event()
    pause.set()
    timer = threading.Timer(0.1, stop.set)
    timer.start()
    run = train(TrainConfig(task="induction", steps=6, **TINY), pause=pause, stop=stop)
    timer.join()
    assert run.status == "stopped" and run.step == 0


def test_a_nan_loss_stops_and_keeps_the_last_good_weights():
    cfg = TrainConfig(task="induction", steps=20, **TINY)
    trainer = Trainer(cfg)
    calls = {"n": 0}

    def poison(module, inputs, output):  # the 6th training forward (step 6) diverges
        if not module.training:  # evaluations and probes
            return output
        calls["n"] += 1
        return output * float("nan") if calls["n"] == 6 else output

    hook = trainer.run.model.unembed.register_forward_hook(poison)
    steps = [report.step for report in trainer.steps()]
    hook.remove()
    assert steps == [1, 2, 3, 4, 5]
    run = trainer.run
    assert run.status == "diverged" and "nan" in run.message and "last good" in run.message
    good = run.step
    assert good == 4 and all(row["step"] <= good for row in run.history)
    assert max(run.checkpoints.steps) <= good
    reference = train(cfg.replace(steps=good))
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, run.model.state_dict()[name])


def test_checkpoint_store_stays_within_its_budget():
    state = {"w": torch.zeros(256)}  # 1 KiB
    store = CheckpointStore(budget=5 * 1024)
    for step in range(0, 41, 2):
        store.add(step, state)
        assert store.nbytes <= 5 * 1024
    assert store.steps[0] == 0 and store.steps[-1] == 40 and len(store.steps) >= 3
    gaps = np.diff(store.steps)
    assert gaps.max() <= 2 * gaps.min()  # spread over the run, not bunched at the end
    assert state_bytes(state) == 1024
    with pytest.raises(KeyError, match="no checkpoint at step 3"):
        store.get(3)


def test_checkpoints_and_probes_reported():
    cfg = TrainConfig(task="reverse", steps=4, probe_every_ms=0, **(TINY | {"seq_len": 10}))
    reports = list(Trainer(cfg).steps())
    assert [r.checkpoint for r in reports] == [False, True, False, True]
    probe = reports[-1].probe
    assert probe is not None and probe.weights.shape == (2, 2, 10, 10) and probe.labels[0] == "BOS"
    assert reports[2].scores.shape == (2, 2) and 0 <= reports[2].pattern <= 1
    assert all(0 <= r.batch_accuracy <= 1 and 0 <= r.batch_pattern <= 1 for r in reports)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"lr": 0.0}, "lr"),
        ({"steps": 0}, "steps"),
        ({"position": "spiral"}, "position"),
        ({"softcap": -1.0}, "softcap"),
        ({"embed_dim": 15, "heads": 3, "position": "rope"}, "RoPE"),
    ],
)
def test_bad_config_is_one_clear_line(changes, words):
    with pytest.raises((ConfigError, TypeError), match=words):
        Trainer(TrainConfig(task="induction", **changes))


def test_bad_ids_are_refused():
    run = train(TrainConfig(task="induction", steps=1, **TINY))
    with pytest.raises(ConfigError, match="int64"):
        run.logits(torch.zeros(2, 4))
    with pytest.raises(ConfigError, match=r"0\.\.7"):
        run.logits(torch.full((1, 4), 9))
    with pytest.raises(ConfigError, match="1 to 12"):
        run.attention(torch.zeros(1, 13, dtype=torch.int64))


def _counts_per_step(trainer: Trainer, monkeypatch) -> list[int]:
    """torch's thread count in force during each of the trainer's steps."""
    seen: list[int] = []
    one_step = Trainer._one_step

    def spy(self, loop):  # the real step, noting the count it runs on
        seen.append(torch.get_num_threads())
        return one_step(self, loop)

    monkeypatch.setattr(Trainer, "_one_step", spy)
    for _ in trainer.steps():
        pass
    return seen


def test_by_default_the_callers_thread_count_is_kept(monkeypatch):
    base = torch.get_num_threads()  # 1, or what make test-isa sets
    trainer = Trainer(TrainConfig(task="induction", seed=0, steps=3, **TINY))
    assert _counts_per_step(trainer, monkeypatch) == [base] * 3


def test_a_given_thread_count_is_used_for_every_step_then_restored(monkeypatch):
    base = torch.get_num_threads()
    given = 1 if base == 2 else 2  # another count than the caller's
    trainer = Trainer(TrainConfig(task="induction", seed=0, steps=3, **TINY), threads=given)
    assert _counts_per_step(trainer, monkeypatch) == [given] * 3
    assert torch.get_num_threads() == base


def test_auto_threads_follow_the_load_every_recheck(monkeypatch):
    from attndesk.system import threads
    from attndesk.train import trainer as trainer_module

    calls = [0]

    def load() -> float:  # idle for the first choices, then two busy processes
        calls[0] += 1
        return 0.0 if calls[0] <= 2 else 2.0

    monkeypatch.setattr(trainer_module, "RECHECK_STEPS", 3)
    monkeypatch.setattr(threads, "WORK_PER_THREAD", 1.0)  # the tiny model's steps count as large work
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_elsewhere", load)
    base = torch.get_num_threads()
    trainer = Trainer(TrainConfig(task="induction", seed=0, steps=5, **TINY), threads="auto")
    assert _counts_per_step(trainer, monkeypatch) == [2, 2, 2, 1, 1]
    assert torch.get_num_threads() == base


def test_auto_threads_give_tiny_models_one_thread_on_an_idle_machine(monkeypatch):
    from attndesk.system import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: 0.0)
    trainer = Trainer(TrainConfig(task="induction", seed=0, steps=2, **TINY), threads="auto")
    assert _counts_per_step(trainer, monkeypatch) == [1, 1]


def _head_norms_by_hand(model) -> float:
    """Each K/V head's value rows (bias included) and each query head's output columns, one norm each."""
    total = 0.0
    for block in model.blocks:
        attn = block.attn
        d = attn.head_dim
        for g in range(attn.kv_heads):
            rows = slice(g * d, (g + 1) * d)
            w, b = attn.v_proj.weight[rows].detach().double(), attn.v_proj.bias[rows].detach().double()
            total += float(((w**2).sum() + (b**2).sum()).sqrt())
        for h in range(attn.num_heads):
            total += float((attn.out_proj.weight[:, h * d : (h + 1) * d].detach().double() ** 2).sum().sqrt())
    return total


@pytest.mark.parametrize("kv_heads", [None, 1])
def test_the_head_penalty_is_one_norm_per_head(kv_heads):
    cfg = TrainConfig(task="induction", seed=2, kv_heads=kv_heads, **TINY)
    model = build_model(cfg)
    assert float(head_norms(model).detach()) == pytest.approx(_head_norms_by_hand(model), rel=1e-6)


def test_the_head_penalty_shrinks_the_heads_and_is_left_out_of_the_reported_loss():
    quiet = TINY | {"eval_every": 100, "checkpoint_every": 100}
    plain, penalised = (
        train(TrainConfig(task="induction", seed=0, steps=8, head_l1=c, **quiet), threads=1) for c in (0.0, 0.2)
    )
    # the same first batch on the same initial weights: the reported loss is the cross-entropy alone
    assert penalised.history[0]["loss"] == plain.history[0]["loss"]
    assert penalised.history[1]["loss"] != plain.history[1]["loss"]  # the penalty entered the update
    assert _head_norms_by_hand(penalised.model) < 0.9 * _head_norms_by_hand(plain.model)
