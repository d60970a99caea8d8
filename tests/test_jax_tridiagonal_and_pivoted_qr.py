"""pjrtkit's portable tridiagonal reduction, tridiagonal solves and QR with column pivoting
(``pjrtkit.expansions.jax_impl.tridiagonal``, ``.pivoted_qr``), run on XLA's CPU backend and
compared with LAPACK there: sytrd/hetrd's packed form, d, e and taus and geqp3's packed form,
pivots and taus entry by entry (both are unique given xLARFG's convention); the solves with
NumPy's dense solve, XLA's gtsv on JAX's pivoting cases, and the perturbed solve's finite
answers for singular systems (what JAX's tests ask of XLA's CPU backend)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from pjrtkit import jax_compat
from pjrtkit.expansions.jax_impl.pivoted_qr import geqp3
from pjrtkit.expansions.jax_impl.tridiagonal import tridiagonal, tridiagonal_solve
from pjrtkit.testing.programs import run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from expansion_support import diagonal_sweep, seeded_normal

# Householder reductions agree with LAPACK's to a few n * eps * ||A||.
LOOSEN = 100.0
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]



def _run(fn, *args):
    with jax.enable_x64(True):
        return run_on_xla_cpu(fn, args)


# The sweeps run their diagonal in make test (every shape, dtype and flag at least once), the
# rest of the product in make test-long (expansion_support.diagonal_sweep).
@diagonal_sweep("shape, dtype, lower", [(1, 1), (2, 2, 2), (4, 4), (10, 10)], DTYPES, [True, False])
def test_tridiagonal_is_lapacks_sytrd(shape, dtype, lower):
    a = seeded_normal(f"sytrd{shape}{dtype}{lower}", shape, dtype)
    ours = _run(lambda a: tridiagonal(a, lower=lower), a)
    primitive = jax_compat.linalg_primitive("tridiagonal")
    theirs = _run(lambda a: primitive.bind(a, lower=lower), a)
    for x, y, name in zip(ours, theirs, ("packed", "d", "e", "taus")):
        assert_close(x, y, what=name, loosen=LOOSEN)


@diagonal_sweep("shape, dtype", [(5, 5), (7, 4), (4, 7), (3, 1), (2, 6, 5)], DTYPES)
def test_geqp3_is_lapacks(shape, dtype):
    a = seeded_normal(f"geqp3{shape}{dtype}", shape, dtype)
    jpvt = np.zeros((*shape[:-2], shape[-1]), np.int32)
    ours = _run(geqp3, a, jpvt)
    primitive = jax_compat.linalg_primitive("geqp3")
    theirs = _run(lambda a, j: primitive.bind(a, j, use_magma=False), a, jpvt)
    for x, y, name in zip(ours, theirs, ("packed", "jpvt", "taus")):
        assert_close(x, y, what=name, loosen=LOOSEN)


def test_geqp3_keeps_fixed_columns_in_front():
    a = seeded_normal("geqp3fixed", (6, 5), np.float64)
    jpvt = np.array([0, 1, 0, 0, 1], np.int32)
    ours = _run(geqp3, a, jpvt)
    primitive = jax_compat.linalg_primitive("geqp3")
    theirs = _run(lambda a, j: primitive.bind(a, j, use_magma=False), a, jpvt)
    assert np.array_equal(ours[1], theirs[1]) and list(ours[1][:2]) == [2, 5]
    assert_close(ours[0], theirs[0], what="packed", loosen=LOOSEN)


def _dense(dl, d, du):
    return np.diag(d) + np.diag(dl[1:], -1) + np.diag(du[:-1], 1)


@diagonal_sweep("n, dtype, perturb", [1, 2, 3, 9], DTYPES, [False, True])
def test_tridiagonal_solve_solves(n, dtype, perturb):
    dl, d, du = (seeded_normal(f"gtsv{n}{dtype}{part}", (2, n), dtype) for part in "lmu")
    b = seeded_normal(f"gtsvb{n}{dtype}", (2, n, 3), dtype)
    x = _run(lambda *args: tridiagonal_solve(*args, perturb_singular=perturb), dl, d, du, b)[0]
    wide = np.result_type(dtype, np.float64)
    want = np.stack([np.linalg.solve(_dense(*(v[i].astype(wide) for v in (dl, d, du))),
                                     b[i].astype(wide)) for i in range(2)])
    assert_close(x, want.astype(dtype), what="x", loosen=1000.0)


@pytest.mark.parametrize("perturb", [False, True])
def test_tridiagonal_solve_pivots_where_jax_tests_ask(perturb):
    f32 = np.float32
    cases = [([0, 2, -2, 3], [1, 4, 1, -1], [2, -1, 1, 0], [1, 2, 3, 4], [8, -3.5, 0, -4]),
             ([0, 1, -6, 1], [1, -1, 2, 1], [2, 1, -1, 0], [1, 2, -1, -2], [5, -2, -5, 3])]
    for dl, d, du, b, want in cases:
        x = _run(lambda *args: tridiagonal_solve(*args, perturb_singular=perturb),
                 *(np.array(v, f32) for v in (dl, d, du)), np.array(b, f32)[:, None])[0]
        np.testing.assert_allclose(x[:, 0], want, rtol=1e-6, atol=1e-6)


def test_a_singular_system_is_nan_unless_perturbed():
    f32 = np.float32
    systems = [(np.zeros(3, f32),) * 3 + (np.ones((3, 1), f32),),
               (np.array([0, 1], f32), np.array([1, 3], f32), np.array([3, 0], f32),
                np.array([[1], [4]], f32))]
    for dl, d, du, b in systems:
        plain = _run(lambda *a: tridiagonal_solve(*a, perturb_singular=False), dl, d, du, b)[0]
        assert np.isnan(plain).all()
        nudged = _run(lambda *a: tridiagonal_solve(*a, perturb_singular=True), dl, d, du, b)[0]
        assert np.isfinite(nudged).all() and (np.abs(nudged) > 1e6).all()
