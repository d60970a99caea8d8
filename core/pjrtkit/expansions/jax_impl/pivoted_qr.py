"""QR with column pivoting in JAX, LAPACK's ?geqp3 form (the geqp3 of
``pjrtkit.expansions.jax_linalg``): ``A P = Q R`` with ``(packed, jpvt, taus)`` as geqp3 gives
them: R on and above the diagonal, the Householder vectors below it (xLARFG's convention,
``schur.reflector``), jpvt one-based, taus ``min(m, n)`` long.

Columns whose jpvt entry is nonzero on entry are fixed: moved to the front in their order and
factored first, unpivoted; the free ones follow, each step taking the remaining column of
largest norm below the rows already factored. The norms are recomputed exactly at every step
(LAPACK downdates them and recomputes when they lose accuracy; the choice differs only where
two columns' norms tie to rounding).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from pjrtkit.expansions.jax_impl.schur import HIGHEST, reflector, set_column


def geqp3(a, jpvt):
    """(packed, jpvt, taus) of ?geqp3 for the batch of matrices ``a`` and initial ``jpvt``."""
    a, jpvt = jnp.asarray(a), jnp.asarray(jpvt)
    one = _geqp3_one
    for _ in range(a.ndim - 2):
        one = jax.vmap(one)
    return one(a, jpvt)


def _geqp3_one(a, jpvt):
    m, n = a.shape
    k = min(m, n)
    free = jpvt == 0
    order = jnp.argsort(free, stable=True)   # fixed columns first, each group in order
    a = jnp.take(a, order, axis=1)
    fixed = jnp.sum(~free)
    rows = jnp.arange(m)
    columns = jnp.arange(n)

    def step(j, state):
        a, order, taus = state
        below = rows[:, None] >= j
        norms = jnp.sum(jnp.where(below, jnp.abs(a) ** 2, 0), axis=0)
        norms = jnp.where(columns >= j, norms, -1)
        best = jnp.argmax(norms)              # the first of the largest, as LAPACK's i?amax
        p = jnp.where(j < fixed, j, best)
        column_j, column_p = a[:, j], a[:, p]
        a = set_column(set_column(a, j, column_p), p, column_j)
        order_j, order_p = order[j], order[p]
        order = lax.dynamic_update_slice(lax.dynamic_update_slice(order, order_p[None], (j,)),
                                         order_j[None], (p,))
        v, tau, beta = reflector(a[:, j], j)
        # A <- H^H A on the columns right of j; column j then holds beta and v
        left = jnp.conj(tau) * jnp.outer(v, jnp.dot(jnp.conj(v), a, precision=HIGHEST))
        a = a - jnp.where(columns[None, :] > j, left, jnp.zeros_like(left))
        packed = jnp.where(rows > j, v, a[:, j])
        packed = jnp.where(rows == j, beta.astype(a.dtype), packed)
        a = set_column(a, j, packed)
        taus = lax.dynamic_update_slice(taus, jnp.reshape(tau, (1,)).astype(a.dtype), (j,))
        return a, order, taus

    a, order, taus = lax.fori_loop(0, k, step, (a, order, jnp.zeros((k,), a.dtype)))
    return a, (order + 1).astype(jpvt.dtype), taus
