"""Vision transformers on an image: every layer's attention computed by attndesk's ``attend``.

``run_pretrained(model, image)`` lands here for a vision checkpoint (ViT, DeiT, DINOv2 with or
without registers, CLIP's and SigLIP's vision towers, Swin). The image (a path, a PIL image or an
HxWx3 uint8 array) goes through the checkpoint's own image processor; the tokens are the special
tokens first ("[CLS]", DeiT's "[DIST]", DINOv2's "[REG0]"...) then the patches "(r,c)" row by row.

Swin attends inside windows: each layer's weights as transformers computes them are
``window_weights[layer]`` [windows, H, w*w, w*w] (a shifted layer's windows over the cyclically
shifted grid), ``partitions[layer]`` [windows, w*w] says which patch of the layer's grid each
window position is (-1: padding), and ``dense_layer(layer)`` scatters them onto the grid as
[H, N, N] (zero between patches of different windows; the padding's share of a row is dropped).
``weights`` holds the first stage's layers that way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.runs.config import default_memory_budget
from attndesk.system.free_memory import format_bytes

from .backend import Capture, Site, capturing
from .loader import LoadedModel
from .result import PretrainedResult, peak_estimate

if TYPE_CHECKING:
    from PIL import Image as PILImage

MAX_SIDE = 16_384  # pixels: a longer side is refused before it is decoded
MAX_ASPECT = 64  # longer side / shorter side: a shortest-edge resize would blow it up to gigabytes
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")

SPECIAL_ROLES = {"[CLS]": "class token", "[DIST]": "distillation token"}  # registers: "[REG0]"...

ImageInput = Any  # str | Path | PIL.Image.Image | np.ndarray (PIL is imported only when used)


def is_image_input(value: object) -> bool:
    """Whether ``value`` is meant as an image: a Path, an array, a PIL image, or a one-line string
    with an image suffix or naming an existing file (any other string is text)."""
    if isinstance(value, (Path, np.ndarray)):
        return True
    if isinstance(value, str):
        if "\n" in value or len(value) > 4096:
            return False
        path = Path(value.strip()).expanduser()
        try:
            return path.suffix.lower() in IMAGE_SUFFIXES or path.is_file()
        except (OSError, ValueError):  # a name too long for the file system, a NUL
            return False
    return type(value).__module__.startswith("PIL.")


def vision_only(model: LoadedModel) -> ConfigError:
    """The refusal of text handed to a vision model."""
    return ConfigError(
        f"{model.name} is a vision model ({model.spec.family_name}): give it an image "
        "(a path, a PIL image or an HxWx3 uint8 array), not text"
    )


def check_image_size(width: int, height: int, what: str = "the image") -> None:
    if min(width, height) < 1:
        raise ConfigError(f"{what} is {width:,} x {height:,} pixels: it has no pixels")
    if max(width, height) > MAX_SIDE:
        raise ConfigError(
            f"{what} is {width:,} x {height:,} pixels: a side may be at most {MAX_SIDE:,} pixels; resize it first"
        )
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise ConfigError(
            f"{what} is {width:,} x {height:,} pixels: one side is over {MAX_ASPECT} times the other; crop it first"
        )


def read_image(image: ImageInput) -> PILImage.Image:
    """An RGB PIL image from a path, a PIL image or an HxWx3 uint8 array; ConfigError (one line)
    for anything else, a file that does not decode, or a size outside ``check_image_size``."""

    if isinstance(image, (str, Path)):
        path = Path(image).expanduser()
        if not path.is_file():
            raise ConfigError(f"image {path} does not exist")
        try:
            with Image.open(path) as opened:
                check_image_size(*opened.size, what=path.name)
                return opened.convert("RGB")
        except ConfigError:
            raise
        except Exception as exc:  # PIL raises OSError, SyntaxError, DecompressionBombError, ...
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"{path.name} cannot be read as an image: {reason}") from None
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ConfigError(f"an image array must be HxWx3 uint8 (RGB), got shape {image.shape} of {image.dtype}")
        check_image_size(image.shape[1], image.shape[0])
        return Image.fromarray(np.ascontiguousarray(image))
    if isinstance(image, Image.Image):
        check_image_size(*image.size)
        return image.convert("RGB")
    raise ConfigError(f"an image is a path, a PIL image or an HxWx3 uint8 array, not {type(image).__name__}")


@dataclass
class VisionResult(PretrainedResult):
    """A vision run (see the module docstring): ``weights`` [layers, H, N, N] over ``tokens``
    (special tokens, then the patches of ``grid`` = (rows, cols), row by row); ``image`` [h, w, 3]
    uint8 is what the model saw (the processor's output, de-normalised); ``logits`` [classes] with
    ``labels`` for a classifier, else None; ``pooled`` the tower's pooled output. Swin adds
    ``window_weights``, ``partitions`` and ``layer_grids`` per layer."""

    grid: tuple[int, int] = (0, 0)
    patch_size: int = 0
    specials: int = 0  # tokens before the patches
    image: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 3), dtype=np.uint8))
    logits: np.ndarray | None = None
    labels: list[str] | None = None
    pooled: np.ndarray | None = None
    window_weights: list[np.ndarray] | None = None
    partitions: list[np.ndarray] | None = None
    layer_grids: list[tuple[int, int]] | None = None
    window_sizes: list[int] | None = None
    shifts: list[int] | None = None

    def patch_map(self, values: np.ndarray) -> np.ndarray:
        """[..., N] over all tokens (or [..., patches]) -> [..., rows, cols] over the patch grid."""
        values = np.asarray(values)
        if values.shape[-1] == self.length:
            values = values[..., self.specials :]
        return values.reshape(*values.shape[:-1], *self.grid)

    def token_labels(self) -> list[str]:
        """What each token is (the tokens have no vocabulary ids): the special tokens by role ("class
        token", "distillation token", "register 0"), each patch by its place ("row 2, col 3")."""
        roles = []
        for name in self.tokens[: self.specials]:
            if name.startswith("[REG") and name[4:-1].isdigit():
                roles.append(f"register {name[4:-1]}")
            else:
                roles.append(SPECIAL_ROLES.get(name, name))
        rows, cols = self.grid
        return roles + [f"row {r}, col {c}" for r in range(rows) for c in range(cols)]

    def query_maps(self, layer: int, query: int = 0) -> np.ndarray:
        """[H, rows, cols]: where token ``query`` looks at in ``layer``, per head, on the grid."""
        return self.patch_map(self.layer_weights(layer)[:, int(query), :])

    def window_map(self, layer: int) -> np.ndarray:
        """Swin: [rows, cols] int, the window each patch of ``layer``'s grid attends in."""
        if self.partitions is None or self.layer_grids is None:
            raise ValueError(f"{self.model_name} attends globally: it has no windows")
        rows, cols = self.layer_grids[layer]
        out = np.full(rows * cols, -1, dtype=np.int64)
        part = self.partitions[layer]
        for window, positions in enumerate(part):
            out[positions[positions >= 0]] = window
        return out.reshape(rows, cols)

    def dense_layer(self, layer: int) -> np.ndarray:
        """Swin: layer ``layer``'s window weights scattered onto its grid, [H, N, N] float32."""
        if self.window_weights is None or self.partitions is None or self.layer_grids is None:
            return self.layer_weights(layer)
        return scatter_windows(self.window_weights[layer], self.partitions[layer], math.prod(self.layer_grids[layer]))


def scatter_windows(window_weights: np.ndarray, partition: np.ndarray, tokens: int) -> np.ndarray:
    """[windows, H, w2, w2] per-window weights -> [H, tokens, tokens] over the grid (padding dropped)."""
    heads = window_weights.shape[1]
    dense = np.zeros((heads, tokens, tokens), dtype=np.float32)
    for window, positions in enumerate(partition):
        keep = np.flatnonzero(positions >= 0)
        at = positions[keep]
        dense[:, at[:, None], at[None, :]] = window_weights[window][:, keep[:, None], keep[None, :]]
    return dense


def swin_partition(rows: int, cols: int, window: int, shift: int) -> np.ndarray:
    """[windows, window*window] grid positions (r * cols + c, -1 for padding) of each window's
    tokens, as Swin forms them: pad the grid to multiples of ``window``, roll it by ``-shift`` on
    both axes, cut it into windows row by row."""
    padded_rows, padded_cols = -(-rows // window) * window, -(-cols // window) * window
    i = np.arange(padded_rows)[:, None]
    j = np.arange(padded_cols)[None, :]
    r, c = (i + shift) % padded_rows, (j + shift) % padded_cols
    flat = np.where((r < rows) & (c < cols), r * cols + c, -1)  # [padded_rows, padded_cols]
    blocks = flat.reshape(padded_rows // window, window, padded_cols // window, window).transpose(0, 2, 1, 3)
    return blocks.reshape(-1, window * window)


@dataclass
class VisionCapture(Capture):
    """Keeps every layer's whole batch of weights (Swin: all windows); with ``keep_tensors`` the
    torch tensors themselves, their gradients retained (the gradient-weighted maps)."""

    keep_tensors: bool = False
    per_layer: dict[int, Any] = field(default_factory=dict)

    def record(self, site: Site, weights: torch.Tensor, mask, window, d: int) -> None:
        heads, lq, lk = weights.shape[1:]
        self.flops += 4 * int(weights.shape[0]) * heads * lq * lk * d
        if self.keep_tensors:
            if weights.requires_grad:
                weights.retain_grad()
            self.per_layer[site.layer] = weights
        else:
            self.per_layer[site.layer] = weights.detach().float().cpu().numpy()


def special_tokens(model: LoadedModel) -> list[str]:
    """The tokens before the patches: "[CLS]", "[DIST]", "[REG0]"... as the family has them."""
    info = model.vision
    assert info is not None, "a vision model"
    names = ["[CLS]"] if info.class_token else []
    if info.distillation:
        names.append("[DIST]")
    if info.registers:
        names += [f"[REG{i}]" for i in range(int(getattr(model.model.config, info.registers, 0) or 0))]
    return names


def pixel_values(model: LoadedModel, image: PILImage.Image) -> torch.Tensor:
    """The image processor's [1, C, H, W] float32 for ``image``."""
    try:
        out = model.processor(images=image, return_tensors="pt")
    except Exception as exc:  # the processors raise ValueError and their own kinds
        text = str(exc).strip()
        raise ConfigError(
            f"{model.name}'s image processor refused the image: {text.splitlines()[0] if text else exc!r}"
        ) from None
    return out["pixel_values"].to(model.device, torch.float32)


def seen_image(model: LoadedModel, pixels: torch.Tensor) -> np.ndarray:
    """[H, W, 3] uint8: the processor's output with its normalisation undone (what the model saw)."""
    x = pixels[0].detach().float().cpu().numpy()  # [C, H, W]
    mean = getattr(model.processor, "image_mean", None)
    std = getattr(model.processor, "image_std", None)
    if getattr(model.processor, "do_normalize", True) and mean is not None and std is not None:
        x = x * np.asarray(std, np.float32)[:, None, None] + np.asarray(mean, np.float32)[:, None, None]
    if getattr(model.processor, "do_rescale", True):
        x = x / float(getattr(model.processor, "rescale_factor", 1 / 255) * 255)
    else:
        x = x / 255.0
    return (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8).transpose(1, 2, 0)


def _config_size(model: LoadedModel) -> tuple[int, int]:
    size = getattr(model.model.config, "image_size", 224)
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def forward(model: LoadedModel, pixels: torch.Tensor, **extra):
    """One forward pass of the vision model on ``pixels`` (interpolated positions where the size
    differs from the configured one)."""
    info = model.vision
    assert info is not None, "a vision model"
    kwargs: dict = {"pixel_values": pixels, **extra}
    if info.interpolate and tuple(pixels.shape[-2:]) != _config_size(model):
        kwargs["interpolate_pos_encoding"] = True
    return model.model(**kwargs)


def patch_size(model: LoadedModel) -> int:
    size = getattr(model.model.config, "patch_size", 16)
    return int(size if isinstance(size, int) else size[0])


def _grid(model: LoadedModel, pixels: torch.Tensor) -> tuple[int, int]:
    height, width = (int(n) for n in pixels.shape[-2:])
    p = patch_size(model)
    if model.vision is not None and model.vision.windows:  # Swin pads to whole patches
        return -(-height // p), -(-width // p)
    return height // p, width // p


def outputs(out) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(logits [classes] of a classifier or None, the pooled output [E] or None)."""
    logits = getattr(out, "logits", None)
    pooled = getattr(out, "pooler_output", None)
    if pooled is None:
        pooled = getattr(out, "image_embeds", None)
    as_np = lambda t: None if t is None else t[0].detach().float().cpu().numpy()  # noqa: E731
    return as_np(logits), as_np(pooled)


def pooled_length(out) -> torch.Tensor:
    """[B]: the length of each image's pooled output (or of its mean last hidden state): what a
    gradient map of a bare tower (no classes) explains."""
    pooled = getattr(out, "pooler_output", None)
    if pooled is None:
        pooled = out.last_hidden_state.mean(dim=1)
    return pooled.norm(dim=-1)


def _class_labels(model: LoadedModel, logits) -> list[str] | None:
    """The classifier's label of each logit (``LABEL_i`` where the config names none); None without logits."""
    if logits is None:
        return None
    id2label = getattr(model.model.config, "id2label", None) or {}
    return [str(id2label.get(i, f"LABEL_{i}")) for i in range(len(logits))]


def _layers_weights(
    model: LoadedModel, layers: list, out, grid: tuple[int, int], specials: int
) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """(weights [layers, H, N, N], hidden states or None, what a windowed model adds) from the
    captured layers; ConfigError when the tokens are not ``specials`` plus the patch grid."""
    rows, cols = grid
    assert model.vision is not None, "a vision model"
    if model.vision.windows:
        extra = _swin_layers(model, layers, grid)
        weights = np.stack([scatter_windows(layers[n], extra["partitions"][n], rows * cols) for n in extra["first"]])
        del extra["first"]
        return weights, None, extra
    weights = np.concatenate(layers, axis=0)  # each [1, H, N, N]
    tokens = specials + rows * cols
    if weights.shape[-1] != tokens:
        raise ConfigError(
            f"{model.name} attended over {weights.shape[-1]} tokens where {specials} special tokens and "
            f"a {rows} x {cols} patch grid make {tokens}: its token layout is not the one attndesk knows"
        )
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().cpu().numpy()
    return weights, hidden, {}


def run_image(
    model: LoadedModel, image: ImageInput, *, memory_budget: int | None = None, ctx: JobContext | None = None
) -> VisionResult:
    """Every layer's attention of vision model ``model`` on ``image`` (see the module docstring)."""
    ctx = job_context(ctx)
    info = model.vision
    if info is None:
        raise ConfigError(f"{model.name} is a text model: it reads text, not an image")
    start = time.perf_counter()
    pil = read_image(image)
    ctx.progress(0.1, "preparing the image")
    pixels = pixel_values(model, pil)
    rows, cols = _grid(model, pixels)
    specials = special_tokens(model)
    tokens = len(specials) + rows * cols
    _check_budget(model, tokens, memory_budget)
    ctx.check()
    capture = VisionCapture(sites=model.sites, layers=model.layers)
    with model._lock, torch.inference_mode(), capturing(capture):
        out = forward(model, pixels, output_hidden_states=not info.windows)
    ctx.progress(0.9, "collecting the weights")
    logits, pooled = outputs(out)
    layers = [capture.per_layer[n] for n in range(model.num_layers)]
    labels = _class_labels(model, logits)
    weights, hidden, extra = _layers_weights(model, layers, out, (rows, cols), len(specials))
    names = specials + [f"({r},{c})" for r in range(rows) for c in range(cols)]
    n = len(names)
    embedding = None if pooled is None else (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)
    result = VisionResult(
        model_name=model.name,
        tokens=names,
        token_ids=np.full(n, -1, dtype=np.int64),
        special=np.arange(n) < len(specials),
        weights=weights.astype(np.float32, copy=False),
        hidden_states=hidden,
        embedding=embedding,
        timings={"total": time.perf_counter() - start},
        device=str(model.device),
        family="vision",
        model_type=model.spec.model_type,
        kv_heads=model.kv_heads,
        hidden_size=model.spec.hidden_size,
        flops=capture.flops,
        grid=(rows, cols),
        patch_size=patch_size(model),
        specials=len(specials),
        image=seen_image(model, pixels),
        logits=logits,
        labels=labels,
        pooled=pooled,
        **extra,
    )
    result.peak_bytes = vision_peak(result, model.spec.hidden_size)
    return result


def _check_budget(model: LoadedModel, tokens: int, memory_budget: int | None) -> None:
    """Refuse, naming the sizes, a run whose kept attention weights exceed the memory budget."""
    budget = default_memory_budget() if memory_budget is None else int(memory_budget)
    windows = model.vision is not None and model.vision.windows
    layers_kept = int(model.model.config.depths[0]) if windows else model.num_layers  # Swin: the dense first stage
    need = 4 * layers_kept * model.num_heads * tokens * tokens
    if need > budget:
        raise ConfigError(
            f"{layers_kept} layers x {model.num_heads} heads x {tokens:,}\u00b2 tokens of attention weights take "
            f"{format_bytes(need)}, over the memory budget of {format_bytes(budget)}: "
            "use a smaller image size or raise the budget"
        )


def vision_peak(result: VisionResult, hidden_size: int) -> int:
    """The run's peak memory, estimated as a text run's (``peak_estimate``): what it hands back, plus
    one layer's temporaries (a Swin layer's scores are its windows', [windows, H, w*w, w*w])."""
    windows = result.window_weights or []
    kept = [result.weights, result.hidden_states, result.image, result.logits, result.pooled, *windows]
    scores = max((w.size for w in windows), default=result.num_heads * result.length**2)
    return peak_estimate(kept, scores, result.length * hidden_size)


def _swin_layers(model: LoadedModel, layers: list[np.ndarray], grid: tuple[int, int]) -> dict:
    """Per layer: its grid (the stage's: halved by each patch merging, padded to even), and the
    window size and shift the layer used (Swin clamps both on a grid no larger than a window)."""
    blocks = [m for m in model.model.modules() if hasattr(m, "shift_size") and hasattr(m, "attention")]
    rows, cols = grid
    grids: list[tuple[int, int]] = []
    sizes: list[int] = []
    shifts: list[int] = []
    partitions: list[np.ndarray] = []
    first: list[int] = []
    for stage, depth in enumerate(model.model.config.depths):
        if stage:
            rows, cols = -(-rows // 2), -(-cols // 2)
        for _ in range(depth):
            block = blocks[len(grids)]
            size, shift = int(block.window_size), int(block.shift_size)
            if stage == 0:
                first.append(len(grids))
            grids.append((rows, cols))
            sizes.append(size)
            shifts.append(shift)
            partitions.append(swin_partition(rows, cols, size, shift))
    for n, (part, got) in enumerate(zip(partitions, layers, strict=True)):
        if got.shape[0] != part.shape[0] or got.shape[-1] != part.shape[1]:
            raise ConfigError(f"{model.name}: layer {n}'s windows are not the ones attndesk derives from its config")
    return {
        "window_weights": layers,
        "partitions": partitions,
        "layer_grids": grids,
        "window_sizes": sizes,
        "shifts": shifts,
        "first": first,
    }


__all__ = [
    "MAX_ASPECT",
    "MAX_SIDE",
    "VisionCapture",
    "VisionResult",
    "check_image_size",
    "forward",
    "is_image_input",
    "patch_size",
    "pixel_values",
    "pooled_length",
    "read_image",
    "run_image",
    "scatter_windows",
    "seen_image",
    "special_tokens",
    "swin_partition",
    "vision_only",
]
