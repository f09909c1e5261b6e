"""The machine's memory: sizes written as a person reads them (``format_bytes``), the free memory
(``available_memory``: RAM, within the process's control group's limit, and a CUDA device's), and
the last guard before a large allocation (``require_free_memory``). What a run will allocate is
worked out in ``attndesk.runs.memory``."""

from __future__ import annotations

from pathlib import Path

import psutil

from attndesk.errors import ConfigError

# Below this a size is not worth reading /proc/meminfo for (validate() runs on every edit).
SMALL_BYTES = 64 * 2**20
CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 63-bit number; anything this large is none
_NO_LIMIT = 2**60
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
    headroom = cgroup_headroom()
    if headroom is not None:
        free = headroom if free is None else min(free, headroom)
    if device is not None and str(device).startswith("cuda"):
        try:
            import torch

            gpu = int(torch.cuda.mem_get_info(torch.device(device))[0])
            free = gpu if free is None else min(free, gpu)
        except Exception:  # no CUDA here after all: the device check reports that
            pass
    return free


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _inactive_file(stat: str | None, key: str) -> int:
    """The reclaimable page cache a control group's usage counts (``key`` in its memory.stat)."""
    for line in (stat or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.isdigit():
            return int(value)
    return 0


def cgroup_headroom(root: Path = CGROUP_ROOT, membership: str | None = None) -> int | None:
    """Bytes the memory control groups holding this process still allow: the least, over the
    process's group and those above it that set a limit, of the limit less the usage (less the
    page cache the kernel can reclaim first). None where no group sets a limit. A container's limit
    is not in psutil's 'available' (that reads the host's /proc/meminfo), and past it the kernel
    kills the process rather than refusing the allocation. ``membership``: /proc/self/cgroup's
    text (cgroup v2 "0::/path"; v1 a line naming the memory controller)."""
    if membership is None:
        membership = _read(Path("/proc/self/cgroup")) or ""
    v1 = v2 = None
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    if v1 is not None:  # a v1 memory hierarchy holds the limit even where a v2 line is listed too
        base, path, files = (
            root / "memory",
            v1,
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
        )
    elif v2 is not None:
        base, path, files = root, v2, ("memory.max", "memory.current", "inactive_file")
    else:
        return None
    # the group's folder and those above it; in a container's namespace the path may not exist
    # under the mount, whose root is then the container's own group
    folders = [base.joinpath(*Path(path).parts[1:][:n]) for n in range(len(Path(path).parts) - 1, -1, -1)]
    headroom = None
    for folder in dict.fromkeys(folders):
        limit, usage = _read(folder / files[0]), _read(folder / files[1])
        if not (limit and limit.isdigit() and usage and usage.isdigit()) or int(limit) >= _NO_LIMIT:
            continue
        used = int(usage) - _inactive_file(_read(folder / "memory.stat"), files[2])
        left = max(0, int(limit) - max(0, used))
        headroom = left if headroom is None else min(headroom, left)
    return headroom


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
