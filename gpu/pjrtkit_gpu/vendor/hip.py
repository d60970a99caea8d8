"""hipBLAS through hip-python's library bindings (``rocm-bindings-libraries``, hip-python 10's
package layout: ``rocm.bindings.hipblas``; ``pip install 'pjrtkit-rocm[vendor]'``). The bindings
load libhipblas.so from the ROCm installation when first called.

One hipBLAS handle per device, made with the device current and bound to the driver's stream
of that device; calls on it hold a lock. Not yet run on a GPU: without ROCm, handle creation
fails ("failed to dlopen libhipblas.so") and ``availability`` says so.
"""
from __future__ import annotations

import threading

from pjrtkit.errors import Internal

from pjrtkit_gpu import dtypes as D
from pjrtkit_gpu.vendor.base import (GemmSpec, VendorLibraries, VendorUnavailable, blas_gemm,
                                     scaling_factors)


def import_hipblas():
    """``(hipblas, hip)`` from hip-python's bindings, or VendorUnavailable naming what to
    install."""
    try:
        from rocm.bindings import hip, hipblas
    except ImportError as exc:
        raise VendorUnavailable(f"hip-python's library bindings (rocm-bindings-libraries) are "
                                f"not installed ({exc}); pip install 'pjrtkit-rocm[vendor]'"
                                ) from None
    return hipblas, hip


def _check(hipblas, result, what: str):
    status = result[0] if isinstance(result, tuple) else result
    if status != hipblas.hipblasStatus_t.HIPBLAS_STATUS_SUCCESS:
        raise VendorUnavailable(f"{what} failed: {getattr(status, 'name', status)}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else None


def open_hipblas_handle(hipblas, stream):
    """A hipBLAS handle for the current device on ``stream`` (the driver's hipStream_t).
    Without ROCm the bindings fail to load libhipblas.so: that becomes "no hipBLAS library";
    any other failure "hipblasCreate failed"."""
    try:
        handle = _check(hipblas, hipblas.hipblasCreate(), "hipblasCreate")
    except VendorUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - "failed to dlopen 'libhipblas.so'" and alike
        text = str(exc)
        if "dlopen" in text:
            raise VendorUnavailable(f"no hipBLAS library (ROCm): {text}") from None
        raise VendorUnavailable(f"hipblasCreate failed: {type(exc).__name__}: {text}") from None
    try:
        _check(hipblas, hipblas.hipblasSetStream(handle, stream), "hipblasSetStream")
    except VendorUnavailable:
        hipblas.hipblasDestroy(handle)
        raise
    return handle


class HipLibraries(VendorLibraries):
    vendor = "hip"
    blas_name = "hipBLAS"

    def __init__(self, driver):
        super().__init__(driver)
        self._hipblas = self._hip = None
        self._handles: dict[int, object] = {}
        self._call_locks: dict[int, threading.Lock] = {}

    def _open(self, device_index):
        self._hipblas, self._hip = import_hipblas()
        if getattr(self.driver, "interprets", False):
            raise VendorUnavailable(f"no ROCm driver: the emulated driver "
                                    f"(PJRTKIT_GPU_EMULATE=1) keeps device memory on the host, "
                                    f"where {self.blas_name} cannot run")
        self.driver.use_device(device_index)
        self._handles[device_index] = open_hipblas_handle(self._hipblas,
                                                          self.driver.stream(device_index))
        self._call_locks[device_index] = threading.Lock()

    def _data_type(self, dtype):
        names = {D.FLOAT16: "HIP_R_16F", D.BFLOAT16: "HIP_R_16BF", D.FLOAT32: "HIP_R_32F",
                 D.FLOAT64: "HIP_R_64F"}
        return getattr(self._hip.hipDataType, names[dtype])

    def gemm(self, device_index, spec: GemmSpec, a, b, c):
        hipblas, call = self._hipblas, blas_gemm(spec)
        op = hipblas.hipblasOperation_t
        compute = (hipblas.hipblasComputeType_t.HIPBLAS_COMPUTE_64F if spec.dtype == D.FLOAT64
                   else hipblas.hipblasComputeType_t.HIPBLAS_COMPUTE_32F)
        scale = scaling_factors(spec)
        alpha, beta = scale.ctypes.data, scale.ctypes.data + scale.itemsize
        operand, result = self._data_type(spec.dtype), self._data_type(spec.out_dtype)
        with self._call_locks[device_index]:
            self.driver.use_device(device_index)
            status = hipblas.hipblasGemmStridedBatchedEx(
                self._handles[device_index],
                op.HIPBLAS_OP_T if call.transpose_first else op.HIPBLAS_OP_N,
                op.HIPBLAS_OP_T if call.transpose_second else op.HIPBLAS_OP_N,
                call.m, call.n, call.k, alpha,
                b, operand, call.ld_first, call.stride_first,
                a, operand, call.ld_second, call.stride_second,
                beta, c, result, call.ldc, call.stride_c, call.batch,
                compute, hipblas.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT)[0]
        if status != hipblas.hipblasStatus_t.HIPBLAS_STATUS_SUCCESS:
            raise Internal(f"pjrtkit_rocm: hipblasGemmStridedBatchedEx ({spec.dtype.name}, "
                           f"batch {spec.batch}, {spec.m}x{spec.k} @ {spec.k}x{spec.n}) "
                           f"failed: {getattr(status, 'name', status)}")
