"""The non-symmetric eigenproblem in JAX: Hessenberg reduction (LAPACK's gehrd form), the
complex and the real Schur decompositions by the shifted QR algorithm, and eigenvectors (the
hessenberg, schur and eig of ``pjrtkit.expansions.jax_linalg``).

- ``hessenberg``: Householder reflectors ``H_j = I - tau v v^H`` (LAPACK's xLARFG
  convention, ``v[j+1] = 1``) zero column j below the subdiagonal; ``A <- H_j^H A H_j``. The
  result packs the Hessenberg matrix and, below its subdiagonal, the reflectors; ``taus`` has
  ``n - 1`` entries, as gehrd gives them.
- ``complex_schur``: ``A = Z T Z^H`` with T upper triangular and Z unitary. Explicit single-shift
  QR steps on the Hessenberg form, over the whole matrix: ``H - mu I = QR`` by Givens rotations,
  ``H <- RQ + mu I``, with the Wilkinson shift of the trailing 2x2 block of the lowest part not
  yet reduced (an exceptional shift every tenth step), and subdiagonal entries below
  ``eps (|h_kk| + |h_k+1,k+1|)`` set to zero. A matrix that does not converge in ``30 n`` steps
  comes back NaN, as LAPACK's failure does on XLA's CPU backend.
- ``eig``: the eigenvalues are T's diagonal; T's eigenvectors by back substitution (xTREVC's
  rule for close eigenvalues: the divisor is at least ``eps |lambda|``), times Z; the left ones
  from ``T^H``. Each vector has unit norm with its largest component real, as geev gives them.

- ``real_schur``: ``A = Z T Z^T`` for real A, T quasi upper triangular (1x1 blocks for real
  eigenvalues, 2x2 blocks for complex pairs): Francis' implicit double-shift QR steps (real
  arithmetic), each on the lowest unreduced block not yet finished; an isolated 2x2 block with
  real eigenvalues split by a rotation onto an eigenvector.

``eig`` of real input is solved in complex arithmetic (its eigenvalues then averaged into exact
conjugate pairs).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pjrtkit.semantics import dtypes as D

HIGHEST = lax.Precision.HIGHEST


def batched(fn, a):
    """``fn`` of one matrix applied over ``a``'s leading batch dimensions."""
    for _ in range(a.ndim - 2):
        fn = jax.vmap(fn)
    return fn(a)


# Updates at a traced index as dynamic_update_slice, not scatter (``x.at[i].set``): every
# backend has the former, and a complex scatter becomes one over two operands after the complex
# expansion, which not every backend's scatter takes.

def _set_row(x, i, row):
    return lax.dynamic_update_slice(x, row[None, :].astype(x.dtype), (i, 0))


def set_column(x, j, column):
    return lax.dynamic_update_slice(x, column[:, None].astype(x.dtype), (0, j))


def _set_entry(x, i, value):
    return lax.dynamic_update_slice(x, jnp.reshape(value, (1,)).astype(x.dtype), (i,))


# -- Householder reflectors ----------------------------------------------------------------------

def reflector(column, pivot):
    """LAPACK's xLARFG for ``column[pivot:]``: (v with v[pivot] = 1 and zeros above, tau,
    beta)."""
    n = column.shape[0]
    rows = jnp.arange(n)
    real = D.real_part_of(column.dtype)
    alpha = column[pivot]
    below = rows > pivot
    x = jnp.where(below, column, jnp.zeros_like(column))
    x_norm2 = jnp.sum(jnp.abs(x) ** 2)
    alpha_re, alpha_im = jnp.real(alpha), jnp.imag(alpha)
    trivial = (x_norm2 == 0) & (alpha_im == 0)
    norm = jnp.sqrt(alpha_re * alpha_re + alpha_im * alpha_im + x_norm2)
    beta = jnp.where(alpha_re >= 0, -norm, norm)
    beta = jnp.where(trivial, alpha_re, beta).astype(real)
    # In alpha's dtype: JAX's tests run with strict dtype promotion.
    safe_beta = jnp.where(trivial, jnp.ones_like(beta), beta).astype(alpha.dtype)
    tau = jnp.where(trivial, jnp.zeros_like(alpha), (safe_beta - alpha) / safe_beta)
    denominator = jnp.where(trivial, jnp.ones_like(alpha), alpha - beta.astype(alpha.dtype))
    v = jnp.where(below, x / denominator, (rows == pivot).astype(column.dtype))
    return v, tau, beta


