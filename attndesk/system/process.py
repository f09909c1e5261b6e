"""Process-wide tuning, in one place: how the C heap and Python's garbage collector are set up
for a long-lived process that makes large arrays in many threads (the window, a long CLI run).

- ``tune_process()`` once at startup (the window calls it; calling again does nothing):
  ``map_large_blocks`` below.
- ``freeze_long_lived()`` after a large set of objects that live as long as the process was made
  (the window's widgets, transformers' import).
- ``trim_heap()`` after a large result was let go.
"""

from __future__ import annotations

import ctypes
import gc
import threading

# glibc raises its mmap threshold to the size of each mmapped block freed, so after the first large
# free, mid-sized arrays come from the job threads' heaps and stay there when freed (the incident is
# in docs/reliability.md). A fixed threshold keeps every block from 4 MiB up mapped on its own,
# returned the moment it is freed.
MMAP_THRESHOLD = 4 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)

_lock = threading.Lock()
_tuned: dict[str, bool] = {}


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold (see above); False where there is no mallopt (not glibc)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False


def trim_heap() -> bool:
    """Return the C heap's free pages to the system (glibc); False where there is no malloc_trim."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def freeze_long_lived() -> None:
    """Move every object alive now out of the collector's sight (``gc.freeze``).

    A full collection walks every tracked object: after the window is built (~250k objects, the
    modules and widgets) it took ~270 ms, and after transformers' import (~150k) ~70 ms, a stall
    in whichever thread allocated, the window's too. Frozen, later collections walk only what
    came after. Call it only when what exists now lives as long as the process: a frozen cycle is
    never collected (a model loaded later is not frozen: it may be evicted)."""
    gc.freeze()


def tune_process() -> dict[str, bool]:
    """Apply the process-wide settings once (later calls return the first call's outcome):
    {"map_large_blocks": whether glibc took the fixed mmap threshold}."""
    with _lock:
        if not _tuned:
            _tuned["map_large_blocks"] = map_large_blocks()
        return dict(_tuned)


__all__ = ["MMAP_THRESHOLD", "freeze_long_lived", "map_large_blocks", "trim_heap", "tune_process"]
