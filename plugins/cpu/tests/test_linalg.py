"""Linear algebra on pjrtkit_cpu against XLA's CPU backend, in one process.

Real JAX programs jitted on the pjrtkit_cpu device (so JAX lowers them with the rules the
plugin contributes through ``pjrtkit_jax_lowering_rules``, and they go through the PJRT C API
and compile) and on XLA's cpu device. Decompositions are compared up to the freedom they
have: sorted eigen/singular values against XLA's, reconstructions and orthogonality against
the input within a backward-error bound. Unique answers (solve, inv, det, cholesky, ...) are
compared directly.
"""
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.testing.tolerances import assert_close

REAL = [np.float32, np.float64]
# Complex inputs, and real float32 (eig and complex schur of a real matrix return complex).
COMPLEX_END_TO_END = [np.complex64, np.complex128, np.float32]


def on(platform, fn, *args):
    device = jax.devices(platform)[0]
    with jax.default_device(device):
        out = jax.jit(fn)(*args)
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]


def both(fn, *args):
    """(pjrtkit_cpu's outputs, XLA cpu's outputs) of ``fn`` jitted on ``args``."""
    return on("pjrtkit_cpu", fn, *args), on("cpu", fn, *args)


def matrices(rng, shape, dtype):
    dtype = np.dtype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def hermitian(x):
    return (x + np.conj(np.swapaxes(x, -1, -2))) / 2


def adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


def assert_reconstructs(product, a, what):
    """Backward error of a decomposition: ||product - a|| <= 30 n eps ||a|| per matrix (LAPACK's
    decompositions are backward stable with a small constant times n eps)."""
    eps = np.finfo(a.dtype).eps
    n = max(a.shape[-2:])
    error = np.linalg.norm(product - a, axis=(-2, -1))
    bound = 30 * n * eps * np.maximum(np.linalg.norm(a, axis=(-2, -1)), 1.0)
    assert np.all(error <= bound), f"{what}: residual {error} above {bound}"


def assert_orthonormal_columns(q, what):
    k = q.shape[-1]
    eye = np.broadcast_to(np.eye(k, dtype=q.dtype), q.shape[:-2] + (k, k))
    assert_reconstructs(adjoint(q) @ q, eye, what)


# -- symmetric eigendecomposition ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 6, 6), (1, 1)])
def test_eigh(rng, dtype, shape):
    a = hermitian(matrices(rng, shape, dtype))
    (w, v), (w_ref, _) = both(jnp.linalg.eigh, a)
    assert_close(w, w_ref, what="eigenvalues (ascending)", loosen=10)
    assert_reconstructs(v * w[..., None, :] @ adjoint(v), a, "V diag(w) V^H")
    assert_orthonormal_columns(v, "eigenvectors")


@pytest.mark.parametrize("lower", [True, False])
def test_eigh_reads_only_the_triangle_it_is_told(rng, lower):
    a = hermitian(matrices(rng, (6, 6), np.float64))
    garbage = a + np.triu(np.full_like(a, 7.0), 1) if lower else a + np.tril(np.full_like(a, 7.0), -1)

    def fn(x):
        return lax.linalg.eigh(x, lower=lower, symmetrize_input=False)

    (v, w), (_, w_ref) = both(fn, garbage)
    assert_close(w, w_ref, what="eigenvalues")
    assert_close(np.sort(w), np.linalg.eigvalsh(a), what="eigenvalues of the triangle", loosen=100)


def test_eigh_subset_by_index(rng):
    a = hermitian(matrices(rng, (7, 7), np.float64))

    def fn(x):
        return lax.linalg.eigh(x, subset_by_index=(2, 5))

    v, w = on("pjrtkit_cpu", fn, a)
    assert v.shape == (7, 3) and w.shape == (3,)
    assert_close(w, np.linalg.eigvalsh(a)[2:5], what="eigenvalues 2..4", loosen=100)
    assert_reconstructs(a @ v, v * w, "A v = w v")


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_eigvalsh(rng, dtype):
    a = hermitian(matrices(rng, (8, 8), dtype))
    (w,), (w_ref,) = both(jnp.linalg.eigvalsh, a)
    assert_close(w, w_ref, what="eigenvalues", loosen=10)


