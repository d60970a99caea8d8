"""JAX's QR custom calls as loops of dot, dynamic slices and while: ``custom_call @Qr``
(``lax.linalg.geqrf``: Householder QR in LAPACK's packed form) and ``custom_call
@ProductOfElementaryHouseholderReflectors`` (``householder_product``, LAPACK's orgqr/ungqr).
JAX emits both on every platform without a QR kernel of its own (``jnp.linalg.qr``,
``jax.scipy.linalg.qr``); JAX's default lowering of ormqr is built on them too.

``Qr``: for each column j < min(m, n), LAPACK's reflector (xLARFG): with ``alpha = A[j, j]``
and ``x = A[j+1:, j]``, ``beta = -sign(Re alpha) * ||(alpha, x)||``, ``tau = (beta - alpha) /
beta``, ``v = (1, x / (alpha - beta))``; no reflection (``tau = 0``) when ``x`` is zero and
``alpha`` real. The columns right of j are multiplied by ``H^H = I - conj(tau) v v^H``;
column j becomes ``beta`` on the diagonal and ``v`` below it. Results: the packed matrix and
the ``taus``, as LAPACK's geqrf gives them.

``ProductOfElementaryHouseholderReflectors``: ``Q = H_0 H_1 ... H_(k-1)`` applied to the first
``n`` columns of the identity, last reflector first, ``H_i = I - tau_i v_i v_i^H``.
"""
from __future__ import annotations


from pjrtkit.errors import InvalidArgument
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.expansions.builder import Builder, real_dtype
from pjrtkit.expansions.linalg import (INDEX, adjoint, batch_shape, conj, expand_to,
                                       index_grid, is_complex, matmul, scalar_grid, starts,
                                       to_dtype_of)


def expand_qr(op, program=None) -> list:
    """``custom_call @Qr``: (a) -> (packed reflectors and R, taus)."""
    del program
    (a,) = op.operands
    if len(op.results) != 2 or a.type.rank < 2:
        raise InvalidArgument(f"custom_call @Qr takes a batch of matrices and returns the "
                              f"packed factors and the taus: {op.describe()}")
    packed_result, taus_result = op.results
    m, n = a.type.shape[-2:]
    k = min(m, n)
    batch = batch_shape(a)
    if packed_result.type != a.type or taus_result.type.shape != (*batch, k):
        raise InvalidArgument(f"custom_call @Qr: result types do not match the operand: "
                              f"{op.describe()}")
    b = Builder(op.location)
    if a.type.size == 0:
        return b.finish([b.constant(0, a.type.dtype, a.type.shape),
                         b.constant(0, a.type.dtype, (*batch, k))], [packed_result, taus_result])
    packed, taus = householder_qr(b, a)
    return b.finish([packed, taus], [packed_result, taus_result])


def householder_qr(b: Builder, a):
    """(packed, taus) of LAPACK's geqrf for the batch of matrices ``a``."""
    shape = a.type.shape
    rank, (m, n) = len(shape), shape[-2:]
    batch, k = shape[:-2], min(m, n)
    dtype, real = a.type.dtype, real_dtype(a.type.dtype)
    rows = index_grid(b, (*batch, m, 1), rank - 2)
    columns = index_grid(b, shape, rank - 1)
    one_by_one = (*batch, 1, 1)

    def step(s: Builder, j, values):
        packed, taus = values
        column = s.dynamic_slice(packed, starts(s, rank, d_1=j), (*batch, m, 1))
        alpha = s.dynamic_slice(column, starts(s, rank, d_2=j), one_by_one)
        j_rows = scalar_grid(s, j, rows.type.shape)
        below = s.compare(rows, j_rows, "GT")
        zero_column = s.constant(0, dtype, column.type.shape)
        x = s.select(below, column, zero_column)
        x_norm2 = s.reshape(s.sum(_abs2(s, x), (rank - 2,)), one_by_one)
        alpha_re = s.real(alpha) if is_complex(alpha) else alpha
        alpha_im = s.imag(alpha) if is_complex(alpha) else s.constant(0, real, one_by_one)
        zero = s.constant(0, real, one_by_one)
        trivial = s.and_(s.compare(x_norm2, zero, "EQ"), s.compare(alpha_im, zero, "EQ"))
        norm = s.sqrt(s.add(s.add(s.multiply(alpha_re, alpha_re), s.multiply(alpha_im, alpha_im)),
                            x_norm2))
        beta = s.select(s.compare(alpha_re, zero, "GE"), s.negate(norm), norm)
        beta = s.select(trivial, alpha_re, beta)
        safe_beta = s.select(trivial, s.constant(1, real, one_by_one), beta)
        beta_d = to_dtype_of(s, beta, alpha)
        tau = s.divide(s.subtract(to_dtype_of(s, safe_beta, alpha), alpha),
                    to_dtype_of(s, safe_beta, alpha))
        tau = s.select(trivial, s.constant(0, dtype, one_by_one), tau)
        denominator = s.subtract(alpha, beta_d)
        denominator = s.select(trivial, s.constant(1, dtype, one_by_one), denominator)
        v = s.select(below, s.divide(x, expand_to(s, denominator, x.type.shape)),
                     s.select(s.compare(rows, j_rows, "EQ"), s.constant(1, dtype, column.type.shape),
                              zero_column))
        # Columns right of j: A <- A - conj(tau) v (v^H A).
        update = matmul(s, v, matmul(s, adjoint(s, v), packed))
        update = s.multiply(expand_to(s, conj(s, tau), shape), update)
        j_columns = scalar_grid(s, j, shape)
        right = s.compare(columns, j_columns, "GT")
        packed = s.select(right, s.subtract(packed, update), packed)
        new_column = s.select(below, v, s.select(s.compare(rows, j_rows, "EQ"),
                                                 expand_to(s, beta_d, column.type.shape),
                                                 column))
        packed = s.dynamic_update_slice(packed, new_column, starts(s, rank, d_1=j))
        taus = s.dynamic_update_slice(taus, s.reshape(tau, (*batch, 1)),
                                      starts(s, rank - 1, d_1=j))
        return [packed, taus]

    packed, taus = b.counted_loop(k, [a, b.constant(0, dtype, (*batch, k))], step)
    return packed, taus


