"""The GPU targets kernels are compiled for: Triton's ``GPUTarget`` arguments per target name,
and the ``asm`` key of each backend's binary."""
from __future__ import annotations

TARGETS = {
    "sm_80": ("cuda", 80, 32), "sm_90": ("cuda", 90, 32), "sm_100": ("cuda", 100, 32),
    "gfx90a": ("hip", "gfx90a", 64), "gfx942": ("hip", "gfx942", 64),
    "gfx1100": ("hip", "gfx1100", 32),
}
BINARY = {"cuda": "cubin", "hip": "hsaco"}