# -- singular value decomposition -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd(rng, dtype, shape, full_matrices):
    a = matrices(rng, shape, dtype)
    (u, s, vt), (u_ref, s_ref, vt_ref) = both(
        lambda x: jnp.linalg.svd(x, full_matrices=full_matrices), a)
    assert (u.shape, vt.shape) == (u_ref.shape, vt_ref.shape)
    assert_close(s, s_ref, what="singular values (descending)", loosen=10)
    k = s.shape[-1]
    assert_reconstructs((u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :], a, "U S V^T")
    assert_orthonormal_columns(u, "U")
    assert_orthonormal_columns(adjoint(vt), "V")


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_svd_values_only_and_the_qr_algorithm(rng, dtype):
    a = matrices(rng, (3, 7, 5), dtype)
    (s,), (s_ref,) = both(lambda x: jnp.linalg.svd(x, compute_uv=False), a)
    assert_close(s, s_ref, what="singular values", loosen=10)
    _, s_qr, _ = on("pjrtkit_cpu", lambda x: lax.linalg.svd(
        x, full_matrices=False, algorithm=lax.linalg.SvdAlgorithm.QR), a)
    assert_close(s_qr, s_ref, what="singular values by gesvd", loosen=10)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_svd_of_an_empty_matrix(shape):
    a = np.zeros(shape, np.float32)
    for full in (False, True):
        ours, ref = both(lambda x, full=full: jnp.linalg.svd(x, full_matrices=full), a)
        for i, (x, y) in enumerate(zip(ours, ref)):
            assert_close(x, y, what=f"output {i}, full_matrices={full}")


# -- QR, LU, Cholesky -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(rng, dtype, shape, mode):
    a = matrices(rng, shape, dtype)
    (q, r), (q_ref, r_ref) = both(lambda x: jnp.linalg.qr(x, mode=mode), a)
    assert (q.shape, r.shape) == (q_ref.shape, r_ref.shape)
    assert_reconstructs(q @ r, a, "Q R")
    assert_orthonormal_columns(q, "Q")
    assert np.all(np.tril(r, -1) == 0), "R is upper triangular"
    k = min(shape[-2:])
    # Q and R are unique up to the sign of each of the first k rows of R.
    diagonal = np.diagonal(r, axis1=-2, axis2=-1)[..., :k]
    assert_close(np.abs(diagonal), np.abs(np.diagonal(r_ref, axis1=-2, axis2=-1)[..., :k]),
                 what="|diag R|", loosen=10)


@pytest.mark.parametrize("dtype", [*REAL, np.complex64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 5, 5), (0, 3)])
@pytest.mark.parametrize("mode", ["r", "economic", "full"])
def test_qr_with_column_pivoting(rng, dtype, shape, mode):
    """geqp3: the pivots equal XLA's (LAPACK picks the same columns), and R and Q agree."""
    a = matrices(rng, shape, dtype)
    ours, ref = both(lambda x: jsl.qr(x, pivoting=True, mode=mode), a)
    assert [x.shape for x in ours] == [x.shape for x in ref]
    np.testing.assert_array_equal(ours[-1], ref[-1])
    for name, got, want in zip(["Q or R", "R"], ours[:-1], ref[:-1]):
        assert_close(got, want, what=name, loosen=10)


def _tridiagonal(rng, dtype, batch, m, kind):
    dl, d, du = (matrices(rng, (*batch, m), dtype) for _ in range(3))
    if kind == "singular":  # rank m - 1 or less
        d[...] = 0
        dl[...] = du[...] = 1
    elif kind == "needs pivoting":
        d[...] = 1e-9
    dl[..., 0] = du[..., -1] = 0
    return dl, d, du, matrices(rng, (*batch, m, 3), dtype)


@pytest.mark.parametrize("dtype", [*REAL, np.complex64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("m", [1, 2, 7])
@pytest.mark.parametrize("kind", ["random", "needs pivoting", "singular"])
@pytest.mark.parametrize("perturb", [False, True], ids=["exact", "perturb_singular"])
def test_tridiagonal_solve(rng, dtype, m, kind, perturb):
    """Row-pivoted elimination as XLA's CPU does it: LAPACK's gtsv (NaN for a singular
    system), or with perturb_singular jaxlib's elimination that nudges tiny pivots (finite
    for a singular system, and XLA's numbers)."""
    operands = _tridiagonal(rng, dtype, (2,), m, kind)
    (ours,), (ref,) = both(
        lambda *x: lax.linalg.tridiagonal_solve(*x, perturb_singular=perturb), *operands)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    finite = ~np.isnan(ref)
    assert_close(ours[finite], ref[finite], what="x", loosen=10)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(5, 5), (6, 4), (4, 6), (2, 3, 4, 4)])
