"""Presets: small models trained by this trainer and shipped in ``attndesk/resources/trained``.

Each preset is a ``TrainConfig`` with a seed; ``make train-presets`` re-trains them all on
``PRESET_THREADS`` threads and writes the folders. Each shipped ``config.json`` records the hash
of the final weights, the hash of the weights after the first ``CHECK_STEPS`` steps (the prefix,
whose weights ship as ``prefix.safetensors``; its losses are the first rows of ``history.json``)
and the fingerprint of the machine that trained it (``attndesk.system.machine``).

Reproducible means: on a machine whose fingerprint matches the recorded one, re-training gives
the same bits (the hashes); on any other machine kernels may round differently, so the re-trained
prefix agrees with the recorded one within ``PREFIX_LOSS_RTOL`` / ``PREFIX_WEIGHT_ATOL`` and the
fully re-trained preset reaches the recorded accuracy and pattern score within
``FINAL_ACCURACY_TOL`` / ``FINAL_PATTERN_TOL`` (docs/train.md gives the drift they were set from).
The test suite checks the prefix (``check_prefix``); ``make train-presets-check`` re-trains every
preset to its end (``check_preset``).

Run as ``python -m attndesk.train.presets [--check [--prefix]] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from attndesk.errors import ConfigError
from attndesk.files.atomic import StagedFolder
from attndesk.system.machine import fingerprint_differences, machine_fingerprint

from .config import TrainConfig
from .run import TrainRun
from .store import load_run, read_metadata, save_tensors, write_run_files
from .trainer import Trainer

PRESET_THREADS = 1  # CPU GEMMs may sum in another order on another thread count; one thread is also fastest for these small models on a busy machine
CHECK_STEPS = 20
PREFIX_FILE = "prefix.safetensors"  # the weights after CHECK_STEPS steps

# Where the machine differs from the recorded one (the drift these allow for: docs/train.md):
PREFIX_LOSS_RTOL = 1e-5  # each of the prefix's losses, relative
PREFIX_WEIGHT_ATOL = 5e-4  # each weight of the prefix (the initial weights are about 0.1)
FINAL_ACCURACY_TOL = 1e-3  # the full re-train's accuracy on the evaluation set
FINAL_PATTERN_TOL = 1e-3  # and its best head's pattern score
_FINAL_TOLERANCES = (("accuracy", FINAL_ACCURACY_TOL), ("pattern", FINAL_PATTERN_TOL))

PRESETS: dict[str, TrainConfig] = {
    "induction": TrainConfig(task="induction", seed=0, steps=600, layers=2, heads=4, embed_dim=64, position="rope"),
    "induction-sparse": TrainConfig(
        task="induction", seed=0, steps=600, layers=2, heads=4, embed_dim=64, position="rope", head_l1=0.03
    ),
    "reverse": TrainConfig(task="reverse", seed=0, steps=400, layers=2, heads=4, embed_dim=64, position="learned"),
    "previous-token": TrainConfig(
        task="previous-token", seed=0, steps=400, layers=1, heads=2, embed_dim=32, position="rope"
    ),
    "brackets": TrainConfig(
        task="brackets",
        seed=0,
        steps=600,
        layers=2,
        heads=4,
        embed_dim=64,
        position="learned",
        mlp=True,
        layernorm=True,
    ),
    "needle": TrainConfig(task="needle", seed=0, steps=1500, layers=2, heads=4, embed_dim=64, position="rope"),
    "needle-sink": TrainConfig(
        task="needle", seed=0, steps=1500, layers=2, heads=4, embed_dim=64, position="rope", sink="learned"
    ),
    "needle-off-by-one": TrainConfig(
        task="needle", seed=0, steps=1500, layers=2, heads=4, embed_dim=64, position="rope", sink="off-by-one"
    ),
    "needle-deep": TrainConfig(
        task="needle",
        seed=0,
        steps=1500,
        layers=4,
        heads=4,
        embed_dim=64,
        position="rope",
        mlp=True,
        layernorm=True,
    ),
}
ABOUT = {
    "induction": "2 layers, attention only: a previous-token head feeds an induction head",
    "induction-sparse": "the induction model trained with a penalty on each head's weights: one head pair does the work",
    "reverse": "2 layers, attention only, learned positions: the anti-diagonal",
    "previous-token": "1 layer, 2 heads, RoPE: each token looks one back",
    "brackets": "2 layers with MLPs and LayerNorm: a head spread evenly over the prefix counts the depth",
    "needle": "2 layers, RoPE: a key's value found in filler; layer 2's heads copy it (retrieval heads)",
    "needle-sink": "the needle model with a learned sink logit per head (GPT-OSS's softmax sink)",
    "needle-off-by-one": "the needle model with an off-by-one softmax (a sink fixed at 0)",
    "needle-deep": "4 layers with MLPs and LayerNorm: layer 2's heads copy the value (the retrieval check's model)",
}


def weights_sha256(state: dict[str, torch.Tensor]) -> str:
    """A hash of every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        digest.update(t.numpy().tobytes())
    return digest.hexdigest()


