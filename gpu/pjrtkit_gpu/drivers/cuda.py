"""The CUDA driver: cuda-python's driver API (``cuda.bindings.driver``), launching Triton's
ahead-of-time compiled cubins. Thin on purpose: allocation, copies through pinned host memory
(``PinnedStaging``), one stream per device, module loading and launches; everything else is the
shared lowering's.

Without cuda-python, or with it but no driver or device, ``CudaDriver()`` raises
FailedPrecondition naming the cause (``pjrtkit list`` shows it). Its launch path is only
exercised on a machine with an NVIDIA GPU (tests skip elsewhere, saying so).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from pjrtkit.errors import FailedPrecondition, Internal, ResourceExhausted

from pjrtkit_gpu.drivers.base import DeviceFacts, Driver, launch_grid
from pjrtkit_gpu.drivers.compiled_kernels import CompiledKernels
from pjrtkit_gpu.drivers.memory_pool import MemoryPool, rounded


def _load_bindings():
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:
        raise FailedPrecondition(
            f"pjrtkit_cuda: cuda-python is not installed ({exc}); pip install "
            f"'pjrtkit-cuda[driver]', or set PJRTKIT_GPU_EMULATE=1 to run on Triton's "
            f"interpreter") from None
    return cu


def _check(cu, result, what: str):
    error = result[0] if isinstance(result, tuple) else result
    if error != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(error)[1]
        text = name.decode() if isinstance(name, bytes) else str(error)
        raise Internal(f"pjrtkit_cuda: {what} failed: {text}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


# Shared memory a launch may use without opting in (cuFuncSetAttribute).
STATIC_SHARED_LIMIT = 48 << 10


class DeviceMemory:
    __slots__ = ("pointer", "nbytes", "device_index", "_free")

    def __init__(self, pointer: int, nbytes: int, device_index: int, free):
        self.pointer, self.nbytes, self.device_index, self._free = pointer, nbytes, device_index, free

    def __del__(self):
        try:
            self._free(self.pointer)
        except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter exit)
            pass


class PinnedStaging:
    """One page-locked host buffer per device (``cuMemHostAlloc``) that host<->device copies
    go through, ``STAGING_BYTES`` at a time: the DMA engine reads and writes pinned memory
    directly, where a pageable NumPy array costs the driver a bounce copy of its own, and the
    copy can be asynchronous on the stream. Made on the first transfer; freed with the driver.
    A transfer holds its device's buffer (a lock) until its last chunk is done."""

    STAGING_BYTES = 16 << 20

    def __init__(self, cu, use_device):
        self._cu = cu
        self._use_device = use_device
        self._buffers: dict[int, int] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, device_index: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(device_index, threading.Lock())

    def buffer(self, device_index: int) -> int:
        """The device's staging buffer (hold ``lock(device_index)``)."""
        pointer = self._buffers.get(device_index)
        if pointer is None:
            self._use_device(device_index)
            pointer = int(_check(self._cu, self._cu.cuMemHostAlloc(self.STAGING_BYTES, 0),
                                 f"cuMemHostAlloc({self.STAGING_BYTES})"))
            self._buffers[device_index] = pointer
        return pointer

    def chunks(self, nbytes: int):
        """(offset, size) pieces of a transfer of ``nbytes``."""
        for offset in range(0, nbytes, self.STAGING_BYTES):
            yield offset, min(self.STAGING_BYTES, nbytes - offset)

    def __del__(self):
        for pointer in self._buffers.values():
            try:
                self._cu.cuMemFreeHost(pointer)
            except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter exit)
                pass


