"""Figures of a training run: the heatmaps of a trained model (the toy render's figures), the
learning curves (PNG/SVG, QPainter) and the heatmaps across checkpoints as a GIF or MP4
(imageio; its ffmpeg comes as a wheel)."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import imageio_ffmpeg
import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPen

from attndesk.attention.types import AttentionMap, head_name

from .chart import begin_chart, paint_series, paint_value_grid, paint_x_labels
from .export import ExportError, atomic_write, figure_bytes, write
from .figure import figure_from_map, suggested_size
from .layout import nice_ticks, tick_format
from .paint import paint_figure

if TYPE_CHECKING:
    from attndesk.train.run import TrainRun

ANIMATION_FORMATS = ("gif", "mp4")
CURVE_FORMATS = ("png", "svg")


def _probe_ids(run: TrainRun):
    return run.task.probe().ids


def layer_maps(run: TrainRun, ids=None) -> list[AttentionMap]:
    """One AttentionMap per layer: every head's causal attention on ``ids`` [1, L] (default:
    the task's fixed probe input), labelled with the task's token names."""
    ids = _probe_ids(run) if ids is None else ids
    weights = run.attention(ids)[0].numpy().astype(np.float32)  # [layers, H, L, L]
    labels = run.task.labels(ids[0])
    length = len(labels)
    mask = np.tril(np.ones((length, length), dtype=bool))
    cfg = run.cfg
    maps = []
    for layer in range(cfg.layers):
        shape = f"{cfg.layers} layer{'s' * (cfg.layers != 1)}, {cfg.heads} heads, d {cfg.embed_dim}, {cfg.position}"
        maps.append(
            AttentionMap(
                queries=labels,
                keys=labels,
                weights=weights[layer],
                mask=mask,
                title=f"{cfg.task}: layer {layer} after {run.step:,} steps",
                summary=f"trained {cfg.task} (seed {cfg.seed}, step {run.step:,}), layer {layer}: {shape}",
                file_tag=f"{cfg.task}_layer{layer}_step{run.step}",
                kv_heads=cfg.kv_heads,
                window=cfg.window,
            )
        )
    return maps


def all_heads_map(run: TrainRun, ids=None) -> AttentionMap:
    """Every head of every layer in one map (head labels "L0 H1"): one frame of the animation."""
    maps = layer_maps(run, ids)
    weights = np.concatenate([m.weights for m in maps])
    labels = [head_name(layer, h) for layer in range(run.cfg.layers) for h in range(run.cfg.heads)]
    first = maps[0]
    return AttentionMap(
        queries=first.queries,
        keys=first.keys,
        weights=weights,
        mask=first.mask,
        title=f"{run.cfg.task} after {run.step:,} steps",
        summary=f"trained {run.cfg.task}, step {run.step:,}: every layer's heads",
        file_tag=f"{run.cfg.task}_step{run.step}",
        head_labels=labels,
        window=run.cfg.window,
    )


def _format(path: Path, allowed: Sequence[str]) -> str:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in allowed:
        raise ExportError(f"{path.name}: the format is chosen by the suffix; use {', '.join('.' + f for f in allowed)}")
    return fmt


# the animation's frames: a share of them spread over the steps, the rest where the metrics change
TIME_SHARE = 0.3
BLANK_KEPT = 16  # pixels of a blank band between (or around) a frame's contents that stay


def animation_steps(steps: Sequence[int], history: list[dict[str, Any]], frames: int) -> list[int]:
    """At most ``frames`` of the checkpoint ``steps`` (the first and last included), placed where
    the run changes: each checkpoint's position is a blend of its step (``TIME_SHARE``) and the
    change so far of the loss, accuracy and pattern score (each over its range, summed as a path
    along the measured rows), and the chosen ones lie nearest to evenly spaced positions, so a
    phase change gets most frames and a plateau few."""
    steps = sorted(steps)
    if len(steps) <= frames:
        return steps
    rows = [r for r in history if r.get("accuracy") is not None]
    at = np.asarray([r["step"] for r in rows], dtype=float)
    change = np.zeros(len(rows))
    for key in ("loss", "accuracy", "pattern"):
        values = np.asarray([r.get(key, np.nan) for r in rows], dtype=float)
        if len(values) > 1 and np.isfinite(values).all() and np.ptp(values) > 0:
            change[1:] += np.abs(np.diff(values)) / np.ptp(values)
    path = np.cumsum(change)
    x = np.asarray(steps, dtype=float)
    position = TIME_SHARE * (x - x[0]) / max(x[-1] - x[0], 1.0)
    if len(rows) > 1 and path[-1] > 0:
        position += (1 - TIME_SHARE) * np.interp(x, at, path) / path[-1]
    else:
        position += (1 - TIME_SHARE) * (x - x[0]) / max(x[-1] - x[0], 1.0)
    chosen = {0, len(steps) - 1}
    for target in np.linspace(position[0], position[-1], frames)[1:-1]:
        order = np.argsort(np.abs(position - target), kind="stable")
        free = [int(i) for i in order if int(i) not in chosen]
        if free:
            chosen.add(free[0])
    return [steps[i] for i in sorted(chosen)]


def _blank_bands_cut(frames: list[np.ndarray], keep: int = BLANK_KEPT) -> list[np.ndarray]:
    """The frames with every band of rows or columns that is blank (the top-left pixel's colour)
    in all of them cut to ``keep`` pixels: the same cut for every frame, so they stay aligned."""
    stack = np.stack(frames)
    content = (stack != stack[0, 0, 0]).any(-1).any(0)  # [H, W]: some frame draws here

    def kept(used: np.ndarray) -> np.ndarray:
        keep_mask = used.copy()
        blank_runs = np.flatnonzero(np.diff(np.concatenate([[1], used.astype(int), [1]])))
        for start, end in zip(blank_runs[::2], blank_runs[1::2]):
            keep_mask[start : start + min(keep, end - start)] = True
        return keep_mask

    return [frame[kept(content.any(1))][:, kept(content.any(0))] for frame in frames]


def write_animation(
    run: TrainRun,
    path: str | os.PathLike,
    *,
    fps: float = 3.0,
    size: tuple[int, int] | None = None,
    max_frames: int = 20,
) -> Path:
    """The heatmaps of the kept checkpoints (all heads, all layers, on the probe input), one
    frame each (at most ``max_frames``, chosen by ``animation_steps``: most where the metrics
    change), as a GIF or an MP4 (by the suffix), written atomically. Without ``size`` the frames
    are drawn at the figure's suggested size and cut to their contents (``_blank_bands_cut``)."""
    import imageio.v3 as iio

    path = Path(path).expanduser()
    fmt = _format(path, ANIMATION_FORMATS)
    steps = run.checkpoints.steps
    if not steps:
        raise ExportError("the run kept no checkpoints: there is nothing to animate")
    frames = []
    for step in animation_steps(steps, run.history, max_frames):
        figure = figure_from_map(all_heads_map(run.at_checkpoint(step)))
        figure.suptitle = f"{run.cfg.task}: step {step:,}"
        if run.cfg.layers > 1 and figure.group == 1:  # a layer's heads side by side, a row per layer
            figure.group = run.cfg.heads
            figure.group_labels = [f"layer {layer}" for layer in range(run.cfg.layers)]
        width, height = size or suggested_size(figure)
        frames.append(iio.imread(io.BytesIO(figure_bytes(figure, "png", (width, height))))[..., :3])
    if size is None:  # a size the caller gave is kept as it is
        frames = _blank_bands_cut(frames)
    height, width = frames[0].shape[:2]
    filled = []
    for frame in frames:  # MP4's macro blocks: blank rows and columns added to a multiple of 16
        out = np.empty((height + -height % 16, width + -width % 16, 3), dtype=frame.dtype)
        out[...] = frame[0, 0]
        out[:height, :width] = frame
        filled.append(out)
    frames = filled
    if fmt == "gif":
        data = iio.imwrite("<bytes>", np.stack(frames), extension=".gif", duration=1000 / fps, loop=0)
    else:
        data = _mp4_bytes(frames, fps)
    return atomic_write(path, data)


def _mp4_bytes(frames: list[np.ndarray], fps: float) -> bytes:
    """H.264 MP4 through imageio-ffmpeg's bundled ffmpeg (it writes to a file, so a temporary one)."""

    with tempfile.TemporaryDirectory(prefix="attndesk-mp4-") as folder:
        target = os.path.join(folder, "out.mp4")
        height, width = frames[0].shape[:2]
        writer = imageio_ffmpeg.write_frames(
            target,
            (width, height),
            fps=fps,
            codec="libx264",
            pix_fmt_out="yuv420p",
            macro_block_size=16,
            ffmpeg_log_level="error",
        )
        writer.send(None)
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
        writer.close()
        return Path(target).read_bytes()


def _series(history: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [(r["step"], r[key]) for r in history if r.get(key) is not None and np.isfinite(r[key])]
    if not rows:
        return np.zeros(0), np.zeros(0)
    steps, values = zip(*rows)
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def write_curves(run: TrainRun, path: str | os.PathLike, *, size: tuple[int, int] = (1200, 800)) -> Path:
    """The loss (top) and the accuracy and pattern score (bottom) against the step, PNG or SVG."""
    path = Path(path).expanduser()
    _format(path, CURVE_FORMATS)
    history = run.history
    if not history:
        raise ExportError("the run has no history yet: train at least one step")
    title = f"{run.cfg.task} (seed {run.cfg.seed}): {run.step:,} steps, pattern = {run.task.pattern} score"
    panels = [
        ("loss", [("loss", "#1f77b4")]),
        ("accuracy / pattern", [("accuracy", "#2ca02c"), ("pattern", "#d62728")]),
    ]

    def paint(painter, rect) -> None:
        _paint_curves(
            painter,
            rect,
            title,
            [(label, [(key, colour, *_series(history, key)) for key, colour in lines]) for label, lines in panels],
        )

    return write(paint, path, size=size, title=title)


def _paint_curves(painter, rect, title: str, panels) -> None:
    line = begin_chart(painter, rect, title)
    top = rect.top() + line * 1.5
    height = (rect.bottom() - top) / len(panels)
    x_max = max((float(s[-1]) for _, lines in panels for _, _, s, _ in lines if len(s)), default=1.0)
    for i, (label, lines) in enumerate(panels):
        area = QRectF(rect.left() + line * 4, top + i * height + line, rect.width() - line * 5, height - line * 3.5)
        _paint_panel(painter, area, label, lines, x_max, line)


def _paint_panel(painter, area, label: str, lines, x_max: float, line: float) -> None:
    values = [v for _, _, _, vs in lines for v in vs]
    lo, hi = (0.0, 1.0) if label != "loss" else (0.0, max(values, default=1.0) or 1.0)
    ticks = nice_ticks(lo, hi, 5)
    hi = max(hi, ticks[-1])
    fmt = tick_format(ticks)

    def at(x: float, y: float) -> QPointF:
        return QPointF(
            area.left() + area.width() * x / max(x_max, 1.0), area.bottom() - area.height() * (y - lo) / (hi - lo)
        )

    paint_value_grid(painter, area, at, ticks, fmt, (0.0, x_max), line)
    paint_x_labels(painter, area, at, nice_ticks(0, x_max, 6), lambda t: f"{t:,.0f}", line)
    painter.setPen(QPen(QColor("black"), 1))
    painter.drawRect(area)
    legend = []
    for key, colour, steps, vs in lines:
        if len(steps):
            points = [at(x, y) for x, y in zip(steps, vs)]
            paint_series(painter, points, colour, marks=len(points) <= 60)  # evaluation steps: each marked
        legend.append((key, colour))
    right = area.right()
    for key, colour in reversed(legend):  # above the panel's top right, outside the curves
        painter.setPen(QColor(colour))
        width = line * (0.6 * len(key) + 1)
        painter.drawText(QRectF(right - width, area.top() - line * 1.05, width, line), Qt.AlignmentFlag.AlignRight, key)
        right -= width + line * 0.5
    painter.setPen(QColor("black"))
    painter.drawText(
        QRectF(area.left(), area.bottom() + line * 1.1, area.width(), line), Qt.AlignmentFlag.AlignCenter, "step"
    )


def write_final_figures(run: TrainRun, out_path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Each layer's all-heads figure of ``run`` on the probe input, as the toy render draws them:
    ``out_path(name)`` gives where each file goes."""
    written = []
    for amap in layer_maps(run):
        figure = figure_from_map(amap)
        for fmt in formats:
            written.append(
                write(
                    partial(_paint, figure=figure),
                    out_path(f"attn_{amap.file_tag}.{fmt}"),
                    size=suggested_size(figure),
                    title=figure.suptitle,
                )
            )
    return written


def _paint(painter, rect, figure) -> None:
    paint_figure(painter, rect, figure)