def hessenberg(a):
    """(packed, taus) of LAPACK's gehrd for the batch of square matrices ``a``."""
    return tuple(batched(hessenberg_one, a))


def hessenberg_one(a):
    n = a.shape[-1]
    if n < 2:
        return a, jnp.zeros((max(n - 1, 0),), a.dtype)
    columns = jnp.arange(n)

    def step(j, state):
        h, taus = state
        v, tau, beta = reflector(h[:, j], j + 1)
        # A <- H^H A H with H = I - tau v v^H on the columns right of j (the ones left of it
        # hold earlier reflectors); column j then holds beta and v.
        left = jnp.conj(tau) * jnp.outer(v, jnp.dot(jnp.conj(v), h, precision=HIGHEST))
        h = h - jnp.where(columns[None, :] > j, left, jnp.zeros_like(left))
        h = h - tau * jnp.outer(jnp.dot(h, v, precision=HIGHEST), jnp.conj(v))
        packed_column = jnp.where(columns > j + 1, v, h[:, j])
        packed_column = jnp.where(columns == j + 1, beta.astype(a.dtype), packed_column)
        h = set_column(h, j, packed_column)
        return h, _set_entry(taus, j, tau)

    return lax.fori_loop(0, n - 1, step, (a, jnp.zeros((n - 1,), a.dtype)))


def _unpack_hessenberg(packed, taus):
    """(H, Q) with A = Q H Q^H from gehrd's packed form."""
    n = packed.shape[-1]
    rows = jnp.arange(n)[:, None]
    cols = jnp.arange(n)[None, :]
    h = jnp.where(rows <= cols + 1, packed, jnp.zeros_like(packed))
    q = jnp.eye(n, dtype=packed.dtype)

    def step(t, q):
        j = n - 2 - t
        column = packed[:, j]
        v = jnp.where(rows[:, 0] > j + 1, column, (rows[:, 0] == j + 1).astype(packed.dtype))
        return q - taus[j] * jnp.outer(v, jnp.dot(jnp.conj(v), q, precision=HIGHEST))

    return h, lax.fori_loop(0, max(n - 1, 0), step, q)


# -- the complex Schur decomposition ---------------------------------------------------------------

def complex_schur(a):
    """(T, Z), A = Z T Z^H, T upper triangular, for a batch of complex square matrices."""
    return tuple(batched(_complex_schur_one, a))


def _givens(x, y):
    """(c real, s) with [[c, s], [-conj(s), c]] [x, y] = [r, 0]."""
    ax, ay = jnp.abs(x), jnp.abs(y)
    norm = jnp.sqrt(ax * ax + ay * ay)
    safe_norm = jnp.where(norm == 0, jnp.ones_like(norm), norm)
    phase = jnp.where(ax == 0, jnp.ones_like(x), x / jnp.where(ax == 0, 1, ax).astype(x.dtype))
    c = jnp.where(norm == 0, jnp.ones_like(ax), ax / safe_norm)
    s = jnp.where(norm == 0, jnp.zeros_like(x), phase * jnp.conj(y) / safe_norm.astype(x.dtype))
    return c, s


