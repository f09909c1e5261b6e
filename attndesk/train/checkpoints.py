"""Checkpoints of a run kept in memory within a byte budget."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def state_bytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


@dataclass
class Checkpoint:
    step: int
    state: dict[str, torch.Tensor]
    loss: float | None = None


@dataclass
class CheckpointStore:
    """Copies of the weights at some steps, within ``budget`` bytes.

    Over the budget, the checkpoint whose neighbours lie closest together is dropped, again
    until it fits, so what is kept stays spread evenly over the run (the first and the newest
    always stay, even when the two alone exceed the budget)."""

    budget: int
    items: list[Checkpoint] = field(default_factory=list)

    @property
    def steps(self) -> list[int]:
        return [c.step for c in self.items]

    @property
    def nbytes(self) -> int:
        return sum(state_bytes(c.state) for c in self.items)

    def add(self, step: int, state: dict[str, torch.Tensor], loss: float | None = None) -> None:
        copy = {name: t.detach().clone() for name, t in state.items()}
        self.items = [c for c in self.items if c.step != step] + [Checkpoint(step, copy, loss)]
        while self.nbytes > self.budget and len(self.items) > 2:
            steps = self.steps
            spans = [steps[i + 1] - steps[i - 1] for i in range(1, len(steps) - 1)]
            del self.items[1 + spans.index(min(spans))]

    def get(self, step: int) -> Checkpoint:
        for c in self.items:
            if c.step == step:
                return c
        raise KeyError(f"no checkpoint at step {step}; kept: {', '.join(map(str, self.steps)) or 'none'}")

    def drop_after(self, step: int) -> None:
        self.items = [c for c in self.items if c.step <= step]
