"""What every driver offers the lowering and the plugins (the runtime seam).

Ownership: a driver owns one stream per device; every launch and copy of a device goes on it in
order, so a kernel never starts before the kernels producing its inputs. ``synchronize`` waits
for that stream; the plugins call it at the end of each execution and transfer, which the core
runs on its worker thread, so a PJRT event completes when the GPU is done, not when a launch
returns (ARCHITECTURE.md, "GPU backends").
"""
from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pjrtkit.errors import Unimplemented

from pjrtkit_gpu.device_array import DeviceArray

# The largest launch grid, in programs per dimension, that every target takes (CUDA's limits;
# HIP's are no larger). The emulation holds kernels to them too, so CI sees what a GPU refuses.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


def launch_grid(kernel, grid: Sequence[int]) -> tuple[int, int, int]:
    """``grid`` as three dimensions; UNIMPLEMENTED naming the kernel past ``GRID_LIMITS``."""
    full = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if any(g > limit for g, limit in zip(full, GRID_LIMITS)):
        name = getattr(getattr(kernel, "fn", kernel), "__name__", type(kernel).__name__)
        raise Unimplemented(f"pjrtkit-gpu: kernel {name} needs a launch grid of {full} programs; "
                            f"GPUs take at most {GRID_LIMITS}")
    return full


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What ``make_topology`` publishes about one GPU (DeviceSpec attributes)."""

    name: str
    memory_bytes: int
    arch: str  # "sm_90", "gfx942", "emulated"
    multiprocessor_count: int
    warp_size: int


class Driver(abc.ABC):
    """One vendor runtime (or the emulation)."""

    name: str
    # True when kernels run through Triton's interpreter (host memory).
    interprets: bool = False

    @abc.abstractmethod
    def devices(self) -> Sequence[DeviceFacts]:
        """The visible GPUs, in device order."""

    @abc.abstractmethod
    def allocate(self, device_index: int, nbytes: int) -> Any:
        """Device memory of ``nbytes`` (at least one byte is allocated): an object with
        ``pointer``, ``nbytes``, ``device_index``, freed when it is collected."""

    @abc.abstractmethod
    def upload(self, memory, host: np.ndarray) -> None:
        """Copy a C-contiguous host array's bytes into ``memory``."""

    @abc.abstractmethod
    def download(self, memory, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of ``memory`` as a new host uint8 array (waits for the
        device's stream first)."""

    @abc.abstractmethod
    def copy(self, dst_memory, src_memory, nbytes: int) -> None:
        """Device-to-device copy (same or another device)."""

    @abc.abstractmethod
    def launch(self, device_index: int, kernel, grid: tuple[int, ...],
               args: Sequence[DeviceArray | int], constexprs: Mapping[str, Any],
               options: Mapping[str, int] | None = None) -> None:
        """Enqueue ``kernel`` (a ``@triton.jit`` function) on the device's stream.
        ``options``: Triton's compile options (``num_warps``, ``num_stages``; default
        Triton's), which the emulation ignores."""

    @abc.abstractmethod
    def synchronize(self, device_index: int) -> None:
        """Wait until everything enqueued on the device's stream has finished."""

    # -- helpers every driver shares ---------------------------------------------------------
    def empty(self, device_index: int, shape, dtype: np.dtype) -> DeviceArray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return DeviceArray(self.allocate(device_index, nbytes), tuple(shape), dtype)

    def from_host(self, device_index: int, array: np.ndarray) -> DeviceArray:
        array = np.array(array, order="C", copy=None)  # ascontiguousarray makes 0-d 1-d
        result = self.empty(device_index, array.shape, array.dtype)
        if array.nbytes:
            self.upload(result.memory, array)
        return result

    def to_host(self, payload: DeviceArray) -> np.ndarray:
        raw = self.download(payload.memory, payload.nbytes)
        return raw.view(payload.dtype).reshape(payload.shape)

    def duplicate(self, payload: DeviceArray, device_index: int | None = None) -> DeviceArray:
        target = payload.device_index if device_index is None else device_index
        result = self.empty(target, payload.shape, payload.dtype)
        if payload.nbytes:
            self.copy(result.memory, payload.memory, payload.nbytes)
        return result
