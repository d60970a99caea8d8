"""The Hermitian eigenproblem by cyclic Jacobi rotations, in JAX (the eigh of
``pjrtkit.expansions.jax_linalg``).

Parallel ordering (Brent and Luk): the matrix's indices are paired (0, 1), (2, 3), ...; one
round rotates every pair at once, zeroing each pair's off-diagonal entry, then moves the
indices by the round-robin tournament permutation (the circle method), so ``n - 1`` rounds
meet every pair once: a sweep. Sweeps repeat until the off-diagonal part is below ``eps`` of
the matrix's norm. A round is a few batched 2x2 products over the whole matrix (O(n^2)), so a
sweep is O(n^3) and no shape depends on the loop. Odd sizes get one padding index that no
rotation touches (its coupling is exactly zero); its eigenpair is dropped at the end.

For a pair with ``a = A[p, p]``, ``d = A[q, q]``, ``b = A[p, q] = |b| w``: ``tau = (d - a) /
2|b|``, ``t = sign(tau) / (|tau| + sqrt(1 + tau^2))``, ``c = 1 / sqrt(1 + t^2)``, ``s = t c``
and ``J = [[c, s w], [-s conj(w), c]]`` makes ``J^H [[a, b], [conj(b), d]] J`` diagonal with
``a - t|b|`` and ``d + t|b|`` (Golub and Van Loan's symmetric Schur decomposition, with the
phase of ``b`` moved onto the rotation). Only the triangle named by ``lower`` is read, and only
the real part of the diagonal, as LAPACK does. Eigenvalues come back ascending.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pjrtkit.semantics import dtypes as D

MAX_SWEEPS = 60


def tournament_permutation(n: int) -> np.ndarray:
    """``perm`` with ``next[i] = current[perm[i]]``: one round of the circle method over pairs
    (0, 1), (2, 3), ... (``n`` even)."""
    if n <= 2:
        return np.arange(n)
    top, bottom = list(range(0, n, 2)), list(range(1, n, 2))
    new_top = [top[0], bottom[0], *top[1:-1]]
    new_bottom = [*bottom[1:], top[-1]]
    perm = np.empty(n, np.int32)
    perm[0::2], perm[1::2] = new_top, new_bottom
    return perm


def jacobi_eigh(a, *, lower: bool = True, sort_eigenvalues: bool = True,
                subset_by_index=None):
    """(eigenvectors, eigenvalues) of the Hermitian matrices ``a`` (batch dimensions leading),
    as ``lax.linalg.eigh_p`` returns them. Eigenvalues are always ascending (which every
    ``sort_eigenvalues`` allows)."""
    del sort_eigenvalues
    one = _one_matrix
    for _ in range(a.ndim - 2):
        one = jax.vmap(one, in_axes=(0, None, None))
    return one(a, lower, None if subset_by_index is None else tuple(subset_by_index))


def _hermitian_from_triangle(a, lower: bool):
    n = a.shape[-1]
    rows = lax.broadcasted_iota(np.int32, (n, n), 0)
    cols = lax.broadcasted_iota(np.int32, (n, n), 1)
    strict = rows > cols if lower else rows < cols
    triangle = jnp.where(strict, a, jnp.zeros_like(a))
    diagonal = jnp.where(rows == cols, jnp.real(a).astype(a.dtype), jnp.zeros_like(a))
    return triangle + diagonal + jnp.conj(triangle.T)


def _one_matrix(a, lower, subset):
    n = a.shape[-1]
    real = D.real_part_of(a.dtype)
    if n == 0:
        return a, jnp.zeros((0,), real)
    a = _hermitian_from_triangle(a, lower)
    padded = n + n % 2
    if padded != n:
        a = jnp.pad(a, ((0, 1), (0, 1)))
    vectors = jnp.eye(padded, dtype=a.dtype)
    if padded > 1:
        a, vectors = _sweeps(a, vectors)
    values = jnp.real(jnp.diagonal(a))
    if padded != n:  # the padding's eigenvector is a unit vector along the padded index
        pad_column = jnp.argmax(jnp.abs(vectors[n, :]))
        keep = jnp.arange(n) + (jnp.arange(n) >= pad_column).astype(np.int32)
        values = values[keep]
        vectors = vectors[:n, :][:, keep]
    order = jnp.argsort(values)
    values, vectors = values[order], vectors[:, order]
    if subset is not None:
        lo, hi = subset
        values, vectors = values[lo:hi], vectors[:, lo:hi]
    return vectors, values


def _sweeps(a, vectors):
    n = a.shape[-1]
    h = n // 2
    real = D.real_part_of(a.dtype)
    eps = D.epsilon(real)
    perm = jnp.asarray(tournament_permutation(n))
    pair = jnp.arange(h)
    # Masks of the 2x2 diagonal blocks in the (h, 2, h, 2) view: their off-diagonal entries
    # and their two diagonal entries.
    same_block = (pair[:, None, None, None] == pair[None, None, :, None])
    first = jnp.arange(2)[None, :, None, None]
    second = jnp.arange(2)[None, None, None, :]
    block_pp = same_block & (first == 0) & (second == 0)
    block_qq = same_block & (first == 1) & (second == 1)
    block_pq = same_block & (first != second)
    norm = jnp.sqrt(jnp.sum(jnp.abs(a) ** 2))
    tolerance = eps * norm

    def off_diagonal_norm(x):
        off = x - jnp.diag(jnp.diagonal(x))
        return jnp.sqrt(jnp.sum(jnp.abs(off) ** 2))

    def one_round(_, state):
        x, v = state
        x4 = x.reshape(h, 2, h, 2)
        blocks = x4[pair, :, pair, :]                                  # (h, 2, 2)
        app, aqq = jnp.real(blocks[:, 0, 0]), jnp.real(blocks[:, 1, 1])
        apq = blocks[:, 0, 1]
        mag = jnp.abs(apq)
        negligible = mag <= eps * jnp.sqrt(jnp.abs(app * aqq))
        safe_mag = jnp.where(negligible, jnp.ones_like(mag), mag)
        tau = (aqq - app) / (2 * safe_mag)
        t = jnp.where(tau >= 0, 1.0, -1.0).astype(real) / (jnp.abs(tau) + jnp.sqrt(1 + tau * tau))
        t = jnp.where(negligible, jnp.zeros_like(t), t)
        c = 1 / jnp.sqrt(1 + t * t)
        s = t * c
        phase = jnp.where(negligible, jnp.ones_like(apq), apq / safe_mag.astype(apq.dtype))
        c_ = c.astype(x.dtype)
        s_ = s.astype(x.dtype)
        rotation = jnp.stack([jnp.stack([c_, s_ * phase], -1),
                              jnp.stack([-s_ * jnp.conj(phase), c_], -1)], -2)  # (h, 2, 2)
        x4 = jnp.einsum("iba,ibjc->iajc", jnp.conj(rotation), x4,
                        precision=lax.Precision.HIGHEST)
        x4 = jnp.einsum("iajc,jcd->iajd", x4, rotation, precision=lax.Precision.HIGHEST)
        new_pp = (app - t * mag).astype(x.dtype)[:, None, None, None]
        new_qq = (aqq + t * mag).astype(x.dtype)[:, None, None, None]
        x4 = jnp.where(block_pq, jnp.zeros_like(x4), x4)
        x4 = jnp.where(block_pp, jnp.broadcast_to(new_pp, x4.shape), x4)
        x4 = jnp.where(block_qq, jnp.broadcast_to(new_qq.reshape(1, 1, h, 1), x4.shape), x4)
        v = jnp.einsum("kjc,jcd->kjd", v.reshape(n, h, 2), rotation,
                       precision=lax.Precision.HIGHEST).reshape(n, n)
        x = x4.reshape(n, n)
        x = x[perm, :][:, perm]
        return x, v[:, perm]

    def not_converged(state):
        x, _, sweep = state
        return (off_diagonal_norm(x) > tolerance) & (sweep < MAX_SWEEPS)

    def sweep(state):
        x, v, count = state
        x, v = lax.fori_loop(0, n - 1, one_round, (x, v))
        return x, v, count + 1

    a, vectors, _ = lax.while_loop(not_converged, sweep, (a, vectors, jnp.int32(0)))
    return a, vectors
