"""Tiny random checkpoints shared by the CLI tests of one run: each is built once (a second or
two) and reused; tests that change a folder copy it first."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

try:
    from tests.pretrained_models import build
except ImportError:  # the tests folder on sys.path instead of the project root
    from pretrained_models import build


@cache
def tiny_model(name: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="attndesk-cli-models-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return build(name, root / name)
