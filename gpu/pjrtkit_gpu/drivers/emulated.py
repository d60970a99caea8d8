"""The emulation driver (``PJRTKIT_GPU_EMULATE=1``): device memory is host memory and every kernel
runs through Triton's interpreter, the very kernels a GPU would run. Devices are a documented
fake description (``EMULATED_DEVICE``). Everything is synchronous: a launch returns when the
kernel has run, so ``synchronize`` has nothing to wait for.
"""
from __future__ import annotations

import threading

import numpy as np

from pjrtkit_gpu import dtypes, kernel_log, settings
from pjrtkit_gpu.device_array import DeviceArray
from pjrtkit_gpu.drivers.base import DeviceFacts, Driver, launch_grid
from pjrtkit_gpu.drivers.compiled_kernels import signature_of
from pjrtkit_gpu.triton_setup import import_triton

EMULATED_DEVICE = "pjrtkit emulated GPU (Triton interpreter)"


class HostMemory:
    """Emulated device memory: an owned host byte array."""

    __slots__ = ("bytes", "device_index")

    # As cuMemAlloc and hipMalloc align allocations (the kernel signature's alignment hints,
    # recorded here, are then the ones a GPU compiles).
    ALIGNMENT = 256

    def __init__(self, nbytes: int, device_index: int):
        raw = np.empty(max(nbytes, 1) + self.ALIGNMENT, dtype=np.uint8)
        start = -raw.ctypes.data % self.ALIGNMENT
        self.bytes = raw[start:start + max(nbytes, 1)]
        self.device_index = device_index

    @property
    def pointer(self) -> int:
        return self.bytes.ctypes.data

    @property
    def nbytes(self) -> int:
        return self.bytes.size

    def __repr__(self) -> str:
        return f"HostMemory({self.bytes.size} bytes)"


class _Storage:
    """What Triton's interpreter asks of a tensor's storage: its address, a host copy (it is
    one already) and a copy back (nothing to do: the kernel wrote it in place)."""

    __slots__ = ("memory",)

    def __init__(self, memory: HostMemory):
        self.memory = memory

    def data_ptr(self) -> int:
        return self.memory.pointer

    def cpu(self) -> "_Storage":
        return self

    def copy_(self, other) -> None:
        pass


class InterpreterTensor:
    """A DeviceArray as Triton's interpreter takes kernel arguments (torch-like: ``data_ptr``,
    a dtype name, a storage). The dtype is the array's storage type (bool as uint8)."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: DeviceArray):
        self.array = array
        self.dtype = dtypes.storage_language_type(array.dtype)

    def data_ptr(self) -> int:
        return self.array.pointer

    def untyped_storage(self) -> _Storage:
        return _Storage(self.array.memory)

    def new_empty(self, *args, **kwargs) -> "InterpreterTensor":
        return InterpreterTensor(self.array)

    def set_(self, storage, *args) -> "InterpreterTensor":
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.array.shape

    def stride(self) -> tuple[int, ...]:
        return ()

    def copy_(self, other) -> None:
        pass


class EmulatedDriver(Driver):
    name = "emulated"
    interprets = True

    def __init__(self):
        import_triton(interpret=True)
        memory = settings.emulated_memory_bytes()
        self._devices = tuple(
            DeviceFacts(name=EMULATED_DEVICE, memory_bytes=memory, arch="emulated",
                        multiprocessor_count=1, warp_size=32)
            for _ in range(settings.emulated_device_count()))
        # The interpreter keeps global state (the grid being run): one launch at a time.
        self._lock = threading.Lock()

    def devices(self):
        return self._devices

    def allocate(self, device_index, nbytes):
        return HostMemory(nbytes, device_index)

    def upload(self, memory, host):
        memory.bytes[:host.nbytes] = np.frombuffer(host.tobytes(), dtype=np.uint8) \
            if not host.flags.c_contiguous else host.reshape(-1).view(np.uint8)

    def download(self, memory, nbytes):
        return memory.bytes[:nbytes].copy()

    def copy(self, dst_memory, src_memory, nbytes):
        dst_memory.bytes[:nbytes] = src_memory.bytes[:nbytes]

    def launch(self, device_index, kernel, grid, args, constexprs, options=None):
        launch_grid(kernel, grid)
        if kernel_log.enabled():
            kernel_log.record(kernel, signature_of(kernel, args, constexprs), constexprs, options)
        converted = [InterpreterTensor(a) if isinstance(a, DeviceArray) else a for a in args]
        with self._lock, np.errstate(all="ignore"):
            kernel[tuple(grid)](*converted, **constexprs)

    def synchronize(self, device_index):
        pass