def test_lu(rng, dtype, shape):
    a = matrices(rng, shape, dtype)
    (lu, pivots, perm), (lu_ref, pivots_ref, perm_ref) = both(lax.linalg.lu, a)
    # Partial pivoting picks the largest entry: unique for random matrices.
    np.testing.assert_array_equal(pivots, pivots_ref)
    np.testing.assert_array_equal(perm, perm_ref)
    assert_close(lu, lu_ref, what="packed L and U", loosen=10)
    m, n = shape[-2:]
    k = min(m, n)
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=dtype)
    upper = np.triu(lu[..., :k, :])
    permuted = np.take_along_axis(a, perm[..., :, None].astype(np.intp), axis=-2)
    assert_reconstructs(lower @ upper, permuted, "P A = L U")


def test_lu_of_a_singular_matrix_is_a_factorization_not_nan(rng):
    a = matrices(rng, (4, 4), np.float64)
    a[:, 2] = a[:, 0]
    ours, ref = both(lax.linalg.lu, a)
    assert np.isfinite(ours[0]).all()
    for i, (x, y) in enumerate(zip(ours, ref)):
        assert_close(x, y, what=f"output {i}", loosen=100)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 4, 4)])
def test_cholesky(rng, dtype, shape):
    x = matrices(rng, shape, dtype)
    spd = x @ adjoint(x) + shape[-1] * np.eye(shape[-1], dtype=dtype)
    (factor,), (factor_ref,) = both(jnp.linalg.cholesky, spd)
    assert_close(factor, factor_ref, what="Cholesky factor", loosen=10)
    assert_reconstructs(factor @ adjoint(factor), spd, "L L^H")


def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan_as_on_xla(rng):
    a = hermitian(matrices(rng, (2, 4, 4), np.float64))
    a[0] -= 10 * np.eye(4)  # first matrix indefinite, second left alone
    a[1] = a[1] @ a[1].T + np.eye(4)
    (factor,), (factor_ref,) = both(jnp.linalg.cholesky, a)
    # JAX's cpu lowering makes the failed factor NaN; jnp.linalg.cholesky then keeps its tril.
    assert np.isnan(factor_ref[0][np.tril_indices(4)]).all()
    np.testing.assert_array_equal(np.isnan(factor), np.isnan(factor_ref))
    assert_close(factor[1], factor_ref[1], what="the positive definite matrix's factor")


# -- solvers and derived functions ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_solve_inv_det_slogdet(rng, dtype):
    a = matrices(rng, (2, 5, 5), dtype) + 3 * np.eye(5, dtype=dtype)
    b = matrices(rng, (2, 5, 3), dtype)

    def fn(a, b):
        sign, logdet = jnp.linalg.slogdet(a)
        return jnp.linalg.solve(a, b), jnp.linalg.inv(a), jnp.linalg.det(a), sign, logdet

    ours, ref = both(fn, a, b)
    for name, x, y in zip(["solve", "inv", "det", "sign", "logdet"], ours, ref):
        assert_close(x, y, what=name, loosen=10)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_pinv_and_lstsq(rng, dtype):
    a = matrices(rng, (7, 4), dtype)
    b = matrices(rng, (7, 2), dtype)

    def fn(a, b):
        solution, residuals, rank, s = jnp.linalg.lstsq(a, b)
        return jnp.linalg.pinv(a), solution, residuals, rank, s

    ours, ref = both(fn, a, b)
    for name, x, y in zip(["pinv", "lstsq solution", "residuals", "rank", "s"], ours, ref):
        assert_close(x, y, what=name, loosen=100)  # through an SVD: error grows with cond(a)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_scipy_lu_factor_solve_triangular_and_expm(rng, dtype):
    a = matrices(rng, (5, 5), dtype)
    b = matrices(rng, (5, 3), dtype)
    triangle = np.tril(a) + 4 * np.eye(5, dtype=dtype)

    def fn(a, b, t):
        lu, piv = jsl.lu_factor(a)
        return (lu, piv, jsl.lu_solve((lu, piv), b),
                jsl.solve_triangular(t, b, lower=True),
                jsl.solve_triangular(t, b, lower=True, trans="T"),
                jsl.solve_triangular(t.T, b, lower=False, unit_diagonal=True),
                jsl.expm(a / 2))

    ours, ref = both(fn, a, b, triangle)
    names = ["lu", "piv", "lu_solve", "solve_triangular", "trans=T", "unit upper", "expm"]
    for name, x, y in zip(names, ours, ref):
        assert_close(x, y, what=name, loosen=50)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(5, 5), (6, 4), (4, 6)])