class CudaDriver(Driver):
    name = "cuda"

    def __init__(self):
        cu = self._cu = _load_bindings()
        try:
            result = cu.cuInit(0)
        except Exception as exc:  # noqa: BLE001 - a missing libcuda raises from the binding
            raise FailedPrecondition(f"pjrtkit_cuda: no CUDA driver: {exc}; set "
                                     f"PJRTKIT_GPU_EMULATE=1 to run on Triton's interpreter"
                                     ) from None
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            raise FailedPrecondition(f"pjrtkit_cuda: cuInit failed ({result[0].name}): no "
                                     f"usable NVIDIA GPU; set PJRTKIT_GPU_EMULATE=1 to run on "
                                     f"Triton's interpreter")
        count = _check(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if not count:
            raise FailedPrecondition("pjrtkit_cuda: the CUDA driver sees no device")
        self._contexts, self._streams, facts = [], [], []
        attr = cu.CUdevice_attribute
        for i in range(count):
            device = _check(cu, cu.cuDeviceGet(i), "cuDeviceGet")
            context = _check(cu, cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
            _check(cu, cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            stream = _check(cu, cu.cuStreamCreate(0), "cuStreamCreate")
            name = _check(cu, cu.cuDeviceGetName(256, device), "cuDeviceGetName")
            major = _check(cu, cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "attribute")
            minor = _check(cu, cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "attribute")
            sms = _check(cu, cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "attribute")
            memory = _check(cu, cu.cuDeviceTotalMem(device), "cuDeviceTotalMem")
            self._contexts.append(context)
            self._streams.append(stream)
            facts.append(DeviceFacts(name=name.split(b"\0")[0].decode(), memory_bytes=int(memory),
                                     arch=f"sm_{major}{minor}", multiprocessor_count=int(sms),
                                     warp_size=32))
        self._facts = tuple(facts)
        self._kernels = CompiledKernels("cuda", lambda i: int(self._facts[i].arch[3:]), 32,
                                        self._load_module)
        self._lock = threading.Lock()
        self._staging = PinnedStaging(cu, self._use)
        # Freed memory kept for reuse, up to a quarter of the smallest device's memory.
        self._pool = MemoryPool(self._free, min(f.memory_bytes for f in facts) // 4)

    def _use(self, device_index: int) -> None:
        _check(self._cu, self._cu.cuCtxSetCurrent(self._contexts[device_index]), "cuCtxSetCurrent")

    # For the vendor libraries (``pjrtkit_gpu.vendor``): their handles live in the device's
    # context and enqueue on its stream, like every launch and copy here.
    def use_device(self, device_index: int) -> None:
        """Make the device's primary context current on this thread."""
        self._use(device_index)

    def stream(self, device_index: int):
        """The device's stream (a ``CUstream``)."""
        return self._streams[device_index]

    def devices(self):
        return self._facts

    def _free(self, device_index: int, pointer: int) -> None:
        self._use(device_index)
        self._cu.cuMemFree(pointer)

    def allocate(self, device_index, nbytes):
        """From the memory pool when it keeps a block of this size, else ``cuMemAlloc``; a
        refusal for lack of memory releases the pool's blocks on the device and asks again,
        then is RESOURCE_EXHAUSTED."""
        cu = self._cu
        size = rounded(nbytes)
        pointer = self._pool.take(device_index, size)
        if pointer is None:
            self._use(device_index)
            result = cu.cuMemAlloc(size)
            if result[0] == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                self.synchronize(device_index)
                self._pool.release_all(device_index)
                result = cu.cuMemAlloc(size)
                if result[0] == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                    raise ResourceExhausted(
                        f"pjrtkit_cuda: out of memory on device {device_index} allocating "
                        f"{nbytes} bytes ({self._facts[device_index].memory_bytes} in all)")
            pointer = int(_check(cu, result, f"cuMemAlloc({nbytes})"))
        pool = self._pool
        return DeviceMemory(pointer, nbytes, device_index,
                            lambda p: pool.give(device_index, size, p))

    def upload(self, memory, host):
        """Through the device's pinned staging buffer, chunk by chunk; returns when the last
        chunk is on the device (the host array may go away after this call)."""
        device = memory.device_index
        host = np.array(host, order="C", copy=None)
        source = host.ctypes.data
        with self._staging.lock(device):
            stage = self._staging.buffer(device)
            self._use(device)
            for offset, size in self._staging.chunks(host.nbytes):
                ctypes.memmove(stage, source + offset, size)
                _check(self._cu, self._cu.cuMemcpyHtoDAsync(memory.pointer + offset, stage, size,
                                                            self._streams[device]),
                       "cuMemcpyHtoDAsync")
                self.synchronize(device)  # before the staging buffer is refilled

    def download(self, memory, nbytes):
        """Through the device's pinned staging buffer, after the device's stream is done."""
        device = memory.device_index
        out = np.empty(nbytes, dtype=np.uint8)
        self._use(device)
        self.synchronize(device)
        if nbytes:
            with self._staging.lock(device):
                stage = self._staging.buffer(device)
                for offset, size in self._staging.chunks(nbytes):
                    _check(self._cu, self._cu.cuMemcpyDtoHAsync(stage, memory.pointer + offset,
                                                                size, self._streams[device]),
                           "cuMemcpyDtoHAsync")
                    self.synchronize(device)
                    ctypes.memmove(out.ctypes.data + offset, stage, size)
        return out

    def copy(self, dst_memory, src_memory, nbytes):
        self.synchronize(src_memory.device_index)
        self._use(dst_memory.device_index)
        _check(self._cu, self._cu.cuMemcpyDtoDAsync(dst_memory.pointer, src_memory.pointer, nbytes,
                                                    self._streams[dst_memory.device_index]),
               "cuMemcpyDtoDAsync")

    def _load_module(self, device_index, binary: bytes, name: str, shared: int):
        """The kernel ``name`` of the cubin ``binary``; a kernel using more than the 48 KiB of
        shared memory every launch may take is allowed its ``shared`` bytes first (as
        Triton's own launcher does: the larger tiles need it on Hopper)."""
        cu = self._cu
        self._use(device_index)
        module = _check(cu, cu.cuModuleLoadData(binary), "cuModuleLoadData")
        function = _check(cu, cu.cuModuleGetFunction(module, name.encode()),
                          "cuModuleGetFunction")
        if shared > STATIC_SHARED_LIMIT:
            _check(cu, cu.cuFuncSetAttribute(
                function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared), f"cuFuncSetAttribute({name}, {shared} bytes of shared memory)")
        return function

    def launch(self, device_index, kernel, grid, args, constexprs, options=None):
        compiled = self._kernels.get(device_index, kernel, args, constexprs, options)
        params, types = compiled.parameters(args)
        grid = launch_grid(kernel, grid)
        self._use(device_index)
        _check(self._cu, self._cu.cuLaunchKernel(
            compiled.function, *grid, 32 * compiled.num_warps, 1, 1, compiled.shared,
            self._streams[device_index], (params, types), 0), f"cuLaunchKernel({compiled.name})")

    def synchronize(self, device_index):
        _check(self._cu, self._cu.cuStreamSynchronize(self._streams[device_index]),
               "cuStreamSynchronize")
