"""``stablehlo.cholesky`` and ``stablehlo.triangular_solve`` as loops of dot, dynamic slices
and while, for a backend without linear-algebra kernels. (QR's custom calls:
``pjrtkit.expansions.linalg_qr``.)

Operands are batches of matrices, batch dimensions leading; every loop runs over the whole
batch at once. Each step works on full-width rows and columns with the entries outside the
triangle masked to zero, so no shape depends on the loop index.

- cholesky: left-looking, one column per step: ``c = A[:, j] - L L[j, :]^H`` (the columns of
  ``L`` not yet computed are zero), ``L[j, j] = sqrt(c_j)``, ``L[i > j, j] = c_i / L[j, j]``.
  As XLA's CPU backend (LAPACK's potrf, then NaN where it reports failure): a matrix with a
  pivot that is not positive (or NaN) comes back all NaN; the other triangle is zero.
  ``lower = false`` factors the adjoint and returns the adjoint of that factor.
- triangular_solve: every ``left_side``/``lower``/``transpose_a``/``unit_diagonal``
  combination reduces to ``A' X = B`` with ``A'`` lower (forward substitution) or upper
  (backward), one row per step: ``X[i] = (B[i] - A'[i, :] X) / A'[i, i]``. The right side
  solves the transposed system; ``transpose_a`` materializes ``A^T`` or ``A^H``. Only the
  triangle named by ``lower`` is read (and not the diagonal when ``unit_diagonal``); a zero
  pivot gives inf/NaN as trsm does.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import InvalidArgument
from pjrtkit.expansions.builder import Builder, real_dtype

INDEX = np.int32


# -- helpers every decomposition uses -------------------------------------------------------

def batch_shape(value) -> tuple[int, ...]:
    return value.type.shape[:-2]


def is_complex(value) -> bool:
    return value.type.dtype.kind == "c"


def conj(b: Builder, x):
    return b.complex(b.real(x), b.negate(b.imag(x))) if is_complex(x) else x


def transpose_matrices(b: Builder, x):
    rank = x.type.rank
    return b.transpose(x, [*range(rank - 2), rank - 1, rank - 2])


def adjoint(b: Builder, x):
    return conj(b, transpose_matrices(b, x))


def matmul(b: Builder, x, y):
    """Batched ``x @ y`` over matrices (batch dimensions leading, equal)."""
    batch = tuple(range(x.type.rank - 2))
    return b.dot(x, y, contract=((x.type.rank - 1,), (y.type.rank - 2,)), batch=(batch, batch))


def expand_to(b: Builder, x, shape):
    """``x`` (same rank, dimensions 1 or equal) broadcast to ``shape``."""
    return b.broadcast(x, shape, range(len(shape)))


def index_grid(b: Builder, shape, dimension: int):
    """int32 iota of ``shape`` along ``dimension``."""
    return b.iota(shape, INDEX, dimension)


def scalar_grid(b: Builder, scalar, shape):
    """An int32 scalar broadcast to ``shape``."""
    return b.broadcast(scalar, shape, ())


def starts(b: Builder, rank: int, **at):
    """Start indices for a dynamic slice: zero except the dimensions given (negative from the
    end: ``starts(b, 4, d_2=i)`` means dimension rank-2 starts at value ``i``)."""
    zero = b.constant(0, INDEX)
    out = [zero] * rank
    for key, value in at.items():
        out[rank - int(key[2:])] = value
    return out


def to_dtype_of(b: Builder, real_value, like):
    """A real value as ``like``'s dtype (complex with zero imaginary part when complex)."""
    if like.type.dtype.kind == "c":
        return b.complex(real_value, b.constant(0, real_value.type.dtype, real_value.type.shape))
    return b.convert(real_value, like.type.dtype)


def triangle_mask(b: Builder, shape, *, lower: bool, diagonal: bool):
    """bool mask of ``shape`` (..., m, n): the lower (or upper) triangle, with or without the
    diagonal."""
    rank = len(shape)
    rows, cols = index_grid(b, shape, rank - 2), index_grid(b, shape, rank - 1)
    direction = ("GE" if diagonal else "GT") if lower else ("LE" if diagonal else "LT")
    return b.compare(rows, cols, direction)


def nan_unless(b: Builder, ok, x):
    """``x`` where ``ok`` (shape (*batch, 1, 1)), NaN elsewhere."""
    shape = x.type.shape
    nan = b.constant(np.nan, real_dtype(x.type.dtype), shape)
    return b.select(expand_to(b, ok, shape), x, to_dtype_of(b, nan, x))


# -- cholesky ------------------------------------------------------------------------------------

def expand_cholesky(op, program=None) -> list:
    del program
    (a,), (result,) = op.operands, op.results
    _expect_square(op, a)
    b = Builder(op.location)
    if a.type.size == 0:
        return b.finish([b.constant(0, a.type.dtype, a.type.shape)], [result])
    lower = bool(op.attributes.get("lower", False))
    factor = cholesky_lower(b, a if lower else adjoint(b, a))
    return b.finish([factor if lower else adjoint(b, factor)], [result])


