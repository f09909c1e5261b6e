"""Per-image, per-head attention metrics of a vision model, their corpus summary and the roles.

Computed from one layer's weights [H, N, N] as attndesk's ``run_image`` hands them (the special
tokens first: "[CLS]", "[DIST]", "[REG0]"...; then the patches of the grid, row by row), over the
rows of the patch queries only (the special tokens' own rows are left out):

- ``entropy``: -sum_j w_ij ln w_ij over every key, nats;
- ``spatial_distance``: the mean distance, in patch units (Euclidean, between the centres of the
  query patch and the key patch), of the patches a row attends to: sum_j w_ij d_ij / sum_j w_ij
  over the patch keys j (the row's weight on special tokens left out); rows with no weight on any
  patch are left out (``distance_rows`` counts the others);
- ``class_share``: w_i,[CLS] (NaN for a model without a class token, SigLIP);
- ``sink_share``: the weight on the register tokens, summed ("[REG0]"...), where the model has
  them; else the weight on the top sink token: the token other than [CLS] whose mean weight over
  the image's patch rows is the largest (``sink_token`` is its index).

Beside them, a uniform row's figures over the N tokens (an image pass masks no key): the
baselines the roles compare with (``uniform_entropy`` ln N, ``uniform_share`` 1 / N,
``uniform_sink`` registers / N or 1 / N, ``uniform_distance`` the mean distance to every patch). Corpus figures are means over all rows of all images, as the text pass's.

torch is not needed: the names and roles load with numpy alone (the window's Corpus tab).
"""

from __future__ import annotations

import math

import numpy as np

from .metrics import excess, role

IMAGE_METRICS = ("entropy", "spatial_distance", "class_share", "sink_share")
IMAGE_BASELINES = ("uniform_entropy", "uniform_share", "uniform_sink", "uniform_distance")
PER_IMAGE_VALUES = IMAGE_METRICS + IMAGE_BASELINES
IMAGE_SHARE_BASELINE = {"class_share": "uniform_share", "sink_share": "uniform_sink"}
# the row count each mean is weighted by (the others: ``rows``, every patch query)
DISTANCE_VALUES = ("spatial_distance", "uniform_distance")

# Roles, first match wins (docs/vision.md): a share at least the threshold above a uniform row's;
# a distance at most the threshold in patches and at most IMAGE_LOCAL_SHARE of a uniform row's.
IMAGE_ROLE_RULES: tuple[tuple[str, str, float], ...] = (
    ("register/sink", "sink_share", 0.5),
    ("global/class", "class_share", 0.5),
    ("local", "spatial_distance", 1.5),
)
IMAGE_LOCAL_SHARE = 0.5
IMAGE_BROAD_SHARE = 0.8  # entropy at least this share of a uniform row's


def image_excess(values: dict, metric: str) -> float:
    """A share less its uniform baseline (the metric itself for one without a baseline)."""
    return excess(values, metric, IMAGE_SHARE_BASELINE)


def image_role(values: dict) -> str:
    """The first role whose rule the head's corpus metrics meet; "broad" or "mixed" otherwise."""
    return role(
        values,
        IMAGE_ROLE_RULES,
        baselines=IMAGE_SHARE_BASELINE,
        distance="spatial_distance",
        local_share=IMAGE_LOCAL_SHARE,
        broad_share=IMAGE_BROAD_SHARE,
    )


def patch_distances(grid: tuple[int, int]) -> np.ndarray:
    """[P, P] Euclidean distances between the patches of a (rows, cols) grid, in patch units."""
    rows, cols = grid
    r, c = np.divmod(np.arange(rows * cols), cols)
    return np.hypot(r[:, None] - r[None, :], c[:, None] - c[None, :])