@contextmanager
def preset_threads() -> Iterator[None]:
    """Train on PRESET_THREADS threads, then put the caller's count back."""
    before = torch.get_num_threads()
    torch.set_num_threads(PRESET_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def trained_dir() -> Path:
    return Path(str(resources.files("attndesk.resources").joinpath("trained")))


def list_presets() -> list[dict[str, object]]:
    """Every preset: name, task, steps, one line about it, and whether its trained folder ships."""
    return [
        {
            "name": name,
            "task": cfg.task,
            "steps": cfg.steps,
            "about": ABOUT[name],
            "shipped": (trained_dir() / name / "config.json").is_file(),
        }
        for name, cfg in PRESETS.items()
    ]


def load_preset(name: str) -> TrainRun:
    """The shipped trained model of preset ``name`` (ConfigError: unknown or not shipped)."""

    if name not in PRESETS:
        raise ConfigError(f"no preset {name!r}; presets: {', '.join(PRESETS)}")
    folder = trained_dir() / name
    if not (folder / "config.json").is_file():
        raise ConfigError(f"preset {name!r} is not shipped in {folder}; run make train-presets")
    return load_run(folder)


def preset_machine() -> dict[str, Any]:
    """This machine's fingerprint as a preset records it (on PRESET_THREADS threads)."""
    return machine_fingerprint(PRESET_THREADS)


def _state(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.run.model.state_dict().items()}


def train_prefix(name: str, steps: int = CHECK_STEPS) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The weights after the first ``steps`` steps of preset ``name``, trained now, and each step's loss."""
    with preset_threads():
        trainer = Trainer(PRESETS[name].replace(steps=steps))
        losses = [report.loss for report in trainer.steps()]
    return _state(trainer), losses


def free_tensors(cfg: TrainConfig, names: list[str]) -> set[str]:
    """The tensors no output depends on: the key biases of attention without RoPE or soft-cap
    (they add q.b_k to every score of a row, which the softmax removes). Their gradient is zero
    up to rounding, which Adam scales to steps of about ``lr``, so they drift on any machine. A
    sink's logit is not shifted with the row, so under a sink they are not free."""
    if cfg.position == "rope" or cfg.softcap is not None or cfg.sink != "none":
        return set()
    return {n for n in names if n.endswith(".attn.k_proj.bias")}


def _tensor_gaps(
    recorded: dict[str, torch.Tensor], now: dict[str, torch.Tensor], tolerance: dict[str, float]
) -> list[tuple[float, str]]:
    """(max |difference|, description) of every tensor that differs by more than its tolerance."""
    gaps = []
    for name in sorted(set(recorded) | set(now)):
        if name not in recorded or name not in now:
            gaps.append((float("inf"), f"{name}: {'missing now' if name in recorded else 'not recorded'}"))
            continue
        a, b = recorded[name].double(), now[name].double()
        if a.shape != b.shape:
            gaps.append((float("inf"), f"{name}: shape {list(a.shape)} recorded, {list(b.shape)} now"))
            continue
        diff = (b - a).abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        if not worst <= tolerance.get(name, 0.0):  # NaN differs too
            at = [int(i) for i in torch.unravel_index(diff.nan_to_num(float("inf")).argmax(), diff.shape)]
            gaps.append(
                (
                    worst,
                    f"{name}{at}: max |diff| {worst:.3g} ({a[tuple(at)].item():.7g} recorded, "
                    f"{b[tuple(at)].item():.7g} now; tolerance {tolerance.get(name, 0.0):g})",
                )
            )
    return sorted(gaps, key=lambda g: g[0] if g[0] == g[0] else float("inf"), reverse=True)  # NaN first


def _max_diffs(recorded: dict[str, torch.Tensor], now: dict[str, torch.Tensor]) -> dict[str, float]:
    return {
        n: float((now[n].double() - t.double()).abs().max())
        for n, t in recorded.items()
        if n in now and now[n].shape == t.shape and t.numel()
    }


def _relative(recorded: float, now: float) -> float:
    return abs(now - recorded) / abs(recorded) if recorded else (0.0 if now == recorded else float("inf"))


def compare_prefix(
    cfg: TrainConfig,
    recorded: tuple[dict[str, torch.Tensor], list[float]],
    now: tuple[dict[str, torch.Tensor], list[float]],
    *,
    exact: bool = False,
) -> list[str]:
    """What differs between a recorded prefix (weights, per-step losses) and one trained now,
    beyond the cross-machine tolerances (or at all, ``exact``): the worst tensors with their
    largest difference, and the first step whose loss differs. Empty when they agree."""
    (w0, loss0), (w1, loss1) = recorded, now
    free = free_tensors(cfg, list(w0))
    atol = {n: 0.0 if exact else cfg.lr * len(loss0) if n in free else PREFIX_WEIGHT_ATOL for n in w0}
    problems = []
    gaps = _tensor_gaps(w0, w1, atol)
    if gaps:
        shown = "; ".join(text for _, text in gaps[:3])
        more = f" (and {len(gaps) - 3} more)" if len(gaps) > 3 else ""
        problems.append(f"{len(gaps)} of {len(w0)} weight tensors differ: {shown}{more}")
    if len(loss0) != len(loss1):
        problems.append(f"{len(loss0)} losses recorded, {len(loss1)} now")
    rtol = 0.0 if exact else PREFIX_LOSS_RTOL
    for step, (a, b) in enumerate(zip(loss0, loss1, strict=False), start=1):
        if not abs(b - a) <= rtol * abs(a):
            problems.append(
                f"the loss at step {step} is {b:.9g} now, {a:.9g} recorded "
                f"(relative difference {_relative(a, b):.3g}; tolerance {rtol:g})"
            )
            break
    return problems


def prefix_drift(
    cfg: TrainConfig,
    recorded: tuple[dict[str, torch.Tensor], list[float]],
    now: tuple[dict[str, torch.Tensor], list[float]],
) -> str:
    """How far a prefix trained now lies from the recorded one, in a phrase."""
    (w0, loss0), (w1, loss1) = recorded, now
    diffs = _max_diffs(w0, w1)
    free = free_tensors(cfg, list(w0))
    bound = max(((d, n) for n, d in diffs.items() if n not in free), default=(0.0, "-"))
    words = [f"weights within {bound[0]:.2g} ({bound[1]}; tolerance {PREFIX_WEIGHT_ATOL:g})"]
    if free:
        worst = max(diffs.get(n, 0.0) for n in free)
        words.append(f"key biases no output depends on within {worst:.2g} (tolerance {cfg.lr * len(loss0):g})")
    rel = [_relative(a, b) for a, b in zip(loss0, loss1, strict=False)]
    if rel:
        step = max(range(len(rel)), key=rel.__getitem__)
        words.append(f"losses within {rel[step]:.2g} relative (step {step + 1}; tolerance {PREFIX_LOSS_RTOL:g})")
    return ", ".join(words)


@dataclass
class PresetCheck:
    """A re-trained preset (or its prefix) against the shipped one. ``bit_for_bit``: the
    machines' fingerprints match, so the bits were compared; else ``machine`` says what differs
    and the tolerances were used. ``problems`` is empty when it reproduced."""

    name: str
    what: str
    bit_for_bit: bool
    machine: list[str]
    problems: list[str] = field(default_factory=list)
    details: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: what was checked, how, and what differs."""
        if self.bit_for_bit:
            how = "bit for bit (this machine's fingerprint matches the recorded one)"
        else:
            how = f"within tolerance, not bit for bit (this machine differs: {'; '.join(self.machine)})"
        verdict = f"reproduced {how}" if self.ok else f"DIFFER, checked {how}"
        return "; ".join(
            [f"{self.name}: {self.what} {verdict}", *([self.details] if self.details else []), *self.problems]
        )


def _recorded(name: str) -> tuple[dict[str, Any], TrainRun]:

    return read_metadata(trained_dir() / name), load_preset(name)


def check_prefix(name: str, *, machine: dict[str, Any] | None = None) -> PresetCheck:
    """Re-train the first recorded steps of preset ``name`` and compare them with the recorded
    prefix: by hash where ``machine`` (default: this one) matches the recorded fingerprint, else
    within the tolerances."""
    meta, shipped = _recorded(name)
    steps = int(meta["check"]["steps"])
    recorded = (load_file(str(trained_dir() / name / PREFIX_FILE)), [row["loss"] for row in shipped.history[:steps]])
    now = train_prefix(name, steps)
    differs = fingerprint_differences(meta.get("machine"), preset_machine() if machine is None else machine)
    check = PresetCheck(name, f"the first {steps} steps", not differs, differs)
    if check.bit_for_bit:
        if weights_sha256(now[0]) != meta["check"]["sha256"]:
            check.problems = ["the weights' hash differs", *compare_prefix(shipped.cfg, recorded, now, exact=True)]
    else:
        check.problems = compare_prefix(shipped.cfg, recorded, now)
        check.details = prefix_drift(shipped.cfg, recorded, now)
    return check


def train_preset(name: str) -> tuple[TrainRun, dict[str, torch.Tensor], dict[str, object]]:
    """Train preset ``name`` to its steps; the run, its prefix's weights and what to record."""
    with preset_threads():
        trainer = Trainer(PRESETS[name])
        prefix: dict[str, torch.Tensor] = {}
        for report in trainer.steps():
            if report.step == CHECK_STEPS:
                prefix = _state(trainer)
    run = trainer.run
    extra = {
        "preset": name,
        "weights_sha256": weights_sha256(run.model.state_dict()),
        "check": {"steps": CHECK_STEPS, "sha256": weights_sha256(prefix)},
        "threads": PRESET_THREADS,
        "machine": preset_machine(),
    }
    return run, prefix, extra


def compare_final(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Where the last evaluation of a full re-train (a history row) misses the recorded one's
    accuracy or pattern score by more than FINAL_ACCURACY_TOL / FINAL_PATTERN_TOL."""
    return [
        f"{key} {float(now[key]):.6f} differs from the shipped {float(recorded[key]):.6f} by "
        f"{abs(float(now[key]) - float(recorded[key])):.2g}, more than {tol:g}"
        for key, tol in _FINAL_TOLERANCES
        if not abs(float(now[key]) - float(recorded[key])) <= tol
    ]


def check_preset(name: str, *, machine: dict[str, Any] | None = None) -> PresetCheck:
    """Re-train preset ``name`` to its end and compare it with the shipped one: the final
    weights bit for bit where ``machine`` (default: this one) matches the recorded fingerprint,
    else the accuracy and pattern score of the last evaluation (``compare_final``)."""
    meta, shipped = _recorded(name)
    run, _, extra = train_preset(name)
    differs = fingerprint_differences(meta.get("machine"), preset_machine() if machine is None else machine)
    check = PresetCheck(name, f"{run.step} steps", not differs, differs)
    was, now = shipped.history[-1], run.history[-1]
    check.details = ", ".join(
        f"{key} {float(now[key]):.6f} (shipped {float(was[key]):.6f}, difference "
        f"{abs(float(now[key]) - float(was[key])):.2g}{'' if check.bit_for_bit else f'; tolerance {tol:g}'})"
        for key, tol in _FINAL_TOLERANCES
    )
    if check.bit_for_bit:
        if extra["weights_sha256"] != meta["weights_sha256"]:
            gaps = _tensor_gaps(shipped.model.state_dict(), run.model.state_dict(), {})
            check.problems = ["the final weights' hash differs", *(text for _, text in gaps[:3])]
    else:
        check.problems = compare_final(was, now)
    return check


def _write(name: str) -> int:

    run, prefix, extra = train_preset(name)
    run.checkpoints.items = []  # the shipped folder holds the final weights and the prefix only (under 1 MB)
    metrics = run.history[-1]
    target = trained_dir() / name
    try:
        with StagedFolder(target) as stage:
            write_run_files(run, stage.path, extra)
            save_tensors(prefix, stage.path(PREFIX_FILE), {"step": str(CHECK_STEPS)})
    except OSError as exc:
        raise ConfigError(f"cannot write the preset to {target}: {exc.strerror or exc}") from None
    print(
        f"{name}: {run.step} steps, accuracy {metrics.get('accuracy', float('nan')):.3f}, "
        f"pattern {metrics.get('pattern', float('nan')):.3f}, {metrics['time_s']:.0f} s",
        flush=True,
    )
    return 0


def _check(name: str, prefix: bool) -> int:
    check = check_prefix(name) if prefix else check_preset(name)
    print(check.summary(), flush=True)
    return 0 if check.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attndesk.train.presets", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="re-train and compare with the shipped presets")
    parser.add_argument("--prefix", action="store_true", help=f"with --check: only the first {CHECK_STEPS} steps")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(PRESETS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PRESETS]
    if unknown:
        parser.error(f"no preset {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    if args.prefix and not args.check:
        parser.error("--prefix goes with --check")
    if args.check:
        print(f"this machine: {json.dumps(preset_machine())}", flush=True)
    failures = 0
    for name in args.names or list(PRESETS):
        failures += _check(name, args.prefix) if args.check else _write(name)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