def _complex_schur_one(a):
    n = a.shape[-1]
    real = D.real_part_of(a.dtype)
    eps = D.epsilon(real)
    if n < 2:
        return a, jnp.eye(n, dtype=a.dtype)
    h, z = _unpack_hessenberg(*hessenberg_one(a))
    index = jnp.arange(n)
    sub = index[1:]  # subdiagonal entry k is h[k + 1, k]

    def subdiagonal(h):
        return h[sub, sub - 1]

    def deflate(h):
        diagonal = jnp.abs(jnp.diagonal(h))
        small = jnp.abs(subdiagonal(h)) <= eps * (diagonal[:-1] + diagonal[1:])
        small_at = jnp.zeros((n, n), bool)
        small_at = small_at | ((index[:, None] == index[None, :] + 1)
                               & jnp.pad(small, (1, 0))[:, None])
        keep = ~small_at
        return jnp.where(keep, h, jnp.zeros_like(h))

    def active_bottom(h):
        """The largest k with h[k, k-1] != 0 (0 when the matrix is triangular)."""
        nonzero = subdiagonal(h) != 0
        return jnp.max(jnp.where(nonzero, sub, 0))

    def shift(h, hi, count):
        a_, b_ = h[hi - 1, hi - 1], h[hi - 1, hi]
        c_, d_ = h[hi, hi - 1], h[hi, hi]
        half = (a_ - d_) / 2
        root = jnp.sqrt(half * half + b_ * c_)
        mu1, mu2 = d_ + half + root, d_ + half - root
        wilkinson = jnp.where(jnp.abs(mu1 - d_) < jnp.abs(mu2 - d_), mu1, mu2)
        exceptional = d_ + (0.75 * jnp.abs(c_)).astype(a.dtype)
        return jnp.where(count % 10 == 9, exceptional, wilkinson)

    def qr_step(state):
        h, z, count = state
        hi = active_bottom(h)
        mu = shift(h, hi, count)
        m = h - mu * jnp.eye(n, dtype=h.dtype)

        def left(k, carry):
            m, cs, ss = carry
            c, s = _givens(m[k, k], m[k + 1, k])
            c_ = c.astype(m.dtype)
            row_k, row_k1 = m[k], m[k + 1]
            m = _set_row(m, k, c_ * row_k + s * row_k1)
            m = _set_row(m, k + 1, -jnp.conj(s) * row_k + c_ * row_k1)
            return m, _set_entry(cs, k, c), _set_entry(ss, k, s)

        m, cs, ss = lax.fori_loop(0, n - 1, left, (m, jnp.zeros((n - 1,), real),
                                                    jnp.zeros((n - 1,), h.dtype)))

        def right(k, carry):
            m, z = carry
            c_, s = cs[k].astype(m.dtype), ss[k]
            col_k, col_k1 = m[:, k], m[:, k + 1]
            m = set_column(m, k, c_ * col_k + jnp.conj(s) * col_k1)
            m = set_column(m, k + 1, -s * col_k + c_ * col_k1)
            zk, zk1 = z[:, k], z[:, k + 1]
            z = set_column(z, k, c_ * zk + jnp.conj(s) * zk1)
            z = set_column(z, k + 1, -s * zk + c_ * zk1)
            return m, z

        m, z = lax.fori_loop(0, n - 1, right, (m, z))
        return deflate(m + mu * jnp.eye(n, dtype=h.dtype)), z, count + 1

    def unfinished(state):
        h, _, count = state
        return (active_bottom(h) > 0) & (count < 30 * n)

    h, z, _ = lax.while_loop(unfinished, qr_step, (deflate(h), z, jnp.int32(0)))
    converged = active_bottom(h) == 0
    triangular = jnp.where(index[:, None] <= index[None, :], h, jnp.zeros_like(h))
    nan = jnp.full_like(h, np.nan)
    return jnp.where(converged, triangular, nan), jnp.where(converged, z, nan)


# -- eigenvectors --------------------------------------------------------------------------------