def test_scipy_lu_permutation_and_factors(rng, dtype, shape):
    a = matrices(rng, shape, dtype)
    (p, lower, upper), (p_ref, lower_ref, upper_ref) = both(jsl.lu, a)
    # Partial pivoting on a random matrix: P is unique, so L and U are too.
    np.testing.assert_array_equal(p, p_ref)
    assert_close(lower, lower_ref, what="L", loosen=10)
    assert_close(upper, upper_ref, what="U", loosen=10)
    assert_reconstructs(p @ lower @ upper, a, "P L U")


def test_triangular_solve_on_the_right_and_batched(rng):
    a = np.tril(matrices(rng, (3, 4, 4), np.float64)) + 4 * np.eye(4)
    b = matrices(rng, (3, 2, 4), np.float64)

    def fn(a, b):
        return (lax.linalg.triangular_solve(a, b, left_side=False, lower=True),
                lax.linalg.triangular_solve(a, b, left_side=False, lower=True, transpose_a=True))

    ours, ref = both(fn, a, b)
    for i, (x, y) in enumerate(zip(ours, ref)):
        assert_close(x, y, what=f"output {i}", loosen=10)


# -- nonsymmetric: eig, schur, hessenberg, tridiagonal --------------------------------------------

@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_schur(rng, dtype):
    a = matrices(rng, (6, 6), dtype)
    (t, z), (t_ref, _) = both(jsl.schur, a)
    assert_reconstructs(z @ t @ adjoint(z), a, "Z T Z^T")
    assert_orthonormal_columns(z, "Z")
    assert np.all(np.tril(t, -2) == 0), "real Schur form is quasi upper triangular"
    assert_close(np.sort_complex(np.linalg.eigvals(t.astype(np.float64))),
                 np.sort_complex(np.linalg.eigvals(t_ref.astype(np.float64))),
                 what="eigenvalues of T", loosen=1e5 if dtype == np.float32 else 1e3)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
def test_hessenberg(rng, dtype):
    a = matrices(rng, (6, 6), dtype)
    (h, q), (h_ref, _) = both(lambda x: jsl.hessenberg(x, calc_q=True), a)
    assert np.all(np.tril(h, -2) == 0), "H is upper Hessenberg"
    assert_reconstructs(q @ h @ adjoint(q), a, "Q H Q^T")
    assert_orthonormal_columns(q, "Q")
    assert_close(np.abs(h), np.abs(h_ref), what="|H|", loosen=10)


@pytest.mark.parametrize("lower", [True, False])
def test_tridiagonal(rng, lower):
    a = hermitian(matrices(rng, (2, 5, 5), np.float64))
    (_, d, e, _), (_, d_ref, e_ref, _) = both(lambda x: lax.linalg.tridiagonal(x, lower=lower), a)
    assert_close(d, d_ref, what="diagonal")
    assert_close(np.abs(e), np.abs(e_ref), what="|off-diagonal|")
    tri = np.zeros_like(a)
    for i in range(2):
        tri[i] = np.diag(d[i]) + np.diag(e[i], 1) + np.diag(e[i], -1)
    assert_close(np.linalg.eigvalsh(tri), np.linalg.eigvalsh(a), what="same spectrum",
                 loosen=1000)


# -- complex end to end: the acceptance list, through jit on the device ---------------------------

