"""Kernels of the pivoted linear-algebra primitives JAX lowers to LAPACK only on its own cpu
platform (``pjrtkit_cpu.jax_rules`` emits their custom calls):

- ``geqp3``: QR with column pivoting (LAPACK ?geqp3 through SciPy), every column free;
- ``tridiagonal_solve``: row-pivoted Gaussian elimination, LAPACK ?gtsv as XLA's CPU backend
  calls it (a singular system gives NaN); with ``perturb_singular``, the elimination of LAPACK's
  ?lagtf/?lagts, whose back substitution nudges tiny pivots by about eps * max|U| instead of
  failing (what jaxlib's CPU kernel computes; for inverse iteration on singular systems).

JAX's generic rule for tridiagonal_solve does not pivot and refuses ``perturb_singular``.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.semantics.dtypes import epsilon, float_limits

from pjrtkit_cpu.jax_rules import target
from pjrtkit_cpu.lowering.linalg import (
    LAPACK_DTYPES,
    backend_config,
    batched,
    config_flag,
    expect_matrices,
    failed,
    lapack,
    lapack_dtype,
    unsupported,
)
from pjrtkit_cpu.lowering.registry import RULES
from pjrtkit.lowering.registry import custom_call_rule


@RULES.register(custom_call_rule(target("geqp3")))
def lower_geqp3(op, ctx):
    expect_matrices(op, 2)
    if len(op.results) != 3:
        raise InvalidArgument(f"custom_call @{op.attributes.get('call_target_name')}: "
                              f"{len(op.results)} results; geqp3 returns a, jpvt and taus")
    dtype = lapack_dtype(op, ctx)
    geqp3 = lapack("geqp3", dtype)
    n = op.operands[0].type.shape[-1]
    name = op.attributes.get("call_target_name")

    def per_matrix(a, jpvt):
        if np.any(jpvt != 0):
            raise Unimplemented(f"@{name}: fixed columns (a nonzero jpvt) are not supported; "
                                f"SciPy's ?geqp3 treats every column as free")
        if a.size == 0:
            return a, np.arange(1, n + 1, dtype=jpvt.dtype), np.zeros(0, dtype)
        factors, pivots, taus, _work, info = geqp3(a)
        return None if failed(info) else (factors, pivots.astype(jpvt.dtype), taus)

    return batched(op, per_matrix)


@RULES.register(custom_call_rule(target("tridiagonal_solve")))
def lower_tridiagonal_solve(op, ctx):
    shapes = [v.type.shape for v in op.operands]
    if len(shapes) != 4 or len(shapes[3]) < 2 or any(s != shapes[3][:-1] for s in shapes[:3]) \
            or [r.type.shape for r in op.results] != [shapes[3]]:
        raise InvalidArgument(f"custom_call @{op.attributes.get('call_target_name')}: operands "
                              f"{shapes}; expected dl, d, du of shape (..., m) and b of shape "
                              f"(..., m, k), and one result shaped like b")
    dtype = op.operands[3].type.dtype
    if dtype not in LAPACK_DTYPES or any(v.type.dtype != dtype for v in op.operands):
        raise unsupported(op, ctx, f"{dtype.name} operands; the LAPACK kernels take float32, "
                                   f"float64, complex64 and complex128, all alike")
    perturb = config_flag(op, backend_config(op), "perturb_singular")
    gtsv = lapack("gtsv", dtype)
    batch, (m, k) = shapes[3][:-2], shapes[3][-2:]

    def solve(dl, d, du, b):
        if m == 0 or k == 0:
            return b.copy()
        if perturb:
            return solve_perturbed(dl, d, du, b)
        if m == 1:  # SciPy's wrapper refuses the empty off-diagonals
            return np.full_like(b, np.nan) if d[0] == 0 else b / d[0]
        *_, x, info = gtsv(dl[1:], d, du[:-1], b)
        return np.full_like(b, np.nan) if failed(info) else x

    def kernel(dl, d, du, b):
        out = np.empty(b.shape, dtype)
        for index in np.ndindex(*batch):
            out[index] = solve(dl[index], d[index], du[index], b[index])
        return (out,)

    return kernel


def solve_perturbed(dl, d, du, b) -> np.ndarray:
    """``T x = b`` for the tridiagonal ``T`` (``dl[i] = T[i, i-1]``, ``d[i] = T[i, i]``,
    ``du[i] = T[i, i+1]``): LU with the row interchanges ?lagtf chooses (by each row's size
    relative to its scale), then back substitution that perturbs tiny pivots."""
    eps = epsilon(d.dtype)  # of the real part for complex types
    largest, tiny = float_limits(d.dtype)
    # ?lamch's safe minimum: its reciprocal does not overflow.
    safemin = max(tiny, (1 / largest) * (1 + eps))
    n = d.shape[0]
    x = np.array(b, dtype=b.dtype)
    if n == 1:
        x[0] = _divide_by_pivot(d[0], x[0], eps * abs(d[0]), safemin)
        return x
    # u[:, 0..2]: U's diagonal and first and second superdiagonals.
    u = np.zeros((n, 3), d.dtype)
    u[0, 0], u[0, 1] = d[0], du[0]
    largest = max(abs(u[0, 0]), abs(u[0, 1]))
    scale = abs(u[0, 0]) + abs(u[0, 1])
    for k in range(n - 1):
        u[k + 1, 0] = d[k + 1]
        next_scale = abs(dl[k + 1]) + abs(u[k + 1, 0]) + (abs(du[k + 1]) if k < n - 2 else 0)
        if dl[k + 1] == 0:
            scale = next_scale
            u[k + 1, 1] = du[k + 1]
            u[k, 2] = 0
        else:
            stay = 0.0 if u[k, 0] == 0 else abs(u[k, 0]) / scale
            if abs(dl[k + 1]) / next_scale <= stay:
                factor = dl[k + 1] / u[k, 0]
                u[k + 1, 0] -= factor * u[k, 1]
                u[k + 1, 1] = du[k + 1]
                u[k, 2] = 0
                x[k + 1] = x[k + 1] - factor * x[k]
                scale = next_scale
            else:  # interchange rows k and k + 1
                factor = u[k, 0] / dl[k + 1]
                above = u[k, 1]
                u[k, 0] = dl[k + 1]
                u[k + 1, 0] = above - factor * d[k + 1]
                u[k, 1] = d[k + 1]
                if k < n - 2:
                    u[k, 2] = du[k + 1]
                    u[k + 1, 1] = -factor * du[k + 1]
                x[k], x[k + 1] = x[k + 1].copy(), x[k] - factor * x[k + 1]
                scale = abs(u[k + 1, 0]) + abs(u[k + 1, 1])
        if k < n - 2:
            largest = max(largest, *(abs(value) for value in u[k]))
    largest = max(largest, abs(u[n - 1, 0]))
    perturb = eps * largest
    for k in range(n - 1, -1, -1):
        row = x[k].copy()
        if k + 1 < n:
            row = row - u[k, 1] * x[k + 1]
        if k + 2 < n:
            row = row - u[k, 2] * x[k + 2]
        x[k] = _divide_by_pivot(u[k, 0], row, perturb, safemin)
    return x


def _divide_by_pivot(pivot, row: np.ndarray, perturb, safemin) -> np.ndarray:
    """``row / pivot`` once a pivot under 1 in size is nudged (by ``perturb``, doubling, in
    the direction of its real part) until neither ``1 / pivot`` nor ``row / pivot``
    overflows, or row and pivot are scaled up together when the pivot is merely tiny
    (?lagts's safeguard)."""
    bignum = 1 / safemin
    size = abs(pivot)
    if size < 1:
        step = np.copysign(max(abs(perturb), safemin), np.real(pivot))
        largest = float(np.max(np.abs(row))) if row.size else 0.0
        while size < 1:
            if size < safemin:
                if size == 0 or largest * safemin > size:
                    pivot, step = pivot + step, step * 2
                else:
                    pivot, row = pivot * bignum, row * bignum
                    break
            elif largest > size * bignum:
                pivot, step = pivot + step, step * 2
            else:
                break
            size = abs(pivot)
    one = np.ones((), row.dtype)
    return row * (one / np.asarray(pivot, row.dtype))