def cholesky_lower(b: Builder, a):
    """L with L L^H = A, from A's lower triangle; all NaN where A is not positive definite."""
    shape = a.type.shape
    rank, n = len(shape), shape[-1]
    batch = shape[:-2]
    real = real_dtype(a.type.dtype)
    rows = index_grid(b, (*batch, n, 1), rank - 2)

    def step(s: Builder, j, values):
        factor, ok = values
        column = s.dynamic_slice(a, starts(s, rank, d_1=j), (*batch, n, 1))
        row = s.dynamic_slice(factor, starts(s, rank, d_2=j), (*batch, 1, n))
        c = s.subtract(column, matmul(s, factor, adjoint(s, row)))
        pivot = s.dynamic_slice(c, starts(s, rank, d_2=j), (*batch, 1, 1))
        pivot = s.real(pivot) if is_complex(pivot) else pivot
        ok = s.and_(ok, s.compare(pivot, s.constant(0, real, pivot.type.shape), "GT"))
        root = s.sqrt(pivot)
        scaled = s.divide(c, expand_to(s, to_dtype_of(s, root, c), c.type.shape))
        j_grid = scalar_grid(s, j, rows.type.shape)
        new = s.select(s.compare(rows, j_grid, "GT"), scaled,
                       s.select(s.compare(rows, j_grid, "EQ"),
                                expand_to(s, to_dtype_of(s, root, c), c.type.shape),
                                s.constant(0, c.type.dtype, c.type.shape)))
        return [s.dynamic_update_slice(factor, new, starts(s, rank, d_1=j)), ok]

    zeros = b.constant(0, a.type.dtype, shape)
    ok = b.constant(True, np.bool_, (*batch, 1, 1))
    factor, ok = b.counted_loop(n, [zeros, ok], step)
    return nan_unless(b, ok, factor)


# -- triangular_solve ----------------------------------------------------------------------------

_TRANSPOSES = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def expand_triangular_solve(op, program=None) -> list:
    del program
    a, rhs = op.operands
    (result,) = op.results
    _expect_square(op, a)
    attributes = op.attributes
    transpose = str(attributes.get("transpose_a", "NO_TRANSPOSE"))
    if transpose not in _TRANSPOSES:
        raise InvalidArgument(f"stablehlo.triangular_solve: transpose_a {transpose} is not one "
                              f"of {_TRANSPOSES}")
    left = bool(attributes.get("left_side", False))
    m = a.type.shape[-1]
    if rhs.type.shape[-2 if left else -1] != m or rhs.type.shape[:-2] != a.type.shape[:-2]:
        raise InvalidArgument(f"stablehlo.triangular_solve: a {a.type} and b {rhs.type} do not "
                              f"agree (left_side={left})")
    b = Builder(op.location)
    if rhs.type.size == 0:
        return b.finish([b.constant(0, rhs.type.dtype, rhs.type.shape)], [result])
    solution = triangular_solve(b, a, rhs, left=left, lower=bool(attributes.get("lower", False)),
                                transpose=transpose,
                                unit_diagonal=bool(attributes.get("unit_diagonal", False)))
    return b.finish([solution], [result])


def triangular_solve(b: Builder, a, rhs, *, left: bool, lower: bool, transpose: str,
                     unit_diagonal: bool):
    """X with op(A) X = B (``left``) or X op(A) = B, A triangular (see the module doc)."""
    # Only the named triangle is read: the rest (and the diagonal when it is unit) is zero.
    a = b.select(triangle_mask(b, a.type.shape, lower=lower, diagonal=not unit_diagonal), a,
                 b.constant(0, a.type.dtype, a.type.shape))
    conjugate = False
    if not left:  # X op(A) = B  <=>  op(A)^T X^T = B^T
        rhs = transpose_matrices(b, rhs)
        transpose, conjugate = {"NO_TRANSPOSE": ("TRANSPOSE", False),
                                "TRANSPOSE": ("NO_TRANSPOSE", False),
                                "ADJOINT": ("NO_TRANSPOSE", True)}[transpose]
    if transpose != "NO_TRANSPOSE":
        a = transpose_matrices(b, a)
        lower = not lower
        conjugate = transpose == "ADJOINT"
    if conjugate:
        a = conj(b, a)
    solution = _substitute(b, a, rhs, lower=lower, unit_diagonal=unit_diagonal)
    return solution if left else transpose_matrices(b, solution)


def _substitute(b: Builder, a, rhs, *, lower: bool, unit_diagonal: bool):
    """X with A X = B, A (masked) lower or upper triangular: forward or backward
    substitution, one row of X per step (rows not yet solved are zero, so the full row of A
    times X is the sum over the solved ones)."""
    shape = rhs.type.shape
    rank, m = len(shape), a.type.shape[-1]
    batch, columns = shape[:-2], shape[-1]
    diagonal = None
    if not unit_diagonal:
        eye = b.compare(index_grid(b, a.type.shape, rank - 2),
                        index_grid(b, a.type.shape, rank - 1), "EQ")
        diagonal = b.sum(b.select(eye, a, b.constant(0, a.type.dtype, a.type.shape)), (rank - 1,))
        diagonal = b.reshape(diagonal, (*batch, m, 1))

    def step(s: Builder, t, values):
        (solution,) = values
        i = t if lower else s.subtract(s.constant(m - 1, INDEX), t)
        a_row = s.dynamic_slice(a, starts(s, rank, d_2=i), (*batch, 1, m))
        b_row = s.dynamic_slice(rhs, starts(s, rank, d_2=i), (*batch, 1, columns))
        row = s.subtract(b_row, matmul(s, a_row, solution))
        if diagonal is not None:
            pivot = s.dynamic_slice(diagonal, starts(s, rank, d_2=i), (*batch, 1, 1))
            row = s.divide(row, expand_to(s, pivot, row.type.shape))
        return [s.dynamic_update_slice(solution, row, starts(s, rank, d_2=i))]

    (solution,) = b.counted_loop(m, [b.constant(0, rhs.type.dtype, shape)], step)
    return solution


def _expect_square(op, a) -> None:
    if a.type.rank < 2 or a.type.shape[-1] != a.type.shape[-2]:
        raise InvalidArgument(f"{op.name}: operand {a.type} is not a batch of square matrices")


EXPANSIONS = {
    "stablehlo.cholesky": expand_cholesky,
    "stablehlo.triangular_solve": expand_triangular_solve,
}