def _eig_residual(a, outputs):
    w, v = outputs
    assert_reconstructs(a @ v, v * w[..., None, :], "A V = V diag(w)")
    return [np.sort_complex(w)]


def _unitary_reconstruction(a, outputs, product, unitary):
    assert_reconstructs(product(*outputs), a, "reconstruction")
    for q in unitary(*outputs):
        assert_orthonormal_columns(q, "unitary factor")
    return []


# (name, fn, make(rng, dtype) -> args, check(args, ours) -> values to compare with XLA's or
# None to compare every output). Unique results are compared directly; decompositions through
# reconstruction, unitarity and sorted values.
END_TO_END = [
    ("eigh", jnp.linalg.eigh, lambda rng, d: (hermitian(matrices(rng, (4, 4), d)),),
     lambda args, out: [out[0]] + _unitary_reconstruction(
         args[0], out, lambda w, v: v * w[None, :] @ adjoint(v), lambda w, v: [v])),
    ("svd", lambda a: jnp.linalg.svd(a, full_matrices=False),
     lambda rng, d: (matrices(rng, (5, 3), d),),
     lambda args, out: [out[1]] + _unitary_reconstruction(
         args[0], out, lambda u, s, vh: (u * s[None, :]) @ vh,
         lambda u, s, vh: [u, adjoint(vh)])),
    ("qr", jnp.linalg.qr, lambda rng, d: (matrices(rng, (5, 3), d),),
     lambda args, out: [np.abs(np.diagonal(out[1]))] + _unitary_reconstruction(
         args[0], out, lambda q, r: q @ r, lambda q, r: [q])),
    ("cholesky", jnp.linalg.cholesky, lambda rng, d: (
        (lambda x: x @ adjoint(x) + 4 * np.eye(4, dtype=d))(matrices(rng, (4, 4), d)),), None),
    ("solve", jnp.linalg.solve, lambda rng, d: (matrices(rng, (4, 4), d) + 3 * np.eye(4, dtype=d),
                                                matrices(rng, (4, 2), d)), None),
    ("inv", jnp.linalg.inv, lambda rng, d: (matrices(rng, (4, 4), d) + 3 * np.eye(4, dtype=d),),
     None),
    ("det", jnp.linalg.det, lambda rng, d: (matrices(rng, (4, 4), d),), None),
    ("slogdet", lambda a: tuple(jnp.linalg.slogdet(a)), lambda rng, d: (matrices(rng, (4, 4), d),),
     None),
    ("pinv", jnp.linalg.pinv, lambda rng, d: (matrices(rng, (5, 3), d),), None),
    ("lstsq", lambda a, b: tuple(jnp.linalg.lstsq(a, b)),
     lambda rng, d: (matrices(rng, (5, 3), d), matrices(rng, (5, 2), d)), None),
    ("eig", jnp.linalg.eig, lambda rng, d: (matrices(rng, (4, 4), d),),
     lambda args, out: _eig_residual(args[0], out)),
    ("lu", jsl.lu, lambda rng, d: (matrices(rng, (4, 4), d),), None),
    ("lu_factor", jsl.lu_factor, lambda rng, d: (matrices(rng, (4, 4), d),), None),
    ("solve_triangular", lambda t, b: jsl.solve_triangular(t, b, lower=True),
     lambda rng, d: (np.tril(matrices(rng, (4, 4), d)) + 3 * np.eye(4, dtype=d),
                     matrices(rng, (4, 2), d)), None),
    ("expm", jsl.expm, lambda rng, d: (matrices(rng, (4, 4), d) / 2,), None),
    ("schur", lambda a: jsl.schur(a, output="complex"), lambda rng, d: (matrices(rng, (4, 4), d),),
     lambda args, out: [np.sort_complex(np.diagonal(out[0]))] + _unitary_reconstruction(
         args[0], out, lambda t, z: z @ t @ adjoint(z), lambda t, z: [z])),
]


# make test runs each function on one complex dtype (complex64 and complex128 in turn), and eig and
# schur of a real matrix; make test-long, which CI runs, the other cases
@pytest.mark.parametrize("name, fn, make, check, dtype", [
    pytest.param(*row, dtype, id=f"{row[0]}-{np.dtype(dtype).name}",
                 marks=() if dtype is COMPLEX_END_TO_END[i % 2]
                 or (dtype is np.float32 and row[0] in ("eig", "schur")) else pytest.mark.long)
    for i, row in enumerate(END_TO_END) for dtype in COMPLEX_END_TO_END])
