"""The training animation: frames chosen where the run's metrics change, and frames filled by the
heatmaps rather than by blank bands."""

from __future__ import annotations

import imageio.v3 as iio
import numpy as np

from attndesk.render.training import BLANK_KEPT, animation_steps, write_animation
from attndesk.train import TrainConfig, train


def _phase_change_history(start: int, end: int, steps: int = 600, every: int = 25) -> list[dict]:
    """Measured rows of a run whose accuracy and pattern score rise and loss falls between
    ``start`` and ``end`` only (flat before and after)."""
    rows = []
    for step in range(every, steps + 1, every):
        done = min(max((step - start) / (end - start), 0.0), 1.0)
        rows.append({"step": step, "loss": 3.0 * (1 - done), "accuracy": 0.1 + 0.9 * done, "pattern": done})
    return rows


def test_frames_go_where_the_metrics_change():
    checkpoints = list(range(0, 601, 10))
    chosen = animation_steps(checkpoints, _phase_change_history(100, 150), 20)
    assert chosen[0] == 0 and chosen[-1] == 600 and chosen == sorted(set(chosen)) and len(chosen) == 20
    assert set(chosen) <= set(checkpoints)
    during = [s for s in chosen if 100 <= s <= 150]
    assert len(during) >= 6  # all 6 checkpoints of the change; spread evenly it would get 2
    assert len([s for s in chosen if s > 200]) >= 3  # the plateau keeps a few frames
    # the same history over evenly spread positions when nothing changes: the steps, evenly
    flat = [{"step": s, "loss": 1.0, "accuracy": 0.5, "pattern": 0.5} for s in range(25, 601, 25)]
    even = animation_steps(checkpoints, flat, 7)
    assert even == [0, 100, 200, 300, 400, 500, 600]
    assert animation_steps([0, 50, 100], _phase_change_history(0, 50), 20) == [0, 50, 100]


def test_frames_are_filled_by_the_heatmaps(qapp, tmp_path):
    """Two layers of four heads: at the figure's suggested size 59% of a frame was blank, and 39%
    of its rows wholly blank (bands above and below the grid)."""
    run = train(
        TrainConfig(task="copy", steps=2, seq_len=8, embed_dim=16, heads=4, layers=2, checkpoint_every=1, batch_size=4)
    )
    frames = iio.imread(write_animation(run, tmp_path / "learning.gif"), index=None)[..., :3]
    assert len(frames) == 3 and frames.shape[1] % 16 == 0 and frames.shape[2] % 16 == 0
    for frame in frames:
        blank = (frame == frame[0, 0]).all(-1)
        assert blank.mean() < 0.42, blank.mean()
        assert blank.all(1).mean() < 0.12 and blank.all(0).mean() < 0.06, (blank.all(1).mean(), blank.all(0).mean())
        rows = np.flatnonzero(~blank.all(1))
        gaps = np.diff(rows) - 1
        assert gaps.max() <= BLANK_KEPT  # no band of blank rows left wider than what is kept
