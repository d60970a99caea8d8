"""Tridiagonal linear algebra in JAX, LAPACK's forms (the tridiagonal and tridiagonal_solve of
``pjrtkit.expansions.jax_linalg``):

- ``tridiagonal``: the reduction of a symmetric or Hermitian matrix to tridiagonal form, as
  ?sytrd/?hetrd give it: ``(packed, d, e, taus)``. The Householder reduction to Hessenberg
  form (``schur.hessenberg``: the same xLARFG reflectors) of the Hermitian matrix read from
  one triangle is tridiagonal; ``lower=False`` is the lower reduction of the matrix reversed
  in both indices, reversed back. The packed result holds d on the diagonal, e beside it and
  the reflectors beyond; the other triangle is the input's, untouched.
- ``tridiagonal_solve``: ``T x = b`` by Gaussian elimination with row interchanges. Without
  ``perturb_singular``, ?gtsv's (interchange when the subdiagonal entry is larger than the
  pivot; an exact zero pivot makes the whole solution NaN, as XLA's CPU backend returns a
  failed gtsv). With it, ?lagtf's elimination (interchanges by each row's size relative to its
  scale) and ?lagts's back substitution, which nudges a pivot too small to divide by (by about
  ``eps * max|U|``, doubling) instead of failing: a singular system gives a large finite
  solution (inverse iteration's use).

Updates at a traced index are ``dynamic_update_slice`` (every backend has it; see schur.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from pjrtkit.expansions.jax_impl.schur import batched, hessenberg_one
from pjrtkit.semantics import dtypes as D


# -- the reduction to tridiagonal form -----------------------------------------------------------

def tridiagonal(a, *, lower: bool):
    """(packed, d, e, taus) of ?sytrd / ?hetrd for the batch of square matrices ``a``."""
    return tuple(batched(lambda m: _tridiagonal_one(m, lower), a))


def _hermitian_from(a, lower: bool):
    rows = jnp.arange(a.shape[-1])[:, None]
    cols = jnp.arange(a.shape[-1])[None, :]
    part = jnp.where(rows > cols if lower else rows < cols, a, jnp.zeros_like(a))
    diagonal = jnp.where(rows == cols, jnp.real(a).astype(a.dtype), jnp.zeros_like(a))
    return part + jnp.conj(part.T) + diagonal


def _tridiagonal_one(a, lower: bool):
    n = a.shape[-1]
    real = D.real_part_of(a.dtype)
    if n == 0:
        return a, jnp.zeros((0,), real), jnp.zeros((0,), real), jnp.zeros((0,), a.dtype)
    m = _hermitian_from(a, lower)
    if not lower:
        m = jnp.flip(m)
    packed, taus = hessenberg_one(m)
    d = jnp.real(jnp.diagonal(packed)).astype(real)
    e = jnp.real(jnp.diagonal(packed, -1)).astype(real)
    rows = jnp.arange(n)[:, None]
    cols = jnp.arange(n)[None, :]
    reflectors = jnp.where(rows > cols + 1, packed, jnp.zeros_like(packed))
    if not lower:
        d, e, taus, reflectors = jnp.flip(d), jnp.flip(e), jnp.flip(taus), jnp.flip(reflectors)
    outside = (rows < cols) if lower else (rows > cols)    # the triangle LAPACK never reads
    e_full = jnp.pad(e, (0, 1)).astype(a.dtype)
    # e[j] lies at (j + 1, j) below the diagonal, at (j, j + 1) above it
    beside = (jnp.where(rows == cols + 1, e_full[None, :], 0) if lower
              else jnp.where(rows + 1 == cols, e_full[:, None], 0))
    band = jnp.where(rows == cols, d.astype(a.dtype)[:, None], 0) + beside
    packed_out = jnp.where(outside, a, band.astype(a.dtype) + reflectors)
    return packed_out, d, e, taus


# -- tridiagonal solves --------------------------------------------------------------------------

def tridiagonal_solve(dl, d, du, b, *, perturb_singular: bool):
    """x with T x = b for the batch of tridiagonal systems (``dl[..., i] = T[i, i-1]``,
    ``d[..., i] = T[i, i]``, ``du[..., i] = T[i, i+1]``; ``dl[..., 0]`` and ``du[..., -1]``
    are not read), b of shape (..., m, k)."""
    def one(dl, d, du, b):
        return _solve_one(dl, d, du, b, perturb_singular)

    dl, d, du, b = (jnp.asarray(v) for v in (dl, d, du, b))
    for _ in range(d.ndim - 1):
        one = jax.vmap(one)
    return one(dl, d, du, b)


def _set(x, i, value):
    """``x[i] = value`` (a row of a matrix or an entry of a vector) at a traced index."""
    value = jnp.asarray(value, x.dtype).reshape((1, *x.shape[1:]))
    return lax.dynamic_update_slice(x, value, (i, *([0] * (x.ndim - 1))))


def _solve_one(dl, d, du, b, perturb: bool):
    n = d.shape[0]
    if n == 0 or b.shape[-1] == 0:
        return b
    real = D.real_part_of(d.dtype)
    eps = D.epsilon(real)
    largest_value, tiny = D.float_limits(real)
    safemin = max(tiny, (1 / largest_value) * (1 + eps))  # ?lamch's safe minimum
    zero = jnp.zeros((), d.dtype)
    upper1 = jnp.where(jnp.arange(n) < n - 1, du, zero)  # U's first superdiagonal, so far
    # state: U's diagonal, first and second superdiagonals; x; the current row's scale; max|U|
    state = (d, upper1, jnp.zeros_like(d), b, jnp.abs(d[0]) + jnp.abs(upper1[0]),
             jnp.maximum(jnp.abs(d[0]), jnp.abs(upper1[0])))

    def eliminate(k, state):
        u0, u1, u2, x, scale, biggest = state
        pivot, sub = u0[k], dl[k + 1]
        below_next = jnp.where(k < n - 2, u1[jnp.minimum(k + 1, n - 1)], zero)
        if perturb:  # ?lagtf: compare sizes relative to the rows' scales
            next_scale = jnp.abs(sub) + jnp.abs(u0[k + 1]) + jnp.abs(below_next)
            safe_scale = jnp.where(scale == 0, 1, scale)
            stay = jnp.where(pivot == 0, 0, jnp.abs(pivot) / safe_scale)
            safe_next = jnp.where(next_scale == 0, 1, next_scale)
            keep = (sub == 0) | (jnp.abs(sub) / safe_next <= stay)
        else:  # ?gtsv
            next_scale = scale
            keep = jnp.abs(pivot) >= jnp.abs(sub)
        # rows k and k+1 kept in place: row k+1 -= factor * row k
        factor = jnp.where(sub == 0, zero, sub / jnp.where(pivot == 0, 1, pivot).astype(d.dtype))
        kept = (u0[k + 1] - factor * u1[k], u1[k + 1], zero, u1[k], x[k],
                x[k + 1] - factor * x[k])
        # interchanged: row k <- row k+1, row k+1 <- old row k - factor * row k+1
        swap_factor = pivot / jnp.where(sub == 0, 1, sub).astype(d.dtype)
        swapped = (u1[k] - swap_factor * u0[k + 1], -swap_factor * below_next, below_next,
                   u0[k + 1], x[k + 1], x[k] - swap_factor * x[k + 1])
        new_next0, new_next1, new_u2, new_u1, new_xk, new_xk1 = (
            jnp.where(keep, a, s) for a, s in zip(kept, swapped))
        new_pivot = jnp.where(keep, pivot, sub)
        u0 = _set(_set(u0, k, new_pivot), k + 1, new_next0)
        u1 = _set(_set(u1, k, new_u1), k + 1, new_next1)
        u2 = _set(u2, k, new_u2)
        x = _set(_set(x, k, new_xk), k + 1, new_xk1)
        if perturb:
            scale = jnp.where(keep, next_scale, jnp.abs(new_next0) + jnp.abs(new_next1))
            row_max = jnp.maximum(jnp.maximum(jnp.abs(new_pivot), jnp.abs(new_u1)),
                                  jnp.abs(new_u2))
            biggest = jnp.where(k < n - 2, jnp.maximum(biggest, row_max), biggest)
        return u0, u1, u2, x, scale, biggest

    u0, u1, u2, x, _, biggest = lax.fori_loop(0, n - 1, eliminate, state)
    biggest = jnp.maximum(biggest, jnp.abs(u0[n - 1]))
    nudge = eps * biggest

    def substitute(t, x):
        k = n - 1 - t
        row = x[k]
        row = row - jnp.where(k + 1 < n, u1[k], zero) * x[jnp.minimum(k + 1, n - 1)]
        row = row - jnp.where(k + 2 < n, u2[k], zero) * x[jnp.minimum(k + 2, n - 1)]
        if perturb:
            solved = _divide_by_pivot(u0[k], row, nudge, safemin)
        else:
            solved = row / u0[k]
        return _set(x, k, solved)

    x = lax.fori_loop(0, n, substitute, x)
    if perturb:
        return x
    singular = jnp.any(u0 == 0)
    return jnp.where(singular, jnp.full_like(x, jnp.nan), x)


def _divide_by_pivot(pivot, row, nudge, safemin):
    """``row / pivot`` once a pivot under 1 in size is nudged (by ``nudge``, doubling, in the
    direction of its real part) until neither ``1 / pivot`` nor ``row / pivot`` overflows, or
    row and pivot are scaled up together when the pivot is merely tiny (?lagts's safeguard)."""
    bignum = 1 / safemin
    real = D.real_part_of(pivot.dtype)
    largest = jnp.max(jnp.abs(row)) if row.size else jnp.zeros((), real)
    step0 = jnp.where(jnp.real(pivot) < 0, -1, 1).astype(real) * jnp.maximum(
        jnp.abs(nudge), safemin).astype(real)

    def unfinished(state):
        pivot, _, _, done = state
        return (jnp.abs(pivot) < 1) & ~done

    def step(state):
        pivot, row, size_step, done = state
        size = jnp.abs(pivot)
        tiny = size < safemin
        push = jnp.where(tiny, (size == 0) | (largest * safemin > size), largest > size * bignum)
        rescale = tiny & ~push
        pivot = jnp.where(push, pivot + size_step.astype(pivot.dtype),
                          jnp.where(rescale, pivot * bignum, pivot))
        row = jnp.where(rescale, row * bignum, row)
        return pivot, row, jnp.where(push, size_step * 2, size_step), ~push

    pivot, row, _, _ = lax.while_loop(unfinished, step, (pivot, row, step0, jnp.zeros((), bool)))
    return row / pivot
