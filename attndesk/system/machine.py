"""The fingerprint of the machine that computes: what decides how its CPU kernels round.

Two machines with the same fingerprint run the same kernels in the same order, so a seeded
computation gives the same bits on both; where any field differs (another processor, another
ATen CPU capability, another torch / MKL / oneDNN build, another thread count, an environment
variable that makes MKL or oneDNN pick other kernels) results may differ in their last bits.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

# variables that make MKL or oneDNN choose other kernels on the same processor; ATEN_CPU_CAPABILITY
# shows as the capability itself
KERNEL_ENV = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none: macOS, Windows)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _built_with(pattern: str) -> str:
    """What ``pattern``'s group finds in torch's build description ("" when it is not built in)."""
    found = re.search(pattern, torch.__config__.show())
    return found.group(1) if found else ""


def machine_fingerprint(threads: int | None = None) -> dict[str, Any]:
    """This machine as its kernels see it: processor vendor, model and family/model/stepping,
    ATen's CPU capability, the torch, MKL and oneDNN versions, ``threads`` (default: torch's
    current count) and the kernel-choosing environment variables that are set."""
    cpu = _cpuinfo()
    ids = [cpu.get(k) for k in ("cpu family", "model", "stepping")]
    return {
        "vendor": cpu.get("vendor_id") or platform.system(),
        "processor": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_id": "family {} model {} stepping {}".format(*ids) if all(ids) else "",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "mkl": _built_with(r"Math Kernel Library Version (\S+(?: Build \d+)?)")
        if torch.backends.mkl.is_available()
        else "",
        "onednn": _built_with(r"MKL-DNN v(\S+)") if torch.backends.mkldnn.is_available() else "",
        "threads": torch.get_num_threads() if threads is None else int(threads),
        "kernel_env": {name: os.environ[name] for name in KERNEL_ENV if name in os.environ},
    }


def fingerprint_differences(recorded: dict[str, Any] | None, here: dict[str, Any]) -> list[str]:
    """One phrase per field where ``here`` differs from ``recorded`` ("cpu_capability: AVX512
    recorded, DEFAULT here"); empty when the fingerprints match."""
    if not isinstance(recorded, dict):
        return ["no machine fingerprint recorded"]
    return [
        f"{key}: {recorded.get(key, 'nothing')!s} recorded, {here.get(key, 'nothing')!s} here"
        for key in sorted(set(recorded) | set(here))
        if recorded.get(key) != here.get(key)
    ]
