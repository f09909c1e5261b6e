"""The positional view draws the sinusoidal matrix and PE . PE^T for the current length and dim."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.app.tabs.positions.view import PositionalView
from attndesk.attention.positional import sinusoidal_encoding
from attndesk.core import AttentionConfig, run_attention


@pytest.fixture
def view(qtbot):
    v = PositionalView()
    qtbot.addWidget(v)
    v.resize(900, 450)
    v.show()
    return v


def test_follows_the_result_length_and_dim(view):
    result = run_attention(AttentionConfig(num_heads=2, embed_dim=12), "the cat sat on the mat")
    view.set_result(result)
    expected = sinusoidal_encoding(6, 12, dtype=torch.float64).numpy()
    assert np.array_equal(view.encoding, expected)
    assert np.array_equal(view.encodingPlot.matrix, expected)
    np.testing.assert_allclose(view.similarityPlot.matrix, expected @ expected.T)
    view.set_shape(30, 16)
    assert view.encodingPlot.matrix.shape == (30, 16) and view.similarityPlot.matrix.shape == (30, 30)
    assert "[30 × 16]" in view.encodingPlot.title.text()


def test_similarity_depends_only_on_distance(view):
    view.set_shape(40, 32)
    sim = view.similarityPlot.matrix
    for offset in range(-39, 40):
        diagonal = np.diagonal(sim, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-9)
    np.testing.assert_allclose(np.diag(sim), 16.0)  # dim/2: sin^2 + cos^2 per pair
    assert sim[0, 1] > sim[0, 5]  # nearby positions are more alike
    assert "16" in view.infoLabel.text()


def test_hover_readouts_and_positional_off_note(view):
    result = run_attention(AttentionConfig(num_heads=2, embed_dim=8, position="none"), "a b c")
    view.set_result(result)
    assert "OFF" in view.infoLabel.text()
    text = view.hover_similarity(0, 2)
    assert "distance 2" in text and f"{view.similarity[0, 2]:.5g}" in text
    text = view.hover_encoding(2, 3)
    assert text.startswith("PE(2, 3) = cos") and f"{view.encoding[2, 3]:.5g}" in text


def test_pe_uses_a_diverging_map_fixed_to_minus_one_one(view):
    view.set_shape(10, 8)
    assert view.encodingPlot.levels == (-1.0, 1.0)
    assert view.encodingPlot.colormap_name == "CET-D1"


def test_long_documents_compare_only_the_first_positions(view, monkeypatch):
    import attndesk.app.tabs.positions.view as positional

    monkeypatch.setattr(positional, "MAX_SIMILARITY", 20)
    view.set_shape(50, 8)
    assert view.encodingPlot.matrix.shape == (50, 8)
    assert view.similarityPlot.matrix.shape == (20, 20)
    np.testing.assert_allclose(view.similarity, view.encoding[:20] @ view.encoding[:20].T, atol=1e-12)
    assert "first 20 of 50 positions" in view.similarityPlot.title.text()