def test_complex_end_to_end(rng, name, fn, make, check, dtype):
    """Complex inputs (and eig/schur of real ones, whose results are complex) jitted on the
    device, complex matmuls included (pinv, lstsq, reconstructions), checked like the real
    ones against XLA's CPU backend."""
    args = make(rng, dtype)
    ours = on("pjrtkit_cpu", fn, *args)
    ref = on("cpu", fn, *args)
    if check is None:
        pairs = zip(ours, ref)
    else:
        pairs = zip(check(args, ours), check(args, ref))
    for i, (x, y) in enumerate(pairs):
        assert_close(x, y, what=f"{name} value {i}", loosen=100)


# -- what is not supported fails at compile time, and the process lives on ------------------------

def test_a_dtype_lapack_lacks_is_unimplemented_naming_op_and_dtype(registry):
    # The custom call as pjrtkit_cpu.jax_rules emits it (jax >= 0.12 refuses float16 svd itself).
    text = """
    func.func public @main(%a: tensor<3x3xf16>) -> tensor<3xf16> {
      %0 = stablehlo.custom_call @pjrtkit_svd(%a) {backend_config = "{}"}
        : (tensor<3x3xf16>) -> tensor<3xf16>
      return %0 : tensor<3xf16>
    }
    """
    with pytest.raises(Unimplemented, match=r"pjrtkit_svd.*float16"):
        build_plan(load_program(text), registry)
    (w,), (w_ref,) = both(jnp.linalg.eigvalsh, np.eye(3))
    assert_close(w, w_ref, what="eigenvalues after the failure")