def layer_metrics(weights: np.ndarray, tokens: list[str], grid: tuple[int, int]) -> dict[str, np.ndarray]:
    """{name: [H]} of one layer's weights [H, N, N]: the metrics and baselines (means over the
    patch rows), "rows", "distance_rows" and "sink_token" (the top sink's index; -1 with registers)."""
    specials = len(tokens) - grid[0] * grid[1]
    w = np.asarray(weights, dtype=np.float64)[:, specials:, :]  # [H, P, N]: the patch queries' rows
    heads, patches, keys = w.shape
    reached = np.full((heads, patches), keys)  # an image pass masks nothing: every row may reach every key
    entropy = -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1)
    d = patch_distances(grid)
    on_patches = w[..., specials:]
    mass = on_patches.sum(-1)
    attended = mass > 0
    distance = np.where(attended, (on_patches * d).sum(-1) / np.where(attended, mass, 1.0), np.nan)
    uniform_distance = np.broadcast_to(d.mean(-1), (heads, patches))
    out: dict[str, np.ndarray] = {
        "entropy": entropy.mean(-1),
        "uniform_entropy": np.log(reached).mean(-1),
        "uniform_share": (1.0 / reached).mean(-1),
        "rows": np.full(heads, patches, dtype=np.int64),
        "distance_rows": attended.sum(-1),
    }
    counted = np.maximum(out["distance_rows"], 1)
    out["spatial_distance"] = np.where(
        out["distance_rows"] > 0, np.where(attended, distance, 0.0).sum(-1) / counted, np.nan
    )
    out["uniform_distance"] = np.where(
        out["distance_rows"] > 0, np.where(attended, uniform_distance, 0.0).sum(-1) / counted, np.nan
    )
    out["class_share"] = w[..., 0].mean(-1) if tokens[:1] == ["[CLS]"] else np.full(heads, np.nan)
    registers = [i for i, name in enumerate(tokens[:specials]) if name.startswith("[REG")]
    if registers:
        out["sink_share"] = w[..., registers].sum(-1).mean(-1)
        out["uniform_sink"] = (len(registers) / reached).mean(-1)
        out["sink_token"] = np.full(heads, -1, dtype=np.int64)
    else:
        columns = w.mean(1)  # [H, N]: each key's mean weight over the patch rows
        if tokens[:1] == ["[CLS]"]:
            columns[:, 0] = -np.inf
        top = columns.argmax(-1)
        out["sink_share"] = columns[np.arange(heads), top]
        out["uniform_sink"] = out["uniform_share"]
        out["sink_token"] = top.astype(np.int64)
    return out


def image_heads_summary(con, per_image: str):
    """Corpus metrics per head from per-image rows (``per_image``: a SQL table expression): means
    over all patch rows of all images (``spatial_distance`` over the rows that reached a patch)."""
    import pandas as pd

    def weight(m: str) -> str:
        return "distance_rows" if m in DISTANCE_VALUES else "rows"

    means = ", ".join(
        f"sum(CASE WHEN isnan({m}) THEN 0 ELSE {m} * {weight(m)} END) / "
        f'nullif(sum(CASE WHEN isnan({m}) THEN 0 ELSE {weight(m)} END), 0) AS "{m}"'
        for m in PER_IMAGE_VALUES
    )
    frame = con.execute(
        f"SELECT part, layer, head, {means}, count(*) AS images FROM {per_image} WHERE rows > 0 "
        "GROUP BY part, layer, head ORDER BY layer, head"
    ).df()
    frame["role"] = [
        image_role({k: (math.nan if pd.isna(r[k]) else float(r[k])) for k in PER_IMAGE_VALUES})
        for r in frame.to_dict("records")
    ]
    return frame[["part", "layer", "head", *IMAGE_METRICS, "role", *IMAGE_BASELINES, "images"]]


__all__ = [
    "DISTANCE_VALUES",
    "IMAGE_BASELINES",
    "IMAGE_BROAD_SHARE",
    "IMAGE_LOCAL_SHARE",
    "IMAGE_METRICS",
    "IMAGE_ROLE_RULES",
    "IMAGE_SHARE_BASELINE",
    "PER_IMAGE_VALUES",
    "image_excess",
    "image_heads_summary",
    "image_role",
    "layer_metrics",
    "patch_distances",
]