def expand_householder_product(op, program=None) -> list:
    """``custom_call @ProductOfElementaryHouseholderReflectors``: (a, taus) -> Q."""
    del program
    if len(op.operands) != 2 or len(op.results) != 1 or op.operands[0].type.rank < 2:
        raise InvalidArgument(f"custom_call @ProductOfElementaryHouseholderReflectors takes "
                              f"the reflectors and their taus: {op.describe()}")
    a, taus = op.operands
    (result,) = op.results
    m, n = a.type.shape[-2:]
    k = taus.type.shape[-1]
    if not m >= n >= k or result.type != a.type or taus.type.shape[:-1] != batch_shape(a):
        raise InvalidArgument(f"custom_call @ProductOfElementaryHouseholderReflectors: "
                              f"reflectors of shape ({m}, {n}) with {k} taus need rows >= "
                              f"columns >= taus and a result of the reflectors' type: "
                              f"{op.describe()}")
    b = Builder(op.location)
    if a.type.size == 0:
        return b.finish([b.constant(0, a.type.dtype, a.type.shape)], [result])
    return b.finish([householder_product(b, a, taus)], [result])


def householder_product(b: Builder, a, taus):
    """The first n columns of H_0 ... H_(k-1) for reflectors stored below a's diagonal."""
    shape = a.type.shape
    rank, m = len(shape), shape[-2]
    batch, k = shape[:-2], taus.type.shape[-1]
    dtype = a.type.dtype
    rows = index_grid(b, (*batch, m, 1), rank - 2)
    identity = b.select(b.compare(index_grid(b, shape, rank - 2), index_grid(b, shape, rank - 1),
                                  "EQ"), b.constant(1, dtype, shape), b.constant(0, dtype, shape))

    def step(s: Builder, t, values):
        (q,) = values
        i = s.subtract(s.constant(k - 1, INDEX), t)
        column = s.dynamic_slice(a, starts(s, rank, d_1=i), (*batch, m, 1))
        i_rows = scalar_grid(s, i, rows.type.shape)
        zero_column = s.constant(0, dtype, column.type.shape)
        v = s.select(s.compare(rows, i_rows, "GT"), column,
                     s.select(s.compare(rows, i_rows, "EQ"), s.constant(1, dtype, column.type.shape),
                              zero_column))
        tau = s.reshape(s.dynamic_slice(taus, starts(s, rank - 1, d_1=i), (*batch, 1)),
                        (*batch, 1, 1))
        update = matmul(s, v, matmul(s, adjoint(s, v), q))
        return [s.subtract(q, s.multiply(expand_to(s, tau, shape), update))]

    (q,) = b.counted_loop(k, [identity], step)
    return q


def _abs2(b: Builder, x):
    if is_complex(x):
        re, im = b.real(x), b.imag(x)
        return b.add(b.multiply(re, re), b.multiply(im, im))
    return b.multiply(x, x)


EXPANSIONS = {
    custom_call_rule("Qr"): expand_qr,
    custom_call_rule("ProductOfElementaryHouseholderReflectors"): expand_householder_product,
}