def test_sorted_schur_is_unimplemented_at_compile_time():
    def fn(x):
        return lax.linalg.schur(x, sort_eig_vals=True, select_callable=lambda w: w.real > 0)

    with pytest.raises(Exception, match=r"UNIMPLEMENTED.*pjrtkit_schur.*sort"):
        on("pjrtkit_cpu", fn, np.eye(3, dtype=np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_gives_what_xla_gives(rng, bad):
    a = hermitian(matrices(rng, (4, 4), np.float64))
    a[1, 2] = a[2, 1] = bad

    def fn(x):
        return (*jnp.linalg.eigh(x), jnp.linalg.svd(x, compute_uv=False), jsl.schur(x)[0],
                *lax.linalg.lu(x), jnp.linalg.cholesky(x @ x.T), *jnp.linalg.qr(x))

    ours, ref = both(fn, a)
    for i, (x, y) in enumerate(zip(ours, ref)):
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=f"NaNs of output {i}")


# -- complex kernels (LAPACK takes complex itself; see run_complex_kernels) ------------------------

COMPLEX = [np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
def test_complex_eigh_and_svd_kernels(run_complex_kernels, rng, dtype):
    a = hermitian(matrices(rng, (2, 5, 5), dtype))

    def fn(x):
        return (*lax.linalg.eigh(x, symmetrize_input=False),
                *jnp.linalg.svd(x, full_matrices=False))

    (v, w, u, s, vt), (_, w_ref, _, s_ref, _) = run_complex_kernels(fn, a, platform="pjrtkit_cpu")
    assert_close(w, w_ref, what="eigenvalues", loosen=10)
    assert_close(s, s_ref, what="singular values", loosen=10)
    assert_reconstructs(v * w[..., None, :] @ adjoint(v), a, "V diag(w) V^H")
    assert_reconstructs((u * s[..., None, :]) @ vt, a, "U S V^H")


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
def test_complex_qr_lu_and_eig_kernels(run_complex_kernels, rng, dtype):
    a = matrices(rng, (6, 4), dtype)
    square = matrices(rng, (2, 4, 4), dtype)

    def fn(a, square):
        h, taus = jnp.linalg.qr(a, mode="raw")
        return (h, taus, lax.linalg.householder_product(h.T, taus), *lax.linalg.lu(square),
                *jnp.linalg.eig(square))

    ours, ref = run_complex_kernels(fn, a, square, platform="pjrtkit_cpu")
    h, taus, q, lu, pivots, perm, w, v = ours
    for name, x, y in zip(["raw qr", "taus", "Q", "lu", "pivots", "perm"], ours, ref):
        assert_close(x, y, what=name, loosen=10)
    assert_orthonormal_columns(q, "Q")
    assert_reconstructs(q @ np.triu(h.T[:4]), a, "Q R")
    assert_close(np.sort_complex(w.ravel()), np.sort_complex(ref[6].ravel()), what="eigenvalues",
                 loosen=100)
    assert_reconstructs(square @ v, v * w[..., None, :], "A V = V diag(w)")


def test_eig_vectors_of_a_real_matrix_unpack_conjugate_pairs(run_complex_kernels, rng):
    a = matrices(rng, (6, 6), np.float64)  # real: eigenvalues come in conjugate pairs
    (w, vl, vr), (w_ref, *_) = run_complex_kernels(
        lambda x: lax.linalg.eig(x, compute_left_eigenvectors=True), a, platform="pjrtkit_cpu")
    assert np.any(w.imag != 0), "the sample should have complex eigenvalues"
    assert_close(np.sort_complex(w), np.sort_complex(w_ref), what="eigenvalues", loosen=100)
    assert_reconstructs(a @ vr, vr * w[None, :], "A vr = vr diag(w)")
    assert_reconstructs(adjoint(vl) @ a, w[:, None] * adjoint(vl), "vl^H A = diag(w) vl^H")


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
def test_complex_cholesky_and_triangular_solve(run_complex_kernels, rng, dtype):
    x = matrices(rng, (4, 4), dtype)
    spd = x @ adjoint(x) + 4 * np.eye(4, dtype=dtype)
    b = matrices(rng, (4, 2), dtype)

    def fn(spd, b):
        # The primitive itself: lax.linalg.cholesky's tril adds a complex zero constant.
        factor = lax.linalg.cholesky_p.bind(spd)
        return (factor, lax.linalg.triangular_solve(factor, b, left_side=True, lower=True,
                                                    transpose_a=True, conjugate_a=True))

    ours, ref = run_complex_kernels(fn, spd, b, platform="pjrtkit_cpu")
    for name, got, want in zip(["cholesky", "adjoint solve"], ours, ref):
        assert_close(np.tril(got), np.tril(want), what=name, loosen=10)


def test_pjrtkit_jax_lowering_rules_cover_what_jax_lowers_only_on_its_own_platforms():
    import pjrtkit_cpu.plugin

    from pjrtkit.backend import Backend

    records = Backend("cpu", pjrtkit_cpu.plugin, "test").jax_lowering_rules()
    names = {record.primitive.name for record in records}
    assert names == {"eigh", "svd", "eig", "schur", "hessenberg", "tridiagonal", "lu", "geqp3",
                     "tridiagonal_solve"}
    x = np.eye(3, dtype=np.float32)
    jax.devices()
    text = jax.jit(jnp.linalg.eigh).trace(x).lower(lowering_platforms=("pjrtkit_cpu",)).as_text()
    assert "stablehlo.custom_call @pjrtkit_eigh" in text


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
def test_complex_schur_and_hessenberg_kernels(run_complex_kernels, rng, dtype):
    a = matrices(rng, (2, 5, 5), dtype)

    def fn(x):
        return (*lax.linalg.schur(x), *lax.linalg.hessenberg(x))

    (t, z, packed, taus), (t_ref, _, packed_ref, taus_ref) = run_complex_kernels(
        fn, a, platform="pjrtkit_cpu")
    assert np.all(np.tril(t, -1) == 0), "complex Schur form is upper triangular"
    assert_reconstructs(z @ t @ adjoint(z), a, "Z T Z^H")
    assert_orthonormal_columns(z, "Z")
    assert_close(np.sort_complex(np.diagonal(t, axis1=-2, axis2=-1).ravel()),
                 np.sort_complex(np.diagonal(t_ref, axis1=-2, axis2=-1).ravel()),
                 what="eigenvalues on the diagonal of T", loosen=100)
    # gehrd is deterministic (no pivoting): the packed reflectors equal XLA's.
    assert_close(packed, packed_ref, what="packed Hessenberg form", loosen=10)
    assert_close(taus, taus_ref, what="Householder scalars", loosen=10)
