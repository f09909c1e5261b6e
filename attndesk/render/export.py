"""Writing figures (PNG/SVG/PDF) and raw weights (NPY/CSV) to disk, atomically.

Every file is produced in memory first, written to a temporary file in the target folder and
moved into place with os.replace, so a failure never leaves a partial file behind; a set of
files (``OutputSet``) is written all-or-nothing. Problems the
user can fix (missing folder, no permission, unknown format, silly size) raise ExportError with
a readable reason.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF, QRect, QRectF, QSize, QSizeF
from PySide6.QtGui import QImage, QImageWriter, QPageLayout, QPageSize, QPainter, QPdfWriter

from attndesk.attention.types import AttentionMap
from attndesk.files import atomic
from attndesk.runs.select import parse_which
from attndesk.system import free_memory
from attndesk.system.free_memory import format_bytes

from .figure import HeatmapFigure, suggested_size
from .gui import ensure_gui_app
from .paint import paint_figure

FIGURE_FORMATS = ("png", "svg", "pdf")
WEIGHT_FORMATS = ("npy", "csv")
MAX_SIDE = 16384
MAX_PIXELS = 64 * 2**20


class ExportError(Exception):
    """An export could not be written; ``str(err)`` says why in one line."""


# ---------------------------------------------------------------------------------------------
# atomic writes


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _check_target(path: Path) -> Path:
    path = Path(path).expanduser()
    folder = path.parent
    try:  # pathlib passes some errors through (a name too long: ENAMETOOLONG)
        if not folder.exists():
            raise ExportError(f"cannot write {path}: the folder {folder} does not exist")
        if not folder.is_dir():
            raise ExportError(f"cannot write {path}: {folder} is not a folder")
        if path.is_dir():
            raise ExportError(f"cannot write {path}: a folder of that name exists")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {_reason(exc)}") from None
    return path


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None]) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and os.replace.

    ``data`` is the bytes, or a function that writes them to the open file (so a large array
    streams to disk without a second copy in memory)."""
    path = _check_target(Path(path))
    try:
        return atomic.atomic_write(path, data)
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {_reason(exc)}") from None


class OutputSet(atomic.StagedFolder):
    """Several exports written all-or-nothing into the folder ``target`` (created if missing):
    write each file to ``out.path(name)`` inside ``with OutputSet(folder) as out:``; when the block
    ends normally they all move into place (``out.committed``), after an exception (an export
    error, Ctrl+C) none does and the folder is left as it was. OSError becomes ExportError."""

    def __enter__(self) -> OutputSet:
        try:
            super().__enter__()
        except OSError as exc:
            raise ExportError(_folder_problem(self.target, exc)) from None
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            super().__exit__(kind, exc, tb)
        except OSError as err:
            raise ExportError(_folder_problem(self.target, err)) from None


def _folder_problem(folder: Path, exc: OSError) -> str:
    if isinstance(exc, NotADirectoryError) and folder.is_file():
        return f"{folder} is a file, not a folder: give a folder to write the files into"
    where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != folder else ""
    return f"cannot write into the folder {folder}{where}: {_reason(exc)}"


# ---------------------------------------------------------------------------------------------
# figures


def _format_of(path: Path, allowed: Sequence[str]) -> str:
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in allowed:
        shown = f"'.{suffix}'" if suffix else "no extension"
        raise ExportError(f"cannot write {path}: unknown format {shown}; use " + ", ".join(f".{a}" for a in allowed))
    return suffix


def check_size(size: Any, dpi: Any) -> tuple[int, int, float]:
    """(width, height, dpi) validated; ExportError naming the allowed range otherwise."""
    try:
        width, height = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ExportError(f"size must be (width, height) in pixels, got {size!r}") from None
    if not (16 <= width <= MAX_SIDE and 16 <= height <= MAX_SIDE) or width * height > MAX_PIXELS:
        raise ExportError(
            f"size {width}x{height} is out of range: each side 16..{MAX_SIDE} px, at most {MAX_PIXELS // 2**20} Mpx"
        )
    try:
        dpi = float(dpi)
    except (TypeError, ValueError):
        raise ExportError(f"dpi must be a number, got {dpi!r}") from None
    if not 10 <= dpi <= 2400:
        raise ExportError(f"dpi {dpi:g} is out of range 10..2400")
    return width, height, dpi


