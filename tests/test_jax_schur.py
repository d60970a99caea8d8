"""pjrtkit's non-symmetric eigenproblem in JAX (``pjrtkit.expansions.jax_impl.schur``), run on
XLA's CPU backend and compared with LAPACK there up to the freedom each result has: the
Hessenberg form directly (gehrd's packed form is unique); Schur forms by ``Z T Z^H = A``,
``Z^H Z = I`` and T's eigenvalues (the real form also by its block structure: 2x2 blocks only
for complex pairs, never adjacent); eigenvectors by residuals ``A v - v w`` and
``u^H A - w u^H``, eigenvalues sorted. A real matrix's eigenvalues come in exact conjugate
pairs, as LAPACK's real driver gives them."""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pjrtkit.expansions.jax_impl.schur import complex_schur, eig, hessenberg, real_schur
from pjrtkit.testing.programs import run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from expansion_support import diagonal_sweep, seeded_normal

# Backward-stable algorithms agree with LAPACK to a few n * eps * ||A||.
LOOSEN = 100.0
CASES = [(np.float32, (5, 5)), (np.float64, (3, 4, 4)), (np.complex64, (6, 6)),
         (np.complex128, (2, 7, 7)), (np.float32, (1, 1)), (np.float64, (12, 12))]
# The Schur forms and eig (a few seconds of compiles a case) run real, complex, batched and 1x1
# in make test, the other three cases in make test-long (which CI runs).
SAMPLED_CASES = [pytest.param(*case, marks=() if k in (0, 3, 4) else pytest.mark.long)
                 for k, case in enumerate(CASES)]



def _wide(x):
    return np.asarray(x).astype(np.complex128)


def _adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


def _zeros_like(x):
    return np.zeros(np.shape(x), np.asarray(x).dtype)


def _run(fn, *args):
    with jax.enable_x64(True):
        return run_on_xla_cpu(fn, args)


@pytest.mark.parametrize("dtype, shape", CASES)
def test_hessenberg_is_lapacks_packed_form(dtype, shape):
    a = seeded_normal(f"hessenberg{shape}{dtype}", shape, dtype)
    ours = _run(hessenberg, a)
    theirs = _run(lax.linalg.hessenberg, a)
    for x, y, name in zip(ours, theirs, ("packed", "taus")):
        assert_close(x, y, what=name, loosen=LOOSEN)


@pytest.mark.parametrize("dtype, shape", SAMPLED_CASES)
def test_complex_schur(dtype, shape):
    complex_dtype = np.result_type(dtype, np.complex64)
    a = seeded_normal(f"schur{shape}{dtype}", shape, complex_dtype)
    t, z = _run(complex_schur, a)
    assert t.dtype == z.dtype == complex_dtype
    assert_close(np.tril(t, -1), _zeros_like(t), what="T is upper triangular")
    rebuilt = (_wide(z) @ _wide(t) @ _adjoint(_wide(z))).astype(complex_dtype)
    assert_close(rebuilt, a, what="Z T Z^H", loosen=LOOSEN)
    gram = (_adjoint(_wide(z)) @ _wide(z)).astype(complex_dtype)
    assert_close(gram, np.broadcast_to(np.eye(shape[-1]), gram.shape).astype(complex_dtype),
                 what="Z^H Z", loosen=LOOSEN)
    reference = _run(lambda x: jnp.linalg.eigvals(x), a)[0]
    assert_close(np.sort_complex(np.diagonal(t, axis1=-2, axis2=-1)),
                 np.sort_complex(reference), what="eigenvalues", loosen=LOOSEN)


