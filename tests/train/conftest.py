"""Training tests run on one thread: small models train fastest so on a shared machine, and the
recorded hashes of the presets were made on one thread."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One thread, or ``ATTNDESK_TEST_THREADS`` where ``make test-isa`` sets it."""
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("ATTNDESK_TEST_THREADS") or 1))
    yield
    torch.set_num_threads(before)
