"""Fixtures of the image-training tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def sklearn_digits():
    """scikit-learn's digits (``load_digits()``), the reference the digits task is checked against;
    imported when a test asks, not when its module is collected: sklearn.datasets takes over a
    second to import (scipy among it), and every test worker collects these modules."""
    from sklearn.datasets import load_digits

    return load_digits()
