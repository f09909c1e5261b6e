"""Which torch devices and dtypes exist here, and how names map onto them."""

from __future__ import annotations

import torch

DEVICE_NAMES = ("auto", "cpu", "cuda", "mps")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def device_availability() -> dict[str, str | None]:
    """Map each concrete device name to None when usable, else the reason it is not."""
    reasons: dict[str, str | None] = {"cpu": None}
    if torch.cuda.is_available():
        reasons["cuda"] = None
    elif torch.version.cuda is None:
        reasons["cuda"] = "this torch build has no CUDA support"
    else:
        reasons["cuda"] = "no CUDA GPU is visible to torch"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        reasons["mps"] = None
    elif mps is not None and mps.is_built():
        reasons["mps"] = "MPS is built but no Apple GPU is available"
    else:
        reasons["mps"] = "MPS needs an Apple-silicon Mac"
    return reasons


def available_devices() -> list[str]:
    """Concrete devices that torch reports as usable, best first."""
    reasons = device_availability()
    return [name for name in ("cuda", "mps", "cpu") if reasons[name] is None]


def resolve_device(name: str) -> torch.device:
    """Turn a config device name into a torch.device; "auto" picks the best available."""
    if name == "auto":
        return torch.device(available_devices()[0])
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so that wall-clock timings mean what they say."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