def check_image_memory(width: int, height: int) -> None:
    """A PNG is painted into a width x height RGB32 image and encoded in memory (up to about as
    large again): ExportError when that cannot fit in free memory, with the size that does."""
    need = width * height * 4 * 2
    free = free_memory.available_memory()
    if free is None or need <= free:
        return
    shrink = math.sqrt(free / need)
    fit_w, fit_h = max(16, int(width * shrink)), max(16, int(height * shrink))
    raise ExportError(
        f"a {width}x{height} PNG needs {format_bytes(need)} to paint and encode, more than the "
        f"{format_bytes(free)} of free memory; at most about {fit_w}x{fit_h} fits (or export SVG/PDF)"
    )


PaintFn = Callable[[Any, Any], Any]  # paint(painter: QPainter, rect: QRectF), on any device


def _png_bytes(paint: PaintFn, width: int, height: int, dpi: float, title: str) -> bytes:
    image = QImage(width, height, QImage.Format.Format_RGB32)
    dots_per_meter = round(dpi / 0.0254)
    image.setDotsPerMeterX(dots_per_meter)  # becomes the PNG pHYs chunk
    image.setDotsPerMeterY(dots_per_meter)
    image.fill(0xFFFFFFFF)
    painter = QPainter(image)
    try:
        paint(painter, QRectF(0, 0, width, height))
    finally:
        painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QImageWriter(buffer, b"png")
    if not writer.write(image):
        raise ExportError(f"PNG encoding failed: {writer.errorString()}")
    buffer.close()
    return bytes(data.data())


def _svg_bytes(paint: PaintFn, width: int, height: int, dpi: float, title: str) -> bytes:
    from PySide6.QtSvg import QSvgGenerator

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    generator = QSvgGenerator()
    generator.setOutputDevice(buffer)
    generator.setSize(QSize(width, height))
    generator.setViewBox(QRect(0, 0, width, height))
    generator.setResolution(round(dpi))
    generator.setTitle(title)
    generator.setDescription("made with attndesk")
    painter = QPainter(generator)
    try:
        paint(painter, QRectF(0, 0, width, height))
    finally:
        painter.end()
    buffer.close()
    return bytes(data.data())


def _pdf_bytes(paint: PaintFn, width: int, height: int, dpi: float, title: str) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setResolution(round(dpi))
    # the page is exactly width x height pixels at dpi: w/dpi inches = 72*w/dpi points
    page = QPageSize(
        QSizeF(width * 72.0 / dpi, height * 72.0 / dpi),
        QPageSize.Unit.Point,
        "attndesk",
        QPageSize.SizeMatchPolicy.ExactMatch,
    )
    writer.setPageLayout(QPageLayout(page, QPageLayout.Orientation.Portrait, QMarginsF(0, 0, 0, 0)))
    writer.setTitle(title)
    writer.setCreator("attndesk")
    painter = QPainter(writer)
    try:
        if not painter.isActive():
            raise ExportError("the PDF writer could not start")
        device = painter.device()
        paint(painter, QRectF(0, 0, device.width(), device.height()))
    finally:
        painter.end()
    buffer.close()
    return bytes(data.data())


_RENDERERS = {"png": _png_bytes, "svg": _svg_bytes, "pdf": _pdf_bytes}


def render_bytes(paint: PaintFn, fmt: str, size: tuple[int, int], dpi: float = 96, title: str = "") -> bytes:
    """The file contents of ``paint`` drawn as ``fmt`` ("png", "svg", "pdf") at ``size`` px and ``dpi``."""
    if fmt not in _RENDERERS:
        raise ExportError(f"unknown figure format {fmt!r}; use " + ", ".join(FIGURE_FORMATS))
    width, height, dpi = check_size(size, dpi)
    ensure_gui_app()
    return _RENDERERS[fmt](paint, width, height, dpi, title or "attention heatmaps")


def write(paint: PaintFn, path: str | os.PathLike, *, size: tuple[int, int], dpi: float = 96, title: str = "") -> Path:
    """Draw ``paint(painter, rect)`` into ``path`` as PNG, SVG or PDF (by its suffix), atomically.

    A PNG has exactly ``size`` pixels and ``dpi`` in its metadata; SVG and PDF have that size at
    ``dpi``, with text kept as text. ExportError with a one-line reason otherwise."""
    path = Path(path).expanduser()
    fmt = _format_of(path, FIGURE_FORMATS)
    width, height, dpi = check_size(size, dpi)
    _check_target(path)  # fail before painting when the folder is missing
    if fmt == "png":
        check_image_memory(width, height)
    return atomic_write(path, render_bytes(paint, fmt, (width, height), dpi, title))