def _triangular_eigenvectors(t):
    """Columns x_k with T x_k = T_kk x_k, x_k[k] = 1, zero below k (T upper triangular)."""
    n = t.shape[-1]
    real = D.real_part_of(t.dtype)
    eps = D.epsilon(real)
    tiny = D.float_limits(real)[1]
    values = jnp.diagonal(t)
    index = jnp.arange(n)

    def step(s, x):
        i = n - 1 - s
        row = jnp.dot(t[i], x, precision=HIGHEST)          # sum over j > i of T_ij x_j
        divisor = t[i, i] - values
        small = jnp.maximum(eps * jnp.abs(values), tiny)
        divisor = jnp.where(jnp.abs(divisor) < small, small.astype(t.dtype), divisor)
        new = jnp.where(index > i, -row / divisor, (index == i).astype(t.dtype))
        return _set_row(x, i, new)

    return lax.fori_loop(0, n, step, jnp.zeros_like(t))


def _normalized(vectors):
    """Unit 2-norm columns, each with its largest component real (geev's convention)."""
    norms = jnp.sqrt(jnp.sum(jnp.abs(vectors) ** 2, axis=0))
    vectors = vectors / jnp.where(norms == 0, 1, norms).astype(vectors.dtype)
    largest = jnp.argmax(jnp.abs(vectors), axis=0)
    pivot = vectors[largest, jnp.arange(vectors.shape[-1])]
    magnitude = jnp.abs(pivot)
    phase = jnp.where(magnitude == 0, jnp.ones_like(pivot),
                      jnp.conj(pivot) / jnp.where(magnitude == 0, 1, magnitude).astype(pivot.dtype))
    return vectors * phase[None, :]


def eig(a, *, left: bool, right: bool):
    """[eigenvalues, left vectors if ``left``, right vectors if ``right``], complex, for a batch
    of square matrices (real ones solved in complex arithmetic)."""
    complex_dtype = np.result_type(np.dtype(a.dtype), np.complex64)
    one = functools.partial(_eig_one, left=left, right=right,
                            real_input=not jnp.issubdtype(a.dtype, jnp.complexfloating))
    return list(batched(one, a.astype(complex_dtype)))


def _conjugate_pairs(values):
    """The eigenvalues of a real matrix as exact conjugate pairs (and real ones exactly real),
    as LAPACK's real driver gives them: each is averaged with the conjugate of its nearest
    conjugate (itself for a real one)."""
    partner = jnp.argmin(jnp.abs(values[None, :] - jnp.conj(values)[:, None]), axis=1)
    return (values + jnp.conj(values[partner])) / 2


def _eig_one(a, left, right, real_input):
    n = a.shape[-1]
    t, z = _complex_schur_one(a)
    values = jnp.diagonal(t)
    outputs = [_conjugate_pairs(values) if real_input else values]
    if left:
        flipped = jnp.flip(jnp.conj(t).T)                  # upper triangular, order reversed
        y = jnp.flip(_triangular_eigenvectors(flipped))
        outputs.append(_normalized(jnp.dot(z, y, precision=HIGHEST)) if n else y)
    if right:
        x = _triangular_eigenvectors(t)
        outputs.append(_normalized(jnp.dot(z, x, precision=HIGHEST)) if n else x)
    return tuple(outputs)


# -- the real Schur decomposition ----------------------------------------------------------------

def real_schur(a):
    """(T, Z), A = Z T Z^T, Z orthogonal, T quasi upper triangular (1x1 blocks for real
    eigenvalues, 2x2 blocks for complex pairs), for a batch of real square matrices."""
    return tuple(batched(_real_schur_one, a))


def _householder3(x, y, w):
    """(v, tau) with (I - tau v v^T) [x, y, w] = [alpha, 0, 0], v[0] = 1."""
    norm = jnp.sqrt(x * x + y * y + w * w)
    alpha = jnp.where(x >= 0, -norm, norm)
    head = x - alpha
    trivial = (norm == 0) | (head == 0)
    safe_head = jnp.where(trivial, jnp.ones_like(head), head)
    v1, v2 = y / safe_head, w / safe_head
    tau = jnp.where(trivial, jnp.zeros_like(x), 2 / (1 + v1 * v1 + v2 * v2))
    return v1, v2, tau


