"""The machine's memory: sizes written as a person reads them (``format_bytes``), the free memory
(``available_memory``: RAM, and a CUDA device's), and the last guard before a large allocation
(``require_free_memory``). What a run will allocate is worked out in ``attndesk.runs.memory``."""

from __future__ import annotations

import psutil

from attndesk.errors import ConfigError

# Below this a size is not worth reading /proc/meminfo for (validate() runs on every edit).
SMALL_BYTES = 64 * 2**20
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units, as RAM is sold and reported."""
    for unit in _UNITS:
        if abs(n) < 1024 or unit == _UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def available_memory(device: str | None = None) -> int | None:
    """Bytes the machine can still hand out without swapping (psutil's 'available'); for a CUDA
    device the smaller of that and the GPU's free memory (models are built in RAM, then moved).
    None when it cannot be read (then only the memory budget is checked)."""
    try:
        free = int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or sandboxed
        free = None
    if device is not None and str(device).startswith("cuda"):
        try:
            import torch

            gpu = int(torch.cuda.mem_get_info(torch.device(device))[0])
            free = gpu if free is None else min(free, gpu)
        except Exception:  # no CUDA here after all: the device check reports that
            pass
    return free


def require_free_memory(need: int, what: str, fix: str, device: str | None = None) -> None:
    """The last guard before a large allocation (the layers' whole-matrix paths): ConfigError
    when ``need`` bytes exceed the free memory (of ``device``), with ``what`` it was for and how
    to ``fix`` it."""
    if need <= SMALL_BYTES:
        return
    free = available_memory(device)
    if free is not None and need > free:
        raise ConfigError(
            f"{what} would take {format_bytes(need)}, more than the {format_bytes(free)} of free memory; {fix}"
        )
