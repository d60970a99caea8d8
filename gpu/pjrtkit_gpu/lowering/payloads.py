"""``GpuPayloads``: constants become device arrays at compile time, on the device the program is
compiled for; folding runs the GPU kernels on them (the default); results describe themselves."""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.payloads import Payloads

from pjrtkit_gpu import dtypes


class GpuPayloads(Payloads):
    """The payload questions for one compile: ``driver`` and ``device_index`` are where the
    program's constants live and its kernels run (rules read them from ``ctx.payloads``);
    ``vendor`` (``"cuda"``, ``"hip"``, or None) whose libraries a rule may use
    (``pjrtkit_gpu.vendor``; the emulated driver serves both vendors, so it is said here)."""

    def __init__(self, driver, device_index: int, platform: str, vendor: str | None = None):
        self.driver = driver
        self.device_index = device_index
        self.platform = platform
        self.vendor = vendor

    def make_constant(self, value, type):
        if not dtypes.is_supported(type.dtype):
            raise Unimplemented(f"{self.platform}: no {type.dtype.name} constants (the GPU "
                                f"kernels take {', '.join(d.name for d in dtypes.SUPPORTED)})")
        host = np.broadcast_to(np.asarray(value, dtype=type.dtype), type.shape)
        return self.driver.from_host(self.device_index, host)

    def describe(self, payload):
        return payload.shape, payload.dtype