def _real_schur_one(a):
    """Francis' implicit double-shift QR on the Hessenberg form, over the whole matrix (the
    reflectors span all rows and columns: a similarity of the whole matrix), on the lowest
    unreduced block not yet finished; a finished block is 1x1, or 2x2 with complex
    eigenvalues. An isolated 2x2 block with real eigenvalues is split by the rotation onto its
    eigenvector. Subdiagonal entries below ``eps (|h_k-1,k-1| + |h_kk|)`` are set to zero; an
    exceptional shift every tenth step; a matrix that does not converge in ``30 n`` steps comes
    back NaN, as LAPACK's failure does on XLA's CPU backend."""
    n = a.shape[-1]
    eps = D.epsilon(a.dtype)
    if n < 2:
        return a, jnp.eye(n, dtype=a.dtype)
    h, z = _unpack_hessenberg(*hessenberg_one(a))
    index = jnp.arange(n)
    sub = index[1:]  # subdiagonal entry k is h[k, k - 1]
    zero = jnp.zeros((), a.dtype)

    def deflate(h):
        diagonal = jnp.abs(jnp.diagonal(h))
        small = jnp.abs(h[sub, sub - 1]) <= eps * (diagonal[:-1] + diagonal[1:])
        at = (index[:, None] == index[None, :] + 1) & jnp.pad(small, (1, 0))[:, None]
        return jnp.where(at, jnp.zeros_like(h), h)

    def entry(h, i, j):
        inside = (i >= 0) & (i < n) & (j >= 0) & (j < n)
        return jnp.where(inside, h[jnp.clip(i, 0, n - 1), jnp.clip(j, 0, n - 1)], zero)

    def blocks(h):
        """(hi, lo): the bottom row of the lowest unfinished unreduced block (0 if none) and
        its top row."""
        nonzero = jnp.pad(h[sub, sub - 1] != 0, (1, 1))  # nonzero[k]: h[k, k-1] != 0
        k = index
        a_, b_ = entry(h, k - 1, k - 1), entry(h, k - 1, k)
        c_, d_ = entry(h, k, k - 1), entry(h, k, k)
        half = (a_ - d_) / 2
        complex_pair = half * half + b_ * c_ < 0
        isolated = nonzero[k] & ~nonzero[jnp.maximum(k - 1, 0)] & ~nonzero[k + 1]
        active = nonzero[:n] & ~(isolated & complex_pair) & (k >= 1)
        hi = jnp.max(jnp.where(active, k, 0))
        split = (k >= 1) & (k < hi) & ~nonzero[:n]
        lo = jnp.max(jnp.where(split, k, 0))
        return hi, lo

    def reflect(h, z, p, v1, v2, tau, three):
        """h <- P h P, z <- z P, P = I - tau v v^T with v = e_p + v1 e_p+1 (+ v2 e_p+2)."""
        v = (jnp.where(index == p, 1, 0) + jnp.where(index == p + 1, v1, 0)
             + jnp.where((index == p + 2) & three, v2, 0)).astype(h.dtype)
        h = h - tau * jnp.outer(v, jnp.dot(v, h, precision=HIGHEST))
        h = h - tau * jnp.outer(jnp.dot(h, v, precision=HIGHEST), v)
        z = z - tau * jnp.outer(jnp.dot(z, v, precision=HIGHEST), v)
        return h, z

    def francis_step(h, z, lo, hi, count):
        a_, b_ = h[hi - 1, hi - 1], h[hi - 1, hi]
        c_, d_ = h[hi, hi - 1], h[hi, hi]
        trace, det = a_ + d_, a_ * d_ - b_ * c_
        w = jnp.abs(h[hi, hi - 1]) + jnp.abs(entry(h, hi - 1, hi - 2))
        exceptional = count % 10 == 9
        trace = jnp.where(exceptional, 1.5 * w, trace)
        det = jnp.where(exceptional, w * w, det)
        h00, h01, h10 = h[lo, lo], h[lo, lo + 1], h[lo + 1, lo]
        x = h00 * h00 + h01 * h10 - trace * h00 + det
        y = h10 * (h00 + h[lo + 1, lo + 1] - trace)
        w0 = h10 * entry(h, lo + 2, lo + 1)

        def chase(p, state):
            h, z, x, y, w = state
            three = p + 2 <= hi
            w = jnp.where(three, w, zero)
            v1, v2, tau = _householder3(x, y, w)
            h, z = reflect(h, z, p, v1, v2, tau, three)
            # the bulge's column below the subdiagonal is zero now (exactly)
            below = (p > lo) & ((index == p + 1) | ((index == p + 2) & three))
            h = jnp.where(below[:, None] & (index[None, :] == p - 1), jnp.zeros_like(h), h)
            return (h, z, entry(h, p + 1, p), entry(h, p + 2, p),
                    entry(h, p + 3, p))

        h, z, *_ = lax.fori_loop(lo, hi, chase, (h, z, x, y, w0))
        return h, z

    def split_pair(h, z, hi):
        """An isolated 2x2 block (rows hi-1, hi) with real eigenvalues made triangular by the
        rotation whose first column is an eigenvector."""
        p = hi - 1
        a_, b_, c_, d_ = h[p, p], h[p, hi], h[hi, p], h[hi, hi]
        half = (a_ - d_) / 2
        root = jnp.sqrt(jnp.maximum(half * half + b_ * c_, 0))
        value = d_ + half + jnp.where(half >= 0, root, -root)
        first, second = (b_, value - a_), (value - d_, c_)
        use_first = jnp.hypot(*first) >= jnp.hypot(*second)
        u0 = jnp.where(use_first, first[0], second[0])
        u1 = jnp.where(use_first, first[1], second[1])
        norm = jnp.hypot(u0, u1)
        cos = jnp.where(norm == 0, jnp.ones_like(norm), u0 / jnp.where(norm == 0, 1, norm))
        sin = jnp.where(norm == 0, jnp.zeros_like(norm), u1 / jnp.where(norm == 0, 1, norm))
        g = (jnp.eye(n, dtype=h.dtype)
             + jnp.where((index[:, None] == p) & (index[None, :] == p), cos - 1, 0)
             + jnp.where((index[:, None] == hi) & (index[None, :] == hi), cos - 1, 0)
             + jnp.where((index[:, None] == hi) & (index[None, :] == p), sin, 0)
             + jnp.where((index[:, None] == p) & (index[None, :] == hi), -sin, 0)).astype(h.dtype)
        h = jnp.dot(jnp.dot(g.T, h, precision=HIGHEST), g, precision=HIGHEST)
        h = jnp.where((index[:, None] == hi) & (index[None, :] == p), jnp.zeros_like(h), h)
        return h, jnp.dot(z, g, precision=HIGHEST)

    def step(state):
        h, z, count = state
        hi, lo = blocks(h)
        h, z = lax.cond(hi - lo == 1, lambda: split_pair(h, z, hi),
                        lambda: francis_step(h, z, lo, hi, count))
        return deflate(h), z, count + 1

    def unfinished(state):
        h, _, count = state
        return (blocks(h)[0] > 0) & (count < 30 * n)

    h, z, _ = lax.while_loop(unfinished, step, (deflate(h), z, jnp.int32(0)))
    converged = blocks(h)[0] == 0
    quasi = jnp.where(index[:, None] <= index[None, :] + 1, h, jnp.zeros_like(h))
    nan = jnp.full_like(h, np.nan)
    return jnp.where(converged, quasi, nan), jnp.where(converged, z, nan)
