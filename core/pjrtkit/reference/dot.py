"""dot_general and dot: contractions as one batched np.matmul so BLAS does the work.

The rule turns any dimension numbers into a fixed recipe: transpose lhs to (batch, free,
contracting) and rhs to (batch, contracting, free), flatten each group, matmul (B,M,K)@(B,K,N)
and reshape to the StableHLO result layout (batch..., lhs free..., rhs free...). Transposes and
flattening stay views whenever BLAS can read them (a transposed matrix is passed as is and
BLAS uses its transpose flag; attention's head-split operands keep their batch dimensions
apart rather than being copied to flatten them); only what BLAS cannot read is copied.
How many BLAS threads a contraction may use is the backend's policy, not semantics:
``contraction_rules(threads)`` builds the rules with one (the cpu plugin's widens big ones).

Numerics follow XLA's CPU backend: f16/bf16 contract in f32 and round once, float8/float4 too
(rounded through float16 where XLA computes them in float16); integers are exact
with wraparound in the result type (a ring homomorphism, so any wider exact accumulator works);
bool is OR of ANDs; complex contracts in the result's precision (complex64 or complex128)
with BLAS's cgemm/zgemm, like XLA's complex GEMM.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np

from pjrtkit.stablehlo.attributes import DotDimensionNumbers, OpaqueAttribute
from pjrtkit.semantics.dtypes import (BFLOAT16, FLOAT16, NARROW_FLOATS, NARROW_INTS, compute_dtype,
                                      int_range, is_signed)
from pjrtkit.reference.registry import REFERENCE

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_C64 = np.dtype(np.complex64)
_C128 = np.dtype(np.complex128)
_NARROW_FLOATS = NARROW_FLOATS  # float16, bfloat16, every float8 and float4 type

# Algorithms that mean exactly what the default lowering computes for these operand dtypes.
_ALGORITHM_FIELDS = re.compile(r"(lhs_precision_type|rhs_precision_type|accumulation_type|"
                               r"lhs_component_count|rhs_component_count|"
                               r"num_primitive_operations)\s*=\s*(\w+)")
_MLIR_FLOAT = {"f16": FLOAT16, "bf16": BFLOAT16, "f32": _F32,
               "f64": _F64}


def _kind(dtype: np.dtype) -> str:
    """NumPy's kind letter, with int2/int4 ("i") and uint2/uint4 ("u") told apart from "V"."""
    if dtype in NARROW_INTS:
        return "i" if is_signed(dtype) else "u"
    return dtype.kind


def _compute_dtype(lhs: np.dtype, rhs: np.dtype, result: np.dtype, contracted: int):
    """The dtype the matmul runs in, or None when no exact/faithful choice exists."""
    kinds = {_kind(lhs), _kind(rhs), _kind(result)}
    if result.kind == "c":
        # XLA's CPU backend multiplies complex matrices in the result's precision (Eigen's
        # complex GEMM); complex128 when anything involved is 64-bit wide.
        return _C128 if {_C128, _F64} & {lhs, rhs, result} else _C64
    if result.kind == "f" or result in _NARROW_FLOATS:
        if _F64 in (lhs, rhs, result):
            return _F64
        return _F32
    if result.kind == "b" and kinds == {"b"}:
        return _F64  # counts of true products; compared with 0 afterwards
    if kinds <= {"b", "i", "u"}:
        # Float64 BLAS is exact while |sum| < 2**53; use it for narrow operands, else int64
        # (NumPy's integer matmul wraps mod 2**64, which is exact mod 2**k for any k <= 64).
        bound = max(_magnitude(lhs), 1) * max(_magnitude(rhs), 1) * max(contracted, 1)
        return _F64 if bound < 2 ** 53 else np.dtype(np.int64)
    return None


def _magnitude(dtype: np.dtype) -> int:
    if dtype.kind == "b":
        return 1
    low, high = int_range(dtype)
    return max(abs(low), high)


_BF16 = BFLOAT16
# (lhs, rhs component counts, primitive operations) of BF16_BF16_F32, its _X3 and its _X6.
_BF16_SPLITS = {("1", "1", "1"), ("1", "1", "3"), ("1", "1", "6")}


