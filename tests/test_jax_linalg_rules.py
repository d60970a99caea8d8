"""The JAX-rule-level linear algebra (``pjrtkit.expansions.jax_linalg``): pjrtkit's Jacobi
eigh compared with LAPACK's (XLA's CPU backend) up to the freedom of eigenvectors (sign or
phase): eigenvalues directly, reconstruction ``V diag(w) V^H`` and ``V^H V``; the same
algorithm lowered for a platform without rules, expanded and run on the reference rules; the
records backends return; and the primitives without a portable form refused as UNIMPLEMENTED."""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit import jax_compat
from pjrtkit.expansions import jax_linalg
from pjrtkit.expansions.jax_impl.jacobi import jacobi_eigh, tournament_permutation
from pjrtkit.testing.programs import run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from expansion_support import primitives, run_expanded

# Eigen-solvers agree with LAPACK to a few n * eps * ||A||, not to the table's few ulps.
LOOSEN = 100.0


def _hermitian(name, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.normal(size=shape)
    return ((x + np.conj(np.swapaxes(x, -1, -2))) / 2).astype(dtype)


def _wide(x):
    return np.asarray(x).astype(np.complex128 if np.asarray(x).dtype.kind == "c" else np.float64)


def _invariants(vectors, values):
    v, w = _wide(vectors), _wide(values)
    adjoint = np.conj(np.swapaxes(v, -1, -2))
    return (np.asarray(values), ((v * w[..., None, :]) @ adjoint).astype(vectors.dtype),
            (adjoint @ v).astype(vectors.dtype))


def _check_against_lapack(a, vectors, values, what):
    with jax.enable_x64(True):
        reference = run_on_xla_cpu(lambda a: jnp.linalg.eigh(a, symmetrize_input=False), (a,))
    w_ref, v_ref = reference
    for ours, theirs, name in zip(_invariants(vectors, values), _invariants(v_ref, w_ref),
                                  ("eigenvalues", "reconstruction", "V^H V")):
        assert_close(ours, theirs, what=f"{what}: {name}", loosen=LOOSEN)


@pytest.mark.parametrize("n", [4, 6, 8, 10, 256])
def test_the_tournament_meets_every_pair_once_per_sweep(n):
    perm = tournament_permutation(n)
    order, met = list(range(n)), set()
    for _ in range(n - 1):
        met.update(frozenset(order[i:i + 2]) for i in range(0, n, 2))
        order = [order[p] for p in perm]
    assert len(met) == n * (n - 1) // 2


@pytest.mark.parametrize("dtype, shape", [
    (np.float32, (1, 1)), (np.complex64, (2, 2)), (np.float32, (5, 5)), (np.complex128, (5, 5)),
    (np.float64, (3, 4, 4)), (np.complex64, (2, 1, 9, 9)), (np.float32, (32, 32))])
def test_jacobi_eigh_agrees_with_lapack(dtype, shape):
    a = _hermitian(f"eigh{shape}{dtype}", shape, dtype)
    with jax.enable_x64(True):
        vectors, values = run_on_xla_cpu(jacobi_eigh, (a,))
    assert values.dtype == np.finfo(dtype).dtype and vectors.dtype == dtype
    assert np.all(np.diff(values, axis=-1) >= 0), "eigenvalues ascend"
    _check_against_lapack(a, vectors, values, "jacobi eigh")


@pytest.mark.parametrize("lower", [True, False])
def test_only_the_named_triangle_and_the_real_diagonal_are_read(lower):
    a = _hermitian(f"triangle{lower}", (5, 5), np.complex64)
    garbage = np.triu(np.full((5, 5), 7 + 3j, np.complex64), 1)
    noisy = (a + (garbage if lower else garbage.T) + 2j * np.eye(5)).astype(np.complex64)
    with jax.enable_x64(True):
        vectors, values = run_on_xla_cpu(lambda x: jacobi_eigh(x, lower=lower), (noisy,))
    _check_against_lapack(a, vectors, values, f"lower={lower}")


def test_subset_by_index_keeps_that_slice_of_the_ascending_spectrum():
    a = _hermitian("subset", (6, 6), np.float64)
    with jax.enable_x64(True):
        vectors, values = run_on_xla_cpu(lambda x: jacobi_eigh(x, subset_by_index=(2, 5)), (a,))
        everything = run_on_xla_cpu(jacobi_eigh, (a,))[1]
    assert vectors.shape == (6, 3)
    assert_close(values, everything[2:5], what="eigenvalues 2..4")


def test_a_degenerate_spectrum():
    """Repeated eigenvalues (the identity plus a rank-one term): vectors stay orthonormal."""
    u = np.linalg.qr(np.random.default_rng(3).normal(size=(6, 6)))[0]
    a = (u @ np.diag([1.0, 1.0, 1.0, 2.0, 2.0, 5.0]) @ u.T).astype(np.float32)
    with jax.enable_x64(True):
        vectors, values = run_on_xla_cpu(jacobi_eigh, (a,))
    _check_against_lapack(a, vectors, values, "degenerate")


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_jacobi_eigh_expanded_onto_primitives_runs_on_the_reference_rules(dtype):
    """The StableHLO the rule lowers to (for a platform without rules), expanded and run on
    the reference rules: the same numbers as XLA's CPU backend running the same algorithm."""
    a = _hermitian(f"pipeline{dtype}", (2, 5, 5), dtype)
    with jax.enable_x64(True):
        _, ours = run_expanded(jacobi_eigh, (a,), primitives(), platform="pjrtkit_expansions_test")
        reference = run_on_xla_cpu(jacobi_eigh, (a,))
    for x, r, name in zip(_invariants(*ours), _invariants(*reference),
                          ("eigenvalues", "reconstruction", "V^H V")):
        assert_close(x, r, what=name, loosen=LOOSEN)


def test_the_records_cover_what_jax_lowers_only_on_its_own_platforms():
    records = list(jax_linalg.portable_linalg_rules())
    names = {record.primitive.name for record in records}
    assert names == {"eigh", "svd", "eig", "schur", "hessenberg", "tridiagonal", "geqp3",
                     "tridiagonal_solve"}
    for record in records:
        assert record.primitive is jax_compat.linalg_primitive(record.primitive.name)
        assert callable(record.rule)


def test_a_primitive_without_a_portable_form_is_unimplemented_naming_it():
    rule = jax_linalg.unimplemented_rule("schur", "no portable form")

    class Context:
        class module_context:
            platforms = ("pjrtkit_cuda",)

    with pytest.raises(NotImplementedError, match="UNIMPLEMENTED: schur on pjrtkit_cuda: no "
                                                  "portable form"):
        rule(Context(), None)

