"""The ``PJRTKIT_GPU_*`` settings both GPU plugins share (README, "GPU backends")."""
from __future__ import annotations

import os

EMULATE_VARIABLE = "PJRTKIT_GPU_EMULATE"
EMULATED_DEVICES_VARIABLE = "PJRTKIT_GPU_EMULATED_DEVICES"
EMULATED_MEMORY_VARIABLE = "PJRTKIT_GPU_EMULATED_MEMORY"
MAX_EMULATED_DEVICES = 8


def emulation_requested() -> bool:
    """``PJRTKIT_GPU_EMULATE=1``: host buffers and Triton's interpreter instead of a driver."""
    return os.environ.get(EMULATE_VARIABLE, "").strip() not in ("", "0")


def emulated_device_count() -> int:
    raw = os.environ.get(EMULATED_DEVICES_VARIABLE, "1").strip() or "1"
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(f"{EMULATED_DEVICES_VARIABLE}={raw!r} is not a whole number") from None
    if not 1 <= count <= MAX_EMULATED_DEVICES:
        raise ValueError(f"{EMULATED_DEVICES_VARIABLE}={count} is out of range "
                         f"1..{MAX_EMULATED_DEVICES}")
    return count


def emulated_memory_bytes() -> int:
    """Each emulated device's declared memory (default 4 GiB; accounted, never reserved)."""
    from pjrtkit.runtime.memory_limits import parse_size

    raw = os.environ.get(EMULATED_MEMORY_VARIABLE, "").strip()
    return parse_size(raw, EMULATED_MEMORY_VARIABLE) if raw else 4 << 30


VENDOR_LIBRARIES_VARIABLE = "PJRTKIT_GPU_VENDOR_LIBRARIES"
VENDOR_LIBRARIES_MODES = ("auto", "off", "require")


def vendor_libraries_mode() -> str:
    """``PJRTKIT_GPU_VENDOR_LIBRARIES``: whether a dot the vendor's BLAS can run goes through it
    (``pjrtkit_gpu.vendor``). ``auto`` (default): where the library is available on the
    device, else the Triton kernels; ``off``: always the Triton kernels, the library never
    imported; ``require``: compiling such a dot without the library is FAILED_PRECONDITION
    naming what is missing."""
    raw = os.environ.get(VENDOR_LIBRARIES_VARIABLE, "").strip().lower() or "auto"
    if raw not in VENDOR_LIBRARIES_MODES:
        raise ValueError(f"{VENDOR_LIBRARIES_VARIABLE}={raw!r} is not one of "
                         f"{', '.join(VENDOR_LIBRARIES_MODES)}")
    return raw