def _algorithm_compute(op, ctx, compute: np.dtype, lhs: np.dtype, rhs: np.dtype) -> np.dtype:
    """The dtype the contraction runs in under the op's dot algorithm, as XLA's CPU backend
    runs it; UNIMPLEMENTED for an algorithm it does not run.

    XLA's CPU backend accepts (jax 0.10.2 to 0.12, measured against float64): the algorithm
    that names the default for the operand dtypes (accumulating in the compute or the result
    type); BF16_BF16_F32 and its X3/X6 splits, which
    it computes as a plain float32 contraction (as accurate as F32_F32_F32, so at least as
    accurate as the algorithm asks; attention in jax.nn uses BF16_BF16_F32 on float32 x
    bfloat16 operands); F32_F32_F32; and F64_F64_F64, which contracts in float64 and rounds
    once to the result type."""
    algorithm = op.attributes.get("algorithm")
    if algorithm is None:
        return compute
    fields = dict(_ALGORITHM_FIELDS.findall(algorithm.text)) \
        if isinstance(algorithm, OpaqueAttribute) else {}
    lhs_p, rhs_p, accumulate = (_MLIR_FLOAT.get(fields.get(name)) for name in (
        "lhs_precision_type", "rhs_precision_type", "accumulation_type"))
    counts = tuple(fields.get(name) for name in (
        "lhs_component_count", "rhs_component_count", "num_primitive_operations"))
    floats = {lhs.kind, rhs.kind} == {"f"} or {lhs, rhs} <= {_F32, _F64, np.dtype(np.float16),
                                                             _BF16}
    result = op.results[0].type.dtype
    if (lhs_p, rhs_p) == (lhs, rhs) and accumulate in (compute, result) \
            and counts == ("1", "1", "1"):
        # The default, spelled out: accumulating in the compute type, or in the result type
        # (F16_F16_F16 on float16, which XLA's CPU computes exactly as the default float16
        # dot: in float32, rounded once; measured bit for bit).
        return compute
    if floats and compute == _F32 and accumulate == _F32:
        if lhs_p == rhs_p == _BF16 and counts in _BF16_SPLITS:
            return _F32
        if lhs_p == rhs_p == _F32 and counts == ("1", "1", "1"):
            return _F32
    if floats and lhs_p == rhs_p == accumulate == _F64 and counts == ("1", "1", "1") \
            and compute in (_F32, _F64):
        return _F64
    raise ctx.unimplemented(op, f"dot algorithm {algorithm} on {lhs.name} x {rhs.name} "
                                f"(implemented: the default for the operand dtypes, "
                                f"BF16_BF16_F32[_X3|_X6], F32_F32_F32, F64_F64_F64)")


# A backend's thread policy for one contraction: ``threads(flops, flops_per_blas_call)`` at
# compile time gives None (run as is) or a factory of the context manager each run enters
# around its BLAS calls.
ThreadPolicy = Callable[[float, float], Callable[[], AbstractContextManager] | None]


def _lower(op, ctx, dims: DotDimensionNumbers, threads: ThreadPolicy | None):
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    result_t = op.results[0].type
    lb, rb = list(dims.lhs_batching_dimensions), list(dims.rhs_batching_dimensions)
    lc, rc = list(dims.lhs_contracting_dimensions), list(dims.rhs_contracting_dimensions)
    lf, rf = dims.free_dimensions(lhs_t.rank, rhs_t.rank)

    def size(shape, ds):
        return math.prod(shape[d] for d in ds)

    batch, m = size(lhs_t.shape, lb), size(lhs_t.shape, lf)
    k, n = size(lhs_t.shape, lc), size(rhs_t.shape, rf)
    compute = _compute_dtype(lhs_t.dtype, rhs_t.dtype, result_t.dtype, k)
    if compute is None:
        raise ctx.unimplemented(op, f"dot of {lhs_t.dtype.name} x {rhs_t.dtype.name} -> "
                                    f"{result_t.dtype.name}")
    compute = _algorithm_compute(op, ctx, compute, lhs_t.dtype, rhs_t.dtype)

    lhs_perm = tuple(lb + lf + lc)
    rhs_perm = tuple(rb + rc + rf)
    lhs_identity = lhs_perm == tuple(range(lhs_t.rank))
    rhs_identity = rhs_perm == tuple(range(rhs_t.rank))
    out_shape, out_dtype = result_t.shape, result_t.dtype
    if compute == np.dtype(np.int64) and k < 2 ** 21:
        contract = _limb_matmul(8 * out_dtype.itemsize)
        compute = np.dtype(np.uint64)
    else:
        contract = np.matmul
    lhs_cast = lhs_t.dtype != compute
    rhs_cast = rhs_t.dtype != compute
    to_bool = out_dtype.kind == "b"
    # XLA rounds a float32 result to float8/float4 through its compute type (float16 for most)
    via_compute = compute_dtype(out_dtype) if out_dtype in _NARROW_FLOATS \
        and compute_dtype(out_dtype) != compute else None
    # Float results go straight from compute to result dtype (one rounding); integer results
    # computed in float64 pass through int64 so the final cast wraps instead of saturating.
    via_int64 = _kind(out_dtype) in "iu" and compute == _F64
    flops = 2.0 * batch * m * n * k
    # Leading dimensions of the matmul: the batch dims flattened (or none), else kept apart;
    # np.matmul loops over them in C and calls BLAS once per (M,K)@(K,N) pair.
    flat_lead = (batch,) if lb else ()
    batch_shape = tuple(lhs_t.shape[d] for d in lb)
    widen = threads(flops, flops / max(batch, 1)) if threads is not None else None

    def kernel(lhs, rhs):
        if not lhs_identity:
            lhs = np.transpose(lhs, lhs_perm)
        if not rhs_identity:
            rhs = np.transpose(rhs, rhs_perm)
        # order="C" makes the cast copy land in the permuted layout, so reshape is a view.
        if lhs_cast:
            lhs = lhs.astype(compute, order="C")
        if rhs_cast:
            rhs = rhs.astype(compute, order="C")
        lhs, rhs = _operands(lhs, rhs, flat_lead, batch_shape, m, k, n)
        if widen is not None:
            with widen():
                product = contract(lhs, rhs)
        else:
            product = contract(lhs, rhs)
        if to_bool:
            return ((product > 0).reshape(out_shape),)
        if via_int64:
            product = product.astype(np.int64)
        elif via_compute is not None:
            product = product.astype(via_compute)
        return (product.reshape(out_shape).astype(out_dtype, copy=False),)

    return kernel


