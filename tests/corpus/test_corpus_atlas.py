"""The atlas's joint space keeps every attention weight, its PCA is the reference PCA, its UMAP is
seeded and umap-learn's own (the reference tier), and the store's atlas is the sample the run drew."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from attndesk.corpus.atlas import faithfulness, joint_space, pca_2d


def _softmax(q, k):
    return torch.softmax(torch.tensor(q @ k.T / np.sqrt(q.shape[1])), dim=-1).numpy()


def test_joint_space_keeps_every_weight_and_matches_centroids_and_norms():
    rng = np.random.default_rng(0)
    q = rng.normal(2.0, 1.0, (40, 8))
    k = rng.normal(-1.0, 3.0, (30, 8)) + 5.0
    qj, kj, a, t = joint_space(q, k)
    np.testing.assert_allclose(qj, a * q, rtol=1e-12)  # the documented form: (a q, k / a + t)
    np.testing.assert_allclose(kj, k / a + t, rtol=1e-12)
    np.testing.assert_allclose(_softmax(qj, kj), _softmax(q, k), atol=1e-10)
    np.testing.assert_allclose(qj.mean(0), kj.mean(0), atol=1e-9)
    assert np.linalg.norm(qj, axis=1).mean() == pytest.approx(np.linalg.norm(kj, axis=1).mean(), rel=1e-9)
    # every score moves by a per-query constant (q . t'), so differences within a row are kept
    diff = qj @ kj.T - q @ k.T
    np.testing.assert_allclose(diff - diff[:, :1], 0.0, atol=1e-8)
    # one common factor on both would change the weights: the case the reciprocal scale avoids
    assert not np.allclose(_softmax(2 * q, 2 * k), _softmax(q, k), atol=1e-3)


def test_pca_matches_the_svd_of_the_centred_points_up_to_sign():
    points = np.random.default_rng(1).normal(size=(200, 6)) * np.arange(1, 7)
    ours = pca_2d(points)
    centred = points - points.mean(0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)  # scikit-learn's PCA(svd_solver="full")
    ref = u[:, :2] * s[:2]
    for c in range(2):
        sign = np.sign(ours[:, c] @ ref[:, c])
        np.testing.assert_allclose(ours[:, c], sign * ref[:, c], atol=1e-8)


def test_faithfulness_is_one_when_distance_follows_the_score():
    b = np.random.default_rng(2).uniform(-1, 1, 40)
    q, k = np.tile([1.0, 0.0], (40, 1)), np.c_[b, np.zeros(40)]  # q . k_j = b_j for every query
    q_xy = np.zeros((40, 2))
    assert faithfulness(q, k, q_xy, np.c_[10 - b, np.zeros(40)], seed=0) == pytest.approx(1.0, abs=1e-12)
    assert faithfulness(q, k, q_xy, np.c_[10 + b, np.zeros(40)], seed=0) == pytest.approx(-1.0, abs=1e-12)


_UMAP = """
import importlib, sys, numpy as np
points, out = np.load(sys.argv[2]), sys.argv[3]
if sys.argv[1] == "stock":
    import umap
    reducer = umap.UMAP(n_components=2, n_neighbors=15, random_state=7, n_jobs=1, init="random")
    np.save(out, reducer.fit_transform(points))
    sys.exit()
from numba.core.caching import FunctionCache
from attndesk.corpus import atlas
q, k = np.split(points, 2)
first, again = atlas.project(q, k, "umap", seed=7), atlas.project(q, k, "umap", seed=7)
assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1]), "not seeded"
assert np.isfinite(first[2]), first[2]
for module, name in atlas._UMAP_KERNELS:
    assert isinstance(getattr(importlib.import_module(module), name)._cache, FunctionCache), name
np.save(out, np.concatenate(first[:2]))
"""


@pytest.mark.slow
@pytest.mark.reference
def test_umap_is_seeded_and_equals_umap_learns_own(tmp_path):
    """The atlas's UMAP, in an interpreter that loads umap-learn's kernels from numba's cache, is
    seeded (the same twice) and equals bit for bit stock umap-learn's on the joint space, compiled
    afresh in another interpreter, at the atlas's default sample of 1,000 queries and 1,000 keys
    of a 16-wide head. Here, not in `make test`: in a new venv numba compiles umap-learn and
    pynndescent for about 50 s of CPU."""
    rng = np.random.default_rng(11)
    q, k = rng.normal(size=(1000, 16)), rng.normal(1.0, 2.0, size=(1000, 16))
    np.save(tmp_path / "raw.npy", np.concatenate([q, k]))
    np.save(tmp_path / "joint.npy", np.concatenate(joint_space(q, k)[:2]))
    np.save(tmp_path / "few.npy", rng.normal(size=(40, 4)))

    def run(kind: str, points: str) -> np.ndarray:
        out = tmp_path / f"{kind}-{points}"
        subprocess.run([sys.executable, "-c", _UMAP, kind, str(tmp_path / points), str(out)], check=True, timeout=900)
        return np.load(out.with_suffix(".npy"))

    run("attndesk", "few.npy")  # fills numba's cache where it is empty
    np.testing.assert_array_equal(run("attndesk", "raw.npy"), run("stock", "joint.npy"))


def test_store_atlas_has_the_contract_columns_and_bounded_points(bert_store):
    atlas = bert_store.atlas(1, 2)
    assert list(atlas.columns) == ["x", "y", "kind", "text_id", "position", "token"]
    assert (atlas.kind == "query").sum() == 12 and (atlas.kind == "key").sum() == 12
    texts = bert_store.texts.set_index("text_id")
    assert (atlas.position < texts.loc[atlas.text_id, "tokens"].to_numpy()).all()
    quality = bert_store.atlas_quality
    assert len(quality) == len(bert_store.heads) and quality.correlation.between(-1, 1).all()
