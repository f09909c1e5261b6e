"""A separate virtualenv with kvpress 0.5.5 (it needs transformers < 5.3, attndesk 5.23), built
on first use in the cache folder ($ATTNDESK_CACHE, else ~/.cache/attndesk) from the registries:
torch 2.13.0 first (the CPU wheel this machine has), then kvpress and the transformers it asks for.
A build that fails leaves no stamp, and the caller skips with its last line."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

KVPRESS = "kvpress==0.5.5"


def cache_dir() -> Path:
    return Path(os.environ.get("ATTNDESK_CACHE", Path.home() / ".cache" / "attndesk"))


def kvpress_python() -> tuple[Path | None, str]:
    """(the environment's python, "") or (None, why it could not be built)."""
    env = cache_dir() / "kvpress-0.5.5"
    python, stamp = env / "bin" / "python", env / ".installed"
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / "kvpress-0.5.5.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (test workers)
        if stamp.exists():
            return python, ""
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(env)],
            [str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"],
            [str(python), "-m", "pip", "install", "--quiet", KVPRESS],
        ]
        for step in steps:
            done = subprocess.run(step, check=False, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                return None, f"cannot build the kvpress environment ({' '.join(step[-2:])}): {lines[-1]}"
        stamp.write_text(KVPRESS + "\n")
    return python, ""
