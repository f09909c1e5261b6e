"""Presets: small models trained by this trainer and shipped in ``attndesk/resources/trained``.

Each preset is a ``TrainConfig`` with a seed; ``make train-presets`` re-trains them all on
``PRESET_THREADS`` threads and writes the folders; ``make train-presets-check`` re-trains them
and compares the weights with the shipped ones bit for bit. Each shipped ``config.json`` also
records the hash of the weights after the first ``CHECK_STEPS`` steps, which the test suite
re-computes quickly (``check_prefix``).

Run as ``python -m attndesk.train.presets [--check] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import torch

from attndesk.core.errors import ConfigError

from .config import TrainConfig
from .run import TrainRun
from .trainer import Trainer, train

PRESET_THREADS = 1  # CPU GEMMs may sum in another order on another thread count; one thread is also fastest for these small models on a busy machine
CHECK_STEPS = 20

PRESETS: dict[str, TrainConfig] = {
    "induction": TrainConfig(task="induction", seed=0, steps=600, layers=2, heads=4, embed_dim=64, position="rope"),
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
}
ABOUT = {
    "induction": "2 layers, attention only: a previous-token head feeds an induction head",
    "reverse": "2 layers, attention only, learned positions: the anti-diagonal",
    "previous-token": "1 layer, 2 heads, RoPE: each token looks one back",
    "brackets": "2 layers with MLPs and LayerNorm: a head spread evenly over the prefix counts the depth",
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
    from .store import load_run

    if name not in PRESETS:
        raise ConfigError(f"no preset {name!r}; presets: {', '.join(PRESETS)}")
    folder = trained_dir() / name
    if not (folder / "config.json").is_file():
        raise ConfigError(f"preset {name!r} is not shipped in {folder}; run make train-presets")
    return load_run(folder)


def check_prefix(name: str, steps: int = CHECK_STEPS) -> str:
    """The weights' hash after the first ``steps`` steps of preset ``name``, trained now."""
    cfg = PRESETS[name].replace(steps=steps)
    with preset_threads():
        trainer = Trainer(cfg)
        for _ in trainer.steps():
            pass
    return weights_sha256(trainer.run.model.state_dict())


def train_preset(name: str) -> tuple[TrainRun, dict[str, object]]:
    """Train preset ``name`` to its steps; returns the run and the hashes to record."""
    with preset_threads():
        run = train(PRESETS[name])
    extra = {
        "preset": name,
        "weights_sha256": weights_sha256(run.model.state_dict()),
        "check": {"steps": CHECK_STEPS, "sha256": check_prefix(name)},
        "threads": PRESET_THREADS,
    }
    return run, extra


def _write(name: str) -> int:
    from .store import save_run

    run, extra = train_preset(name)
    run.checkpoints.items = []  # the shipped folder holds the final weights only (under 1 MB)
    metrics = run.history[-1]
    save_run(run, trained_dir() / name, extra=extra)
    print(
        f"{name}: {run.step} steps, accuracy {metrics.get('accuracy', float('nan')):.3f}, "
        f"pattern {metrics.get('pattern', float('nan')):.3f}, {metrics['time_s']:.0f} s",
        flush=True,
    )
    return 0


def _check(name: str) -> int:
    from .store import read_metadata

    shipped = read_metadata(trained_dir() / name)["weights_sha256"]
    run, extra = train_preset(name)
    same = extra["weights_sha256"] == shipped
    print(
        f"{name}: {'reproduced bit for bit' if same else 'DIFFERS from the shipped weights'} ({run.step} steps)",
        flush=True,
    )
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attndesk.train.presets", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="re-train and compare with the shipped weights")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(PRESETS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PRESETS]
    if unknown:
        parser.error(f"no preset {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    failures = 0
    for name in args.names or list(PRESETS):
        failures += (_check if args.check else _write)(name)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
