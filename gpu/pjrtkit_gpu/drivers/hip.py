"""The HIP driver: hip-python (``rocm-bindings-hip``: ``hip.hip``), launching Triton's
ahead-of-time compiled hsaco (Triton's own AMD launcher imports torch). Thin on purpose, like
``drivers.cuda``.

Without hip-python, or without ROCm (hip-python imports, then fails at the first call with
"failed to dlopen libamdhip64.so"), ``HipDriver()`` raises FailedPrecondition naming the cause.
Its launch path is only exercised on a machine with an AMD GPU.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import FailedPrecondition, Internal

from pjrtkit_gpu.drivers.base import DeviceFacts, Driver, launch_grid
from pjrtkit_gpu.drivers.compiled_kernels import CompiledKernels


def _load_bindings():
    try:
        from rocm.bindings import hip  # rocm-bindings-hip (hip-python 10's package layout)
    except ImportError:
        try:
            from hip import hip  # hip-python up to 7.x
        except ImportError as exc:
            raise FailedPrecondition(
                f"pjrtkit_rocm: hip-python is not installed ({exc}); pip install "
                f"'pjrtkit-rocm[driver]', or set PJRTKIT_GPU_EMULATE=1 to run on Triton's "
                f"interpreter") from None
    return hip


def _check(hip, result, what: str):
    error = result[0] if isinstance(result, tuple) else result
    if error != hip.hipError_t.hipSuccess:
        raise Internal(f"pjrtkit_rocm: {what} failed: {error}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


class DeviceMemory:
    __slots__ = ("pointer", "nbytes", "device_index", "_free", "_handle")

    def __init__(self, handle, nbytes, device_index, free):
        self._handle = handle
        self.pointer = int(handle)
        self.nbytes, self.device_index, self._free = nbytes, device_index, free

    def __del__(self):
        try:
            self._free(self._handle)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


class HipDriver(Driver):
    name = "hip"

    def __init__(self):
        hip = self._hip = _load_bindings()
        try:
            result = hip.hipGetDeviceCount()
        except Exception as exc:  # noqa: BLE001 - "failed to dlopen libamdhip64.so"
            raise FailedPrecondition(f"pjrtkit_rocm: no ROCm runtime: {exc}; set "
                                     f"PJRTKIT_GPU_EMULATE=1 to run on Triton's interpreter"
                                     ) from None
        if result[0] != hip.hipError_t.hipSuccess or not result[1]:
            raise FailedPrecondition(f"pjrtkit_rocm: no usable AMD GPU ({result[0]}); set "
                                     f"PJRTKIT_GPU_EMULATE=1 to run on Triton's interpreter")
        facts, self._streams = [], []
        for i in range(result[1]):
            _check(hip, hip.hipSetDevice(i), "hipSetDevice")
            props = hip.hipDeviceProp_t()
            _check(hip, hip.hipGetDeviceProperties(props, i), "hipGetDeviceProperties")
            self._streams.append(_check(hip, hip.hipStreamCreate(), "hipStreamCreate"))
            arch = props.gcnArchName.decode().split(":")[0]
            facts.append(DeviceFacts(name=props.name.decode(), memory_bytes=int(props.totalGlobalMem),
                                     arch=arch, multiprocessor_count=int(props.multiProcessorCount),
                                     warp_size=int(props.warpSize)))
        self._facts = tuple(facts)
        self._kernels = CompiledKernels("hip", lambda i: self._facts[i].arch,
                                        self._facts[0].warp_size, self._load_module)

    def _use(self, device_index):
        _check(self._hip, self._hip.hipSetDevice(device_index), "hipSetDevice")

    # For the vendor libraries (``pjrtkit_gpu.vendor``): their handles are made with the
    # device current and enqueue on its stream, like every launch here.
    def use_device(self, device_index: int) -> None:
        """Make the device current on this thread."""
        self._use(device_index)

    def stream(self, device_index: int):
        """The device's stream (a ``hipStream_t``)."""
        return self._streams[device_index]

    def devices(self):
        return self._facts

    def allocate(self, device_index, nbytes):
        hip = self._hip
        self._use(device_index)
        handle = _check(hip, hip.hipMalloc(max(nbytes, 1)), f"hipMalloc({nbytes})")
        return DeviceMemory(handle, nbytes, device_index, lambda h: hip.hipFree(h))

    def upload(self, memory, host):
        self._use(memory.device_index)
        host = np.array(host, order="C", copy=None)
        _check(self._hip, self._hip.hipMemcpy(memory.pointer, host, host.nbytes,
                                              self._hip.hipMemcpyKind.hipMemcpyHostToDevice),
               "hipMemcpy")

    def download(self, memory, nbytes):
        out = np.empty(nbytes, dtype=np.uint8)
        self.synchronize(memory.device_index)
        if nbytes:
            _check(self._hip, self._hip.hipMemcpy(out, memory.pointer, nbytes,
                                                  self._hip.hipMemcpyKind.hipMemcpyDeviceToHost),
                   "hipMemcpy")
        return out

    def copy(self, dst_memory, src_memory, nbytes):
        self.synchronize(src_memory.device_index)
        _check(self._hip, self._hip.hipMemcpy(dst_memory.pointer, src_memory.pointer, nbytes,
                                              self._hip.hipMemcpyKind.hipMemcpyDeviceToDevice),
               "hipMemcpy")

    def _load_module(self, device_index, binary: bytes, name: str, shared: int):
        self._use(device_index)
        module = _check(self._hip, self._hip.hipModuleLoadData(binary), "hipModuleLoadData")
        return _check(self._hip, self._hip.hipModuleGetFunction(module, name.encode()),
                      "hipModuleGetFunction")

    def launch(self, device_index, kernel, grid, args, constexprs, options=None):
        compiled = self._kernels.get(device_index, kernel, args, constexprs, options)
        params, _types = compiled.parameters(args)
        grid = launch_grid(kernel, grid)
        self._use(device_index)
        _check(self._hip, self._hip.hipModuleLaunchKernel(
            compiled.function, *grid, self._facts[device_index].warp_size * compiled.num_warps,
            1, 1, compiled.shared, self._streams[device_index], None,
            extra=params), f"hipModuleLaunchKernel({compiled.name})")

    def synchronize(self, device_index):
        _check(self._hip, self._hip.hipStreamSynchronize(self._streams[device_index]),
               "hipStreamSynchronize")
