"""The interface every vendor's libraries implement (``VendorLibraries``), and what both share:
the gemm a dot asks for (``GemmSpec``, row-major, as the Triton matmul reads its operands) and
its translation into a column-major BLAS call (``BlasGemm``).

A ``VendorLibraries`` belongs to one driver (a process has one per vendor) and answers, once
per device, whether it can run there (``availability``); its operations take device pointers
of the driver's buffers and enqueue on the driver's stream of that device, so they are ordered
with the Triton launches around them exactly as another launch would be.
"""
from __future__ import annotations

import abc
import dataclasses
import threading
from typing import NamedTuple

import numpy as np

from pjrtkit_gpu import dtypes as D

# BLAS sizes, leading dimensions and batch counts are C ints.
_INT_MAX = 2**31 - 1

# (operand dtype, result dtype) pairs a gemm takes: the Triton matmul's float pairs (float32
# accumulation, one rounding to the result) and float64.
GEMM_DTYPES = frozenset({(D.FLOAT16, D.FLOAT16), (D.FLOAT16, D.FLOAT32),
                         (D.BFLOAT16, D.BFLOAT16), (D.BFLOAT16, D.FLOAT32),
                         (D.FLOAT32, D.FLOAT32), (D.FLOAT64, D.FLOAT64)})


class Availability(NamedTuple):
    """Whether a vendor's libraries run on a device, and if not, why (the first thing
    missing: the Python bindings, a real driver, the library or its handle)."""

    available: bool
    reason: str


class VendorUnavailable(Exception):
    """Raised inside the implementations while probing; ``availability`` turns it into its
    reason. Its message says what is missing."""


@dataclasses.dataclass(frozen=True)
class GemmSpec:
    """``C[b] = A[b] @ B[b]`` for ``b < batch``, C row-major (batch, m, n) and contiguous.
    A is (m, k): not transposed, element (i, p) is at ``b * a_batch_stride + i *
    a_major_stride + p``; transposed, at ``... + i + p * a_major_stride``. B is (k, n) alike
    (major stride between rows of k, or between columns when transposed). Strides in
    elements: exactly how ``lowering/dot.py`` hands the Triton matmul its operands."""

    dtype: np.dtype
    out_dtype: np.dtype
    batch: int
    m: int
    n: int
    k: int
    a_transposed: bool
    a_batch_stride: int
    a_major_stride: int
    b_transposed: bool
    b_batch_stride: int
    b_major_stride: int


@dataclasses.dataclass(frozen=True)
class BlasGemm:
    """One column-major strided batched gemm computing a ``GemmSpec``. A row-major C is a
    column-major C^T = B^T A^T, so the BLAS's first operand is the spec's B and its second the
    spec's A; each is read untransposed (``OP_N``) when it lies row-major, transposed when it
    lies column-major."""

    transpose_first: bool   # op of the first BLAS operand (the spec's B)
    transpose_second: bool  # op of the second (the spec's A)
    m: int                  # the spec's n
    n: int                  # the spec's m
    k: int
    ld_first: int
    stride_first: int
    ld_second: int
    stride_second: int
    ldc: int
    stride_c: int
    batch: int


def _leading_dimension(major: int, rows: int, columns: int) -> int | None:
    """A column-major matrix of ``rows`` x ``columns`` whose columns start ``major`` apart:
    its BLAS leading dimension, which must be at least ``rows``. With one column the stride
    between columns is never used (the Triton side reports 0 for it), so any valid value
    does; otherwise None when the layout is not one a BLAS takes."""
    if columns <= 1:
        return max(major, rows, 1)
    return major if major >= max(rows, 1) else None


def blas_gemm(spec: GemmSpec) -> BlasGemm | None:
    """The BLAS call for ``spec``, or None when a BLAS cannot take it (a layout whose leading
    dimension is too small, a size past a C int, an empty contraction, whose zero result the
    Triton path writes)."""
    if spec.k == 0 or min(spec.batch, spec.m, spec.n) <= 0:
        return None
    # The spec's B: untransposed it is column-major n x k (rows of B are its columns).
    first = (_leading_dimension(spec.b_major_stride, spec.k, spec.n) if spec.b_transposed
             else _leading_dimension(spec.b_major_stride, spec.n, spec.k))
    second = (_leading_dimension(spec.a_major_stride, spec.m, spec.k) if spec.a_transposed
              else _leading_dimension(spec.a_major_stride, spec.k, spec.m))
    if first is None or second is None:
        return None
    if max(spec.batch, spec.m, spec.n, spec.k, first, second) > _INT_MAX:
        return None
    return BlasGemm(transpose_first=spec.b_transposed, transpose_second=spec.a_transposed,
                    m=spec.n, n=spec.m, k=spec.k,
                    ld_first=first, stride_first=spec.b_batch_stride if spec.batch > 1 else 0,
                    ld_second=second, stride_second=spec.a_batch_stride if spec.batch > 1 else 0,
                    ldc=spec.n, stride_c=spec.m * spec.n, batch=spec.batch)


def scaling_factors(spec: GemmSpec) -> np.ndarray:
    """Host ``[alpha, beta] = [1, 0]`` in the compute type (float64 for float64, else
    float32); the array must outlive the call that reads it."""
    return np.array([1.0, 0.0], dtype=np.float64 if spec.dtype == D.FLOAT64 else np.float32)


class VendorLibraries(abc.ABC):
    """One vendor's libraries on one driver. ``availability`` is decided once per device
    (the first call probes: imports, the driver's kind, a library handle on the device's
    stream) and cached; the operations are called only where it said available."""

    vendor: str
    # The library a dot goes through, for messages ("cuBLAS").
    blas_name: str

    def __init__(self, driver):
        self.driver = driver
        self._availability: dict[int, Availability] = {}
        self._lock = threading.Lock()

    def availability(self, device_index: int) -> Availability:
        with self._lock:
            known = self._availability.get(device_index)
            if known is None:
                try:
                    self._open(device_index)
                    known = Availability(True, f"{self.blas_name} on device {device_index}")
                except VendorUnavailable as exc:
                    known = Availability(False, str(exc))
                self._availability[device_index] = known
            return known

    def supports_gemm(self, spec: GemmSpec) -> bool:
        """Whether ``gemm`` takes ``spec`` (its dtypes and layout), wherever it is available."""
        return (spec.dtype, spec.out_dtype) in GEMM_DTYPES and blas_gemm(spec) is not None

    @abc.abstractmethod
    def _open(self, device_index: int) -> None:
        """Import the bindings, check the driver is a real one, make the device's handle on
        its stream; raise ``VendorUnavailable`` saying what is missing."""

    @abc.abstractmethod
    def gemm(self, device_index: int, spec: GemmSpec, a: int, b: int, c: int) -> None:
        """Enqueue ``spec`` on the device's stream: ``a``, ``b``, ``c`` device pointers
        (``c`` holds batch * m * n elements of ``spec.out_dtype``)."""