def export_figure(
    figure: HeatmapFigure, path: str | os.PathLike, *, size: tuple[int, int] | None = None, dpi: float = 96
) -> Path:
    """Write ``figure`` to ``path`` as PNG, SVG or PDF (chosen by the suffix); return the path.

    ``size`` is (width, height) in pixels (default: suggested_size(figure)).
    """
    return write(
        _figure_painter(figure),
        path,
        size=size if size is not None else suggested_size(figure),
        dpi=dpi,
        title=figure.suptitle,
    )


def figure_bytes(figure: HeatmapFigure, fmt: str, size: tuple[int, int], dpi: float = 96) -> bytes:
    """A figure's file contents without writing them (tests, previews)."""
    return render_bytes(_figure_painter(figure), fmt, size, dpi, figure.suptitle)


def _figure_painter(figure: HeatmapFigure) -> PaintFn:
    return lambda painter, rect: paint_figure(painter, rect, figure)


# ---------------------------------------------------------------------------------------------
# raw numbers


CSV_CHUNK_CELLS = 2**18  # cells formatted at once: ~32 MiB of text buffers, whatever the matrix


def _check_csv(matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str]) -> None:
    if matrix.ndim != 2:
        raise ExportError(
            f"a CSV holds one [L, Lk] matrix, got shape {matrix.shape}; choose a head or the mean, or use .npy"
        )
    if len(query_labels) != matrix.shape[0] or len(key_labels) != matrix.shape[1]:
        raise ExportError(
            f"{len(query_labels)} query and {len(key_labels)} key labels do not fit a {matrix.shape[0]}x{matrix.shape[1]} matrix"
        )


def _csv_chunks(matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str]) -> Iterator[str]:
    """The CSV text in pieces of about CSV_CHUNK_CELLS cells, so that a large matrix is never
    formatted whole (numpy's text array takes ~128 bytes a cell)."""
    if not np.issubdtype(matrix.dtype, np.floating):
        matrix = matrix.astype(np.float64)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(["query \\ key", *map(str, key_labels)])
    rows = max(1, CSV_CHUNK_CELLS // max(1, matrix.shape[1]))
    for start in range(0, matrix.shape[0], rows):
        text = matrix[start : start + rows].astype(str)  # shortest round-trip repr per element, done in C
        for label, row in zip(query_labels[start : start + rows], text):
            writer.writerow([str(label), *row.tolist()])
        yield out.getvalue()
        out.seek(0)
        out.truncate()
    yield out.getvalue()


def weights_csv_text(matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str]) -> str:
    """CSV: a header row of key labels, then one row per query (label, then the weights).

    Values are written with the shortest text that reads back to the same float32/float64
    (numpy's repr algorithm), so parsing the CSV returns the exact numbers.
    """
    matrix = np.asarray(matrix)
    _check_csv(matrix, query_labels, key_labels)
    return "".join(_csv_chunks(matrix, query_labels, key_labels))


def export_weights(
    matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], path: str | os.PathLike
) -> Path:
    """Write raw weights: ``.npy`` (any shape, exact) or ``.csv`` (one [L, Lk] matrix with labels,
    streamed to the file a block of rows at a time)."""
    path = Path(path).expanduser()
    fmt = _format_of(path, WEIGHT_FORMATS)
    _check_target(path)
    matrix = np.asarray(matrix)
    if fmt == "npy":
        return atomic_write(path, lambda fh: np.save(fh, matrix, allow_pickle=False))
    _check_csv(matrix, query_labels, key_labels)

    def write(fh: BinaryIO) -> None:
        for chunk in _csv_chunks(matrix, list(query_labels), list(key_labels)):
            fh.write(chunk.encode("utf-8"))

    return atomic_write(path, write)


def default_filename(map: AttentionMap, which: Any, ext: str) -> str:
    """A file name that says what is in the file, e.g. attn_head3_h8_e64_causal_scaled_seed0.png."""
    which = parse_which(which, map.num_heads)
    tag = which if isinstance(which, str) else f"head{which}"
    return "_".join(p for p in ("attn", tag, map.file_tag) if p) + "." + ext.lstrip(".").lower()
