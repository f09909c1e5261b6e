"""The shipped presets: listed, loadable, small, solving their task, and reproducible: the first
CHECK_STEPS steps re-trained now agree with the recorded prefix bit for bit where this machine's
fingerprint matches the recorded one, and within the stated tolerances everywhere else (the full
re-training is make train-presets-check).

The tolerances (attndesk.train.presets): each prefix loss within PREFIX_LOSS_RTOL = 1e-5
relative, each weight within PREFIX_WEIGHT_ATOL = 5e-4, the key biases no output depends on
within lr x steps. Why: the prefix re-trained here under other kernels (ATEN_CPU_CAPABILITY
default and avx2, MKL_ENABLE_INSTRUCTIONS=AVX2, MKL_CBWR=COMPATIBLE, 2 threads) or from initial
weights moved by one ulp drifted at most 8e-7 in a loss and 3.5e-5 in a weight (docs/train.md,
"Reproducible across machines"), so both bounds leave more than ten times that, while a real change
(another seed, a learning rate 10% higher, one sequence less per batch) moved a weight by 9e-3
and a loss by 4e-3 relative or more. A key
bias of attention without RoPE adds the same q.b_k to every score of a row, which the softmax
removes: its gradient is rounding noise, which Adam turns into steps of about lr, so it walks
on any machine (1e-3 measured) and only the bound lr x steps holds for it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from attndesk.errors import ConfigError
from attndesk.system.machine import KERNEL_ENV, fingerprint_differences, machine_fingerprint
from attndesk.train import presets
from attndesk.train.presets import (
    CHECK_STEPS,
    FINAL_ACCURACY_TOL,
    FINAL_PATTERN_TOL,
    PREFIX_FILE,
    PREFIX_LOSS_RTOL,
    PREFIX_WEIGHT_ATOL,
    PRESETS,
    check_prefix,
    check_preset,
    compare_final,
    compare_prefix,
    free_tensors,
    list_presets,
    load_preset,
    preset_machine,
    trained_dir,
    weights_sha256,
)
from attndesk.train.store import read_metadata

NAMES = [
    "induction",
    "induction-sparse",
    "reverse",
    "previous-token",
    "brackets",
    "needle",
    "needle-sink",
    "needle-off-by-one",
    "needle-deep",
]
ROOT = Path(__file__).resolve().parents[2]
# a preset's folder stays under 1 MiB, but for needle-deep: 4 layers with MLPs are 0.8 MB of weights,
# shipped twice (the final ones and the prefix's)
FOLDER_BYTES = {"needle-deep": 2 * 2**20}


def _recorded_prefix(name: str, folder: Path | None = None) -> tuple[dict[str, torch.Tensor], list[float]]:
    folder = folder or trained_dir() / name
    history = json.loads((folder / "history.json").read_text(encoding="utf-8"))
    return load_file(str(folder / PREFIX_FILE)), [row["loss"] for row in history[:CHECK_STEPS]]


def test_every_preset_is_listed_and_shipped():
    listed = list_presets()
    assert [p["name"] for p in listed] == NAMES and all(p["shipped"] for p in listed)


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_preset_solves_its_task(name):
    folder = trained_dir() / name
    assert sum(p.stat().st_size for p in folder.iterdir()) < FOLDER_BYTES.get(name, 2**20)
    run = load_preset(name)
    assert run.step == PRESETS[name].steps and run.status == "finished"
    fresh = run.task.sample(64, torch.Generator().manual_seed(777))  # sequences it never saw in training
    metrics = run.evaluate(fresh)
    assert metrics["accuracy"] >= 0.9 and metrics["pattern"] >= 0.5, metrics


@pytest.mark.parametrize("name", NAMES)
def test_a_preset_records_its_prefix_and_the_machine_that_made_it(name):
    meta = read_metadata(trained_dir() / name)
    weights, losses = _recorded_prefix(name)
    assert meta["check"]["steps"] == CHECK_STEPS and len(losses) == CHECK_STEPS
    assert weights_sha256(weights) == meta["check"]["sha256"]  # the shipped prefix is the one the hash names
    assert set(meta["machine"]) == set(machine_fingerprint())
    assert meta["machine"]["threads"] == presets.PRESET_THREADS


@pytest.mark.parametrize("name", NAMES)
def test_the_first_steps_reproduce_the_recorded_prefix(name):
    check = check_prefix(name)
    assert check.ok, check.summary()
    if check.bit_for_bit:
        assert "reproduced bit for bit" in check.summary()
    else:
        assert "within tolerance, not bit for bit (this machine differs: " in check.summary()


@pytest.mark.parametrize("name", ["reverse", "previous-token"])
def test_another_machine_is_checked_within_tolerance_and_says_why(name):
    recorded = read_metadata(trained_dir() / name)["machine"]
    check = check_prefix(name, machine=recorded | {"vendor": "AuthenticAMD", "threads": 2})
    assert check.ok and not check.bit_for_bit, check.summary()
    assert check.summary().startswith(
        f"{name}: the first {CHECK_STEPS} steps reproduced within tolerance, not bit for bit (this machine differs: "
        f"threads: 1 recorded, 2 here; vendor: {recorded['vendor']} recorded, AuthenticAMD here); weights within "
    )
    assert (
        f"tolerance {PREFIX_WEIGHT_ATOL:g}" in check.summary() and f"tolerance {PREFIX_LOSS_RTOL:g}" in check.summary()
    )


def test_the_prefix_under_the_default_kernels_agrees_within_tolerance():
    CHEAP = ["reverse", "previous-token"]  # learned positions (with free key biases) and RoPE, the fastest two
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV}
    env |= {"ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "attndesk.train.presets", "--check", "--prefix", *CHEAP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert json.loads(lines[0].removeprefix("this machine: "))["cpu_capability"] == "DEFAULT"
    recorded = read_metadata(trained_dir() / "induction")["machine"]["cpu_capability"]
    for name, line in zip(CHEAP, lines[1:], strict=True):
        if recorded == "DEFAULT":  # a preset made with the default kernels is checked bit for bit
            assert line.startswith(f"{name}: the first {CHECK_STEPS} steps reproduced bit for bit"), line
        else:
            assert line.startswith(f"{name}: the first {CHECK_STEPS} steps reproduced within tolerance"), line
            assert f"cpu_capability: {recorded} recorded, DEFAULT here" in line


def _doctored(tmp_path: Path, monkeypatch, name: str, tensor: str, delta: float) -> dict[str, torch.Tensor]:
    """A copy of preset ``name`` whose recorded prefix has ``delta`` added to one weight of
    ``tensor`` (its hash recorded to match), read in place of the shipped one."""
    folder = tmp_path / name
    shutil.copytree(trained_dir() / name, folder)
    weights = load_file(str(folder / PREFIX_FILE))
    weights[tensor][3, 5] += delta
    save_file(weights, str(folder / PREFIX_FILE))
    meta = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    meta["check"]["sha256"] = weights_sha256(weights)
    (folder / "config.json").write_text(json.dumps(meta), encoding="utf-8")
    monkeypatch.setattr(presets, "trained_dir", lambda: tmp_path)
    return weights


def test_a_wrong_weight_is_named_with_its_difference_on_either_path(tmp_path, monkeypatch):
    tensor = "blocks.0.attn.v_proj.weight"
    original = load_file(str(trained_dir() / "previous-token" / PREFIX_FILE))[tensor][3, 5].item()
    weights = _doctored(tmp_path, monkeypatch, "previous-token", tensor, 0.01)
    wrong = weights[tensor][3, 5].item()
    named = f"1 of {len(weights)} weight tensors differ: {tensor}[3, 5]: max |diff| {abs(wrong - original):.3g}"
    assert (
        f"({wrong:.7g} recorded, {original:.7g} now; tolerance "
        in compare_prefix(
            PRESETS["previous-token"],
            _recorded_prefix("previous-token", tmp_path / "previous-token"),
            _recorded_prefix("previous-token"),
        )[0]
    )

    recorded = read_metadata(tmp_path / "previous-token")["machine"]
    same_machine = check_prefix("previous-token", machine=recorded)
    assert not same_machine.ok and same_machine.bit_for_bit
    assert same_machine.problems[0] == "the weights' hash differs"
    assert f"differ: {tensor}[3, 5]: max |diff| {abs(wrong - original):.3g} (" in same_machine.problems[1]
    if not fingerprint_differences(recorded, preset_machine()):  # here every other weight is equal
        assert same_machine.problems[1].startswith(named) and same_machine.problems[1].endswith("tolerance 0)")
    assert "DIFFER, checked bit for bit" in same_machine.summary()

    other = check_prefix("previous-token", machine=preset_machine() | {"cpu_capability": "AVX2"})
    assert not other.ok and not other.bit_for_bit
    assert len(other.problems) == 1 and other.problems[0].startswith(named)
    assert other.problems[0].endswith(f"tolerance {PREFIX_WEIGHT_ATOL:g})")
    assert "DIFFER, checked within tolerance" in other.summary()


def test_a_wrong_loss_is_named_with_its_step_and_difference():
    cfg = PRESETS["induction"]
    weights, losses = _recorded_prefix("induction")
    off = list(losses)
    off[6] *= 1 + 3 * PREFIX_LOSS_RTOL
    [problem] = compare_prefix(cfg, (weights, losses), (weights, off))
    assert problem.startswith(
        f"the loss at step 7 is {off[6]:.9g} now, {losses[6]:.9g} recorded (relative difference 3e-05"
    )
    assert problem.endswith(f"tolerance {PREFIX_LOSS_RTOL:g})")
    within = list(losses)
    within[6] *= 1 + PREFIX_LOSS_RTOL / 3
    assert compare_prefix(cfg, (weights, losses), (weights, within)) == []
    assert compare_prefix(cfg, (weights, losses), (weights, within), exact=True)[0].startswith("the loss at step 7")


def test_the_tolerances_bound_each_weight_and_free_only_the_key_biases_no_output_reads():
    weights, losses = _recorded_prefix("reverse")
    cfg = PRESETS["reverse"]
    assert free_tensors(cfg, list(weights)) == {"blocks.0.attn.k_proj.bias", "blocks.1.attn.k_proj.bias"}
    assert free_tensors(PRESETS["induction"], list(weights)) == set()  # RoPE rotates the key bias per position
    # a sink's logit is not shifted with the row's scores, so the key bias changes the weights
    assert free_tensors(dataclasses.replace(cfg, sink="learned"), list(weights)) == set()
    assert free_tensors(dataclasses.replace(cfg, sink="off-by-one"), list(weights)) == set()

    def moved(name: str, by: float) -> dict[str, torch.Tensor]:
        out = dict(weights)
        out[name] = weights[name] + by
        return out

    assert (
        compare_prefix(cfg, (weights, losses), (moved("blocks.1.attn.q_proj.weight", 0.9 * PREFIX_WEIGHT_ATOL), losses))
        == []
    )
    [problem] = compare_prefix(
        cfg, (weights, losses), (moved("blocks.1.attn.q_proj.weight", 2 * PREFIX_WEIGHT_ATOL), losses)
    )
    assert problem.startswith(f"1 of {len(weights)} weight tensors differ: blocks.1.attn.q_proj.weight[")
    assert "]: max |diff| 0.001 (" in problem and problem.endswith(f"tolerance {PREFIX_WEIGHT_ATOL:g})")
    free_bound = cfg.lr * CHECK_STEPS
    assert compare_prefix(cfg, (weights, losses), (moved("blocks.0.attn.k_proj.bias", 0.5 * free_bound), losses)) == []
    [problem] = compare_prefix(cfg, (weights, losses), (moved("blocks.0.attn.k_proj.bias", 2 * free_bound), losses))
    assert (
        "blocks.0.attn.k_proj.bias[" in problem
        and "]: max |diff| 0.12 (" in problem
        and problem.endswith(f"tolerance {free_bound:g})")
    )


def test_the_key_bias_without_rope_gets_only_rounding_noise_as_gradient():
    run = load_preset("reverse")
    batch = run.task.sample(64, torch.Generator().manual_seed(5))
    run.model.train()
    logits, _ = run.model(batch.ids)
    torch.nn.functional.cross_entropy(logits[batch.mask], batch.targets[batch.mask]).backward()
    grads = {n: p.grad.abs().max().item() for n, p in run.model.named_parameters()}
    for name in free_tensors(run.cfg, list(grads)):
        assert grads[name] < 1e-6 * grads[name.replace(".bias", ".weight")], (name, grads[name])


def test_a_full_retrain_is_compared_by_accuracy_and_pattern_within_their_tolerances():
    shipped = load_preset("brackets").history[-1]
    assert compare_final(shipped, dict(shipped)) == []
    near = shipped | {"pattern": shipped["pattern"] - 0.5 * FINAL_PATTERN_TOL}
    assert compare_final(shipped, near) == []
    far = shipped | {"accuracy": shipped["accuracy"] - 3 * FINAL_ACCURACY_TOL}
    [problem] = compare_final(shipped, far)
    assert problem == (
        f"accuracy {far['accuracy']:.6f} differs from the shipped {shipped['accuracy']:.6f} by 0.003, "
        f"more than {FINAL_ACCURACY_TOL:g}"
    )


def test_train_presets_writes_the_prefix_and_the_machine_that_made_it(tmp_path, monkeypatch, capsys):
    short = PRESETS["previous-token"].replace(steps=CHECK_STEPS + 5)
    monkeypatch.setitem(presets.PRESETS, "previous-token", short)
    monkeypatch.setattr(presets, "trained_dir", lambda: tmp_path)
    assert presets.main(["previous-token"]) == 0
    folder = tmp_path / "previous-token"
    meta = read_metadata(folder)
    weights, losses = _recorded_prefix("previous-token", folder)
    assert meta["machine"] == preset_machine() and meta["step"] == CHECK_STEPS + 5
    assert meta["check"] == {"steps": CHECK_STEPS, "sha256": weights_sha256(weights)}
    again, again_losses = presets.train_prefix("previous-token")  # the prefix alone is the full run's start
    assert weights_sha256(again) == weights_sha256(weights) and again_losses == losses
    assert capsys.readouterr().out.startswith(f"previous-token: {CHECK_STEPS + 5} steps, accuracy ")
    assert presets.main(["--check", "--prefix", "previous-token"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"previous-token: the first {CHECK_STEPS} steps reproduced bit for bit "
        "(this machine's fingerprint matches the recorded one)"
    )
    same = check_preset("previous-token")  # the full re-train, as make train-presets-check runs it
    assert same.ok and same.bit_for_bit, same.summary()
    other = check_preset("previous-token", machine=meta["machine"] | {"cpu_capability": "ANOTHER"})
    assert other.ok and not other.bit_for_bit, other.summary()
    assert other.summary().startswith(
        f"previous-token: {CHECK_STEPS + 5} steps reproduced within tolerance, not bit for bit (this machine "
        f"differs: cpu_capability: {meta['machine']['cpu_capability']} recorded, ANOTHER here); accuracy "
    )
    assert f"difference 0; tolerance {FINAL_ACCURACY_TOL:g}), pattern " in other.summary()


def test_check_prefix_alone_is_refused():
    with pytest.raises(SystemExit) as exc:
        presets.main(["--prefix"])
    assert exc.value.code == 2


def test_unknown_preset():
    with pytest.raises(ConfigError, match="no preset 'nope'; presets: induction"):
        load_preset("nope")