@pytest.mark.parametrize("dtype, shape", SAMPLED_CASES)
def test_eig_agrees_with_lapack(dtype, shape):
    a = seeded_normal(f"eig{shape}{dtype}", shape, dtype)
    values, left, right = _run(lambda x: eig(x, left=True, right=True), a)
    reference = _run(lambda x: jnp.linalg.eigvals(x), a)[0]
    assert values.dtype == reference.dtype
    assert_close(np.sort_complex(values), np.sort_complex(reference), what="eigenvalues",
                 loosen=LOOSEN)
    wide = _wide(a)
    residual = (wide @ _wide(right) - _wide(right) * _wide(values)[..., None, :])
    assert_close(residual.astype(right.dtype), _zeros_like(right), what="A v - v w",
                 loosen=LOOSEN * np.abs(wide).max())
    left_residual = (_adjoint(_wide(left)) @ wide - _wide(values)[..., :, None] * _adjoint(_wide(left)))
    assert_close(left_residual.astype(left.dtype), _zeros_like(left), what="u^H A - w u^H",
                 loosen=LOOSEN * np.abs(wide).max())
    norms = np.linalg.norm(_wide(right), axis=-2).astype(np.finfo(right.dtype).dtype)
    assert_close(norms, np.ones_like(norms), what="unit eigenvectors", loosen=LOOSEN)


def test_the_eigenvalues_of_a_real_matrix_are_exact_conjugate_pairs():
    a = seeded_normal("pairs", (8, 8), np.float32)
    values = _run(lambda x: eig(x, left=False, right=False), a)[0]
    assert np.array_equal(np.sort_complex(values), np.sort_complex(np.conj(values)))


def _symmetric():
    x = seeded_normal("real_schur_symmetric", (5, 5), np.float64)
    return (x + x.T) / 2


def _real_schur_cases():
    rng = np.random.default_rng(zlib.crc32(b"real_schur"))
    cyclic = np.roll(np.eye(6), 1, axis=0)  # every eigenvalue on the unit circle
    companion = np.diag(np.ones(5), -1)
    companion[0] = [1, -2, 3, -4, 5, -6]
    return {"random": rng.normal(size=(2, 7, 7)), "symmetric": _symmetric(),
            "cyclic": cyclic, "companion": companion, "jordan": np.eye(4) + np.diag(np.ones(3), 1),
            "rotation": np.array([[0.0, 1.0], [-1.0, 0.0]]), "zeros": np.zeros((3, 3)),
            "larger": rng.normal(size=(40, 40))}


# every case in make test, in one of the two dtypes (the other in make test-long)
@diagonal_sweep("case, dtype", sorted(_real_schur_cases()), [np.float32, np.float64])
def test_real_schur_form_is_a_real_schur_decomposition(case, dtype):
    """Francis' double-shift QR (``jax_impl.schur.real_schur``) on XLA's CPU backend: Z T Z^T
    gives A back, Z is orthogonal, T is quasi upper triangular with 2x2 blocks only for complex
    pairs and never two adjacent, and T's eigenvalues are LAPACK's."""
    a = _real_schur_cases()[case].astype(dtype)
    t, z = (np.asarray(x, np.float64) for x in _run(real_schur, a))
    n = a.shape[-1]
    eps = float(np.finfo(dtype).eps)
    scale = max(1.0, float(np.abs(a).max()))
    zt = np.swapaxes(z, -1, -2)
    assert np.abs(z @ t @ zt - a).max() <= 50 * n * eps * scale
    assert np.abs(zt @ z - np.eye(n)).max() <= 50 * n * eps
    assert not np.tril(t, -2).any()
    for tm in t.reshape(-1, n, n):
        below = np.diagonal(tm, -1) != 0
        assert not (below[:-1] & below[1:]).any(), "adjacent 2x2 blocks"
        for k in np.flatnonzero(below):
            block = tm[k:k + 2, k:k + 2]
            half = (block[0, 0] - block[1, 1]) / 2
            assert half * half + block[0, 1] * block[1, 0] < 0, "a 2x2 block with real eigenvalues"
    ours = np.sort_complex(np.linalg.eigvals(t).ravel())
    theirs = np.sort_complex(np.linalg.eigvals(a.astype(np.float64)).ravel())
    # (a defective eigenvalue, the Jordan block's, moves by about sqrt(eps))
    tolerance = (np.sqrt(eps) if case == "jordan" else 200 * n * eps) * scale
    assert np.abs(ours - theirs).max() <= tolerance
