"""The query/key atlas (AttentionViz's joint embedding) of one head's sampled vectors.

Queries and keys are placed in one space so that a query lies near the keys it attends to. Before
projecting, the keys are translated and both sets rescaled (``joint_space``):

- keys move by one constant vector t (k' = k + t): every score of query q moves by q . t, the
  same for all its keys, so softmax leaves every attention weight unchanged;
- queries are multiplied by a and keys divided by a (a > 0): q . k is unchanged exactly, so the
  weights are too. (One common factor on both would multiply the scores by its square: a
  temperature change. That is not what is done here.)

a and t are chosen together so that afterwards the key centroid equals the query centroid and
the mean query norm equals the mean key norm. What is preserved is every q . k up to a per-query
constant, hence every attention weight; what is not is the distance between a query and a key
in the raw space. Position biases (T5, ALiBi) and soft-capping act on the scores, not on q and k,
so the atlas shows the q . k part of a head only.

The projection (PCA, exact, default; UMAP, seeded) is fitted to queries and keys together. Its
faithfulness per head is the Pearson correlation, over random query-key pairs of the sample,
between q . k and minus their distance in the projection (1: nearer always means a higher score).
"""

from __future__ import annotations

import functools
import importlib

import numpy as np

METHODS = ("pca", "umap")
QUALITY_PAIRS = 5000


def joint_space(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """(a q, k / a + t, a, t) with mean(k / a + t) = mean(a q) and mean |a q| = mean |k / a + t|."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    mq, mk = q.mean(0), k.mean(0)
    q_norm = np.linalg.norm(q, axis=1).mean()
    spread = k - mk

    def gap(a: float) -> float:  # mean query norm minus mean key norm after the change
        return a * q_norm - np.linalg.norm(spread / a + a * mq, axis=1).mean()

    low, high = 1e-6, 1e6
    if q_norm == 0 or gap(high) <= 0:  # all queries equal (or zero): no a balances the norms
        a = 1.0
    else:
        for _ in range(200):  # bisection in log space; gap rises from < 0 to > 0
            mid = float(np.sqrt(low * high))
            low, high = (mid, high) if gap(mid) < 0 else (low, mid)
            if high / low < 1 + 1e-12:
                break
        a = float(np.sqrt(low * high))
    t = a * mq - mk / a
    return a * q, k / a + t, a, t


def pca_2d(points: np.ndarray) -> np.ndarray:
    """The first two principal components, exactly: the top eigenvectors of the centred points'
    d x d scatter matrix (float64; d is a head's width, so this is cheap for any number of points).
    Signs are fixed so that each component's largest loading is positive (same input, same picture)."""
    x = points - points.mean(0)
    _, vectors = np.linalg.eigh(x.T @ x)
    top = vectors[:, ::-1][:, :2]  # eigh sorts ascending
    top = top * np.sign(top[np.abs(top).argmax(0), np.arange(top.shape[1])])
    xy = x @ top
    if xy.shape[1] < 2:
        xy = np.pad(xy, ((0, 0), (0, 2 - xy.shape[1])))
    return xy


# umap-learn's numba functions that a fit of the atlas's sample compiles (module, name): none is
# declared cached, so every process compiled them again (docs/corpus.md)
_UMAP_KERNELS = (
    ("umap.umap_", "fast_knn_indices"),
    ("umap.umap_", "smooth_knn_dist"),
    ("umap.umap_", "compute_membership_strengths"),
    ("umap.layouts", "_nb_optimize_layout_euclidean_single_epoch"),
    ("umap.layouts", "clip"),
    ("umap.distances", "euclidean"),
)


@functools.cache  # once per process: a kernel loaded from the cache keeps no signatures of its own
def _cached_kernels() -> None:
    """Keep umap-learn's kernels in numba's cache, compiled as umap-learn declares them (parallel
    where it says so: a serial ``smooth_knn_dist`` sums its mean in another order, and the layout
    would differ). A kernel already compiled in this process is left as it is."""
    for module, name in _UMAP_KERNELS:
        kernel = getattr(importlib.import_module(module), name, None)
        if kernel is not None and not kernel.signatures and hasattr(kernel, "enable_caching"):
            kernel.enable_caching()


def umap_2d(points: np.ndarray, seed: int) -> np.ndarray:
    import umap

    _cached_kernels()
    neighbours = max(2, min(15, len(points) - 1))
    reducer = umap.UMAP(n_components=2, n_neighbors=neighbours, random_state=seed, n_jobs=1, init="random")
    return np.asarray(reducer.fit_transform(points), dtype=np.float64)


def faithfulness(
    q: np.ndarray, k: np.ndarray, q_xy: np.ndarray, k_xy: np.ndarray, seed: int, pairs: int = QUALITY_PAIRS
) -> float:
    """Pearson r of q . k and -|proj(q) - proj(k)| over random pairs (NaN when it has no spread)."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(q), pairs)
    j = rng.integers(0, len(k), pairs)
    score = np.einsum("nd,nd->n", q[i], k[j])
    near = -np.linalg.norm(q_xy[i] - k_xy[j], axis=1)
    if score.std() == 0 or near.std() == 0:
        return float("nan")
    return float(np.corrcoef(score, near)[0, 1])


def project(q: np.ndarray, k: np.ndarray, method: str, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(query xy, key xy, faithfulness) of one head's raw sample."""
    qj, kj, _, _ = joint_space(q, k)
    points = np.concatenate([qj, kj])
    xy = pca_2d(points) if method == "pca" else umap_2d(points, seed)
    q_xy, k_xy = xy[: len(q)], xy[len(q) :]
    return q_xy, k_xy, faithfulness(q, k, q_xy, k_xy, seed)


__all__ = ["METHODS", "faithfulness", "joint_space", "pca_2d", "project", "umap_2d"]
