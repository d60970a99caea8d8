"""cuBLAS through nvmath-python's low-level bindings (``nvmath.bindings.cublas``; cuda-python
has none for the CUDA libraries). ``pip install 'pjrtkit-cuda[vendor]'`` brings nvmath-python
without NVIDIA's library wheels: libcublas comes from the CUDA toolkit on the machine, or from
the ``nvidia-cublas-cu*`` wheels (nvmath-python finds both).

One cuBLAS handle per device, made in the device's primary context (the driver's) and bound
to the driver's stream of that device; calls on it hold a lock (a cuBLAS handle is not to be
used by two threads at once). Not yet run on a GPU: on a machine without one, handle creation
fails and ``availability`` says so.
"""
from __future__ import annotations

import threading

from pjrtkit.errors import Internal

from pjrtkit_gpu import dtypes as D
from pjrtkit_gpu.vendor.base import (GemmSpec, VendorLibraries, VendorUnavailable, blas_gemm,
                                     scaling_factors)

# cudaDataType_t values (library_types.h; nvmath's CudaDataType enum has the same numbers).
CUDA_DATA_TYPES = {D.FLOAT16: 2, D.BFLOAT16: 14, D.FLOAT32: 0, D.FLOAT64: 1}


def import_cublas():
    """``nvmath.bindings.cublas``, or VendorUnavailable naming what to install."""
    try:
        from nvmath.bindings import cublas
    except ImportError as exc:
        raise VendorUnavailable(f"nvmath-python is not installed ({exc}); pip install "
                                f"'pjrtkit-cuda[vendor]'") from None
    except Exception as exc:  # noqa: BLE001 - an installed but broken nvmath-python
        raise VendorUnavailable(f"nvmath-python cannot be imported: {type(exc).__name__}: "
                                f"{exc}") from None
    return cublas


def open_cublas_handle(cublas, stream: int) -> int:
    """A cuBLAS handle in the current context, on ``stream`` (a CUstream address), with
    cuBLAS's default math (no TF32: float32 agrees with the Triton path's IEEE products).
    Without a CUDA driver nvmath raises when it loads libcuda; that becomes "no CUDA
    driver"; any other failure "cublasCreate failed"."""
    try:
        handle = cublas.create()
    except Exception as exc:  # noqa: BLE001 - nvmath's loader and cuBLAS errors alike
        text = str(exc)
        if "driver" in text.lower() and ("not found" in text or "libcuda" in text):
            raise VendorUnavailable(f"no CUDA driver: {text}") from None
        raise VendorUnavailable(f"cublasCreate failed: {type(exc).__name__}: {text}") from None
    try:
        cublas.set_stream(handle, stream)
        cublas.set_math_mode(handle, cublas.Math.DEFAULT_MATH)
    except Exception as exc:  # noqa: BLE001
        cublas.destroy(handle)
        raise VendorUnavailable(f"cuBLAS handle set-up failed: {exc}") from None
    return handle


class CudaLibraries(VendorLibraries):
    vendor = "cuda"
    blas_name = "cuBLAS"

    def __init__(self, driver):
        super().__init__(driver)
        self._cublas = None
        self._handles: dict[int, int] = {}
        self._call_locks: dict[int, threading.Lock] = {}

    def _open(self, device_index):
        cublas = self._cublas = import_cublas()
        if getattr(self.driver, "interprets", False):
            raise VendorUnavailable(f"no CUDA driver: the emulated driver "
                                    f"(PJRTKIT_GPU_EMULATE=1) keeps device memory on the host, "
                                    f"where {self.blas_name} cannot run")
        self.driver.use_device(device_index)
        self._handles[device_index] = open_cublas_handle(
            cublas, int(self.driver.stream(device_index)))
        self._call_locks[device_index] = threading.Lock()

    def gemm(self, device_index, spec: GemmSpec, a, b, c):
        cublas, call = self._cublas, blas_gemm(spec)
        op = cublas.Operation
        compute = (cublas.ComputeType.COMPUTE_64F if spec.dtype == D.FLOAT64
                   else cublas.ComputeType.COMPUTE_32F)
        scale = scaling_factors(spec)
        alpha, beta = scale.ctypes.data, scale.ctypes.data + scale.itemsize
        operand, result = CUDA_DATA_TYPES[spec.dtype], CUDA_DATA_TYPES[spec.out_dtype]
        with self._call_locks[device_index]:
            self.driver.use_device(device_index)
            try:
                cublas.gemm_strided_batched_ex(
                    self._handles[device_index],
                    op.T if call.transpose_first else op.N,
                    op.T if call.transpose_second else op.N,
                    call.m, call.n, call.k, alpha,
                    b, operand, call.ld_first, call.stride_first,
                    a, operand, call.ld_second, call.stride_second,
                    beta, c, result, call.ldc, call.stride_c, call.batch,
                    compute, cublas.GemmAlgo.DEFAULT)
            except Exception as exc:  # noqa: BLE001 - cuBLASError names the status
                raise Internal(f"pjrtkit_cuda: cublasGemmStridedBatchedEx ({spec.dtype.name}, "
                               f"batch {spec.batch}, {spec.m}x{spec.k} @ {spec.k}x{spec.n}) "
                               f"failed: {exc}") from None
