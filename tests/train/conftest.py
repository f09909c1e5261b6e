"""Training tests run on one thread: small models train fastest so on a shared machine, and the
recorded hashes of the presets were made on one thread."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