def _operands(lhs, rhs, flat_lead, batch_shape, m, k, n):
    """(..., M, K) and (..., K, N) views of the permuted operands, copying only when no view
    exists or BLAS could not read the view (it takes any row or column stride, so transposed
    operands go in as they are, with BLAS's transpose flags)."""
    a, b = _view(lhs, (*flat_lead, m, k)), _view(rhs, (*flat_lead, k, n))
    if (a is None or b is None) and len(batch_shape) > 1:
        # e.g. attention's heads: (B, T, H, D) transposed to (B, H, T, D) cannot flatten
        # (B, H) without a copy, but every (T, D) matrix is readable in place.
        kept = _view(lhs, (*batch_shape, m, k)), _view(rhs, (*batch_shape, k, n))
        if kept[0] is not None and kept[1] is not None:
            return kept
    if a is None:
        a = np.ascontiguousarray(lhs).reshape(*flat_lead, m, k)
    if b is None:
        b = np.ascontiguousarray(rhs).reshape(*flat_lead, k, n)
    return a, b


def _view(x, shape):
    """x reshaped to ``shape`` without a copy, if its matrices are BLAS-readable; else None."""
    try:
        x = np.reshape(x, shape, copy=False)
    except ValueError:
        return None
    rows, cols = shape[-2], shape[-1]
    row_stride, col_stride = x.strides[-2:]
    size = x.itemsize
    if rows <= 1 or cols <= 1 or (col_stride == size and row_stride >= cols * size) \
            or (row_stride == size and col_stride >= rows * size):
        return x
    return None


def _limb_matmul(width: int):
    """Exact integer matmul modulo 2**width on float64 BLAS.

    Operands arrive as uint64 residues; each is cut into 16-bit limbs so every limb product is
    below 2**32 and a contraction of fewer than 2**21 of them is exact in float64. Limb pairs
    whose shift reaches ``width`` vanish modulo 2**width and are skipped (3 matmuls for 32-bit
    results, 10 for 64-bit), which beats NumPy's non-BLAS integer matmul by far.
    """
    limbs = -(-width // 16)
    mask = np.uint64(0xFFFF)

    def split(x):
        return [((x >> np.uint64(16 * i)) & mask).astype(_F64) for i in range(limbs)]

    def contract(lhs, rhs):
        lhs_limbs, rhs_limbs = split(lhs), split(rhs)
        total = None
        for i in range(limbs):
            for j in range(limbs - i):
                part = np.matmul(lhs_limbs[i], rhs_limbs[j]).astype(np.uint64)
                if i + j:
                    part <<= np.uint64(16 * (i + j))
                total = part if total is None else np.add(total, part, out=total)
        return total

    return contract


def contraction_rules(threads: ThreadPolicy | None = None):
    """The rules of ``stablehlo.dot_general`` and ``stablehlo.dot``: ``(dot_general, dot)``,
    whose kernels run their matmuls under ``threads`` (see ``ThreadPolicy``; None: as is)."""

    def dot_general(op, ctx):
        return _lower(op, ctx, op.attributes["dot_dimension_numbers"], threads)

    def dot(op, ctx):
        lhs_rank = op.operands[0].type.rank
        return _lower(op, ctx, DotDimensionNumbers((), (), (lhs_rank - 1,), (0,)), threads)

    return dot_general, dot


dot_general, dot = contraction_rules()
REFERENCE.register("stablehlo.dot_general")(dot_general)
REFERENCE.register("stablehlo.dot")(dot)
