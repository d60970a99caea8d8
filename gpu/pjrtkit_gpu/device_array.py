"""``DeviceArray``: the payload of the GPU backends. Device memory (whatever the driver
allocated: a CUDA/HIP device pointer, or host bytes under emulation) plus the shape and dtype
the program gave it. Kernels take and return these; the core never looks inside (see
``pjrtkit.lowering.payloads``). The memory is freed when the last DeviceArray viewing it goes.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.expansions.formats import STORED_ONLY

from pjrtkit_gpu import dtypes


def is_storable(dtype: np.dtype) -> bool:
    """Whether a DeviceArray may hold ``dtype``: the types the kernels compute on, and the
    complex and narrow types the core's expansions rewrite into those (held as bytes, read
    only through ``stablehlo.bitcast_convert``)."""
    return dtypes.is_supported(dtype) or dtype in STORED_ONLY


class DeviceArray:
    """``memory`` (a driver allocation with ``.pointer``, ``.nbytes``, ``.device_index``),
    ``shape``, ``dtype`` (a NumPy dtype, ml_dtypes for bfloat16). A reshape is a new
    DeviceArray over the same memory; nothing writes memory another array reads (results are
    always fresh allocations), so sharing is safe."""

    __slots__ = ("memory", "shape", "dtype")

    def __init__(self, memory, shape: tuple[int, ...], dtype: np.dtype):
        self.memory = memory
        self.shape = tuple(shape)
        self.dtype = dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def pointer(self) -> int:
        return self.memory.pointer

    @property
    def device_index(self) -> int:
        return self.memory.device_index

    def reshaped(self, shape: tuple[int, ...]) -> "DeviceArray":
        return DeviceArray(self.memory, shape, self.dtype)

    def __repr__(self) -> str:
        return (f"DeviceArray({self.dtype.name}{list(self.shape)} on device "
                f"{self.device_index}, {self.memory!r})")
