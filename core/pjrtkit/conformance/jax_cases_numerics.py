"""Layer-3 cases for complex numbers, ``jnp.fft`` and linear algebra, as users call them.

Decompositions are compared up to the freedom each has (``Case.invariants``): eigenvectors,
singular vectors, Q and Schur vectors are unique only up to a sign or phase per vector, so the
check compares sorted eigen/singular values, reconstructions (``V diag(w) V^H``, ``Q R``,
``Z T Z^H``), orthonormality and residuals (``A V - V diag(w)``), each computed in float64 from
one side's outputs and cast back to the output's dtype. Unique answers (solve, inv, det,
cholesky, lu with partial pivoting on a random matrix, ...) are compared directly. Tolerances
are loosened for linalg (``LINALG_LOOSEN``): backward-stable algorithms agree to a few
``n * eps * ||A||``, not to a few ulps.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.conformance.jax_cases import add, tag

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
REAL, COMPLEX = (F32, F64), (C64, C128)
REAL_OF = {C64: F32, C128: F64, F32: F32, F64: F64}
# Decompositions through different blockings agree to c * n * eps * ||A||; the table's float32
# tolerance is a few ulps.
LINALG_LOOSEN = 100.0


def _random(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    x = rng.normal(0.0, 1.0, size=shape)
    if dtype.kind == "c":
        x = x + 1j * rng.normal(0.0, 1.0, size=shape)
    return x.astype(dtype)


def _adjoint(x: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(x, -1, -2))


def _hermitian(rng, shape, dtype) -> np.ndarray:
    x = _random(rng, shape, dtype)
    return ((x + _adjoint(x)) / 2).astype(dtype)


def _positive_definite(rng, shape, dtype) -> np.ndarray:
    x = _random(rng, shape, dtype)
    return (x @ _adjoint(x) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _well_conditioned(rng, shape, dtype) -> np.ndarray:
    return (_random(rng, shape, dtype) + 3 * np.eye(shape[-1])).astype(dtype)


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _like(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``x`` (computed wide) in ``like``'s dtype; a real result of complex inputs stays real."""
    if like.dtype.kind != "c":
        x = np.real(x)
    return np.asarray(x).astype(like.dtype)


def _gram(q: np.ndarray) -> np.ndarray:
    return _like(_adjoint(_wide(q)) @ _wide(q), q)


# -- invariants: what must agree when the outputs themselves may differ --------------------------

def _eigh_invariants(outputs, args):
    w, v = outputs
    reconstruction = (_wide(v) * _wide(w)[..., None, :]) @ _adjoint(_wide(v))
    return [w, _like(reconstruction, v), _gram(v)]


def _svd_invariants(outputs, args):
    u, s, vh = outputs
    k = s.shape[-1]
    product = (_wide(u)[..., :, :k] * _wide(s)[..., None, :]) @ _wide(vh)[..., :k, :]
    return [s, _like(product, u), _gram(u), _gram(_adjoint(vh))]


def _qr_invariants(outputs, args):
    q, r = outputs
    k = min(q.shape[-2], r.shape[-1])
    diagonal = np.abs(np.diagonal(_wide(r), axis1=-2, axis2=-1))[..., :k]
    return [_like(_wide(q) @ _wide(r), q), _gram(q), _like(diagonal, np.real(r)),
            np.tril(r, -1)]


def _sorted_eigenvalues(w):
    """Eigenvalues in one order whatever order the algorithm found them in: by real part, then
    imaginary part, with real parts equal to 1e-6 of the largest magnitude taken as equal (a
    complex conjugate pair has one real part, which rounding makes differ in the last bits; a
    plain sort_complex then orders the pair by that noise)."""
    w = np.asarray(w)
    scale = float(np.max(np.abs(w))) if w.size else 1.0
    real_key = np.round(w.real / (scale or 1.0), 6)
    order = np.lexsort((w.imag, real_key), axis=-1)
    return np.take_along_axis(w, order, axis=-1)


def _eig_invariants(outputs, args):
    w, v = outputs
    (a,) = args
    residual = _wide(a) @ _wide(v) - _wide(v) * _wide(w)[..., None, :]
    return [_sorted_eigenvalues(w), _like(residual, v)]


def _schur_invariants(outputs, args):
    t, z = outputs
    reconstruction = _wide(z) @ _wide(t) @ _adjoint(_wide(z))
    eigenvalues = _sorted_eigenvalues(np.linalg.eigvals(_wide(t))).astype(
        C128 if t.dtype == F64 or t.dtype == C128 else C64)
    return [_like(reconstruction, t), _gram(z), eigenvalues, np.tril(t, -2)]


# -- the families ---------------------------------------------------------------------------------

def _complex() -> None:
    import jax.numpy as jnp
    from jax import lax

    s = (3, 4)

    def held(count=1, shape=s, dtype=C64, kind="any"):
        def make(rng):
            out = []
            for _ in range(count):
                x = _random(rng, shape, dtype) * 2
                if kind == "nonzero":
                    x = x + np.where(np.abs(x) < 0.5, 1.0, 0.0).astype(dtype)
                out.append(x.astype(dtype))
            return tuple(out)
        return make

    unary = [("negate", jnp.negative), ("conj", jnp.conj), ("real", jnp.real),
             ("imag", jnp.imag), ("abs", jnp.abs), ("angle", jnp.angle), ("exp", jnp.exp),
             ("sqrt", jnp.sqrt), ("sin", jnp.sin), ("tanh", jnp.tanh),
             ("sum", lambda x: jnp.sum(x, axis=1)), ("cumsum", lambda x: jnp.cumsum(x, axis=0)),
             ("transpose", lambda x: x.T)]
    for dtype in COMPLEX:
        for name, fn in unary:
            add("complex", name, fn, held(dtype=dtype), tag(dtype, s), capability="JAX complex")
        add("complex", "log", jnp.log, held(dtype=dtype, kind="nonzero"), tag(dtype, s),
            capability="JAX complex")
        for name, fn in (("add", jnp.add), ("multiply", jnp.multiply),
                         ("equal", jnp.equal)):
            add("complex", name, fn, held(2, dtype=dtype), tag(dtype, s),
                capability="JAX complex")
        add("complex", "divide", jnp.divide, held(2, dtype=dtype, kind="nonzero"),
            tag(dtype, s), capability="JAX complex")
        add("complex", "matmul", jnp.matmul, lambda rng, d=dtype: (
            (rng.integers(-4, 5, (3, 4)) + 1j * rng.integers(-4, 5, (3, 4))).astype(d),
            (rng.integers(-4, 5, (4, 2)) + 1j * rng.integers(-4, 5, (4, 2))).astype(d)),
            tag(dtype, (3, 4)), capability="JAX complex")
        real = REAL_OF[dtype]
        add("complex", "from_parts", lax.complex,
            lambda rng, r=real: (_random(rng, s, r), _random(rng, s, r)), tag(real, s),
            capability="JAX complex")
        add("complex", "to_complex", lambda x, d=dtype: x.astype(d),
            lambda rng, r=real: (_random(rng, s, r),), tag(real, s), capability="JAX complex")


def _fft() -> None:
    import jax.numpy as jnp

    cases = [
        ("fft", jnp.fft.fft, (4, 8), COMPLEX),
        ("ifft", jnp.fft.ifft, (4, 8), COMPLEX),
        ("fft2", jnp.fft.fft2, (2, 4, 6), COMPLEX),
        ("fftn_axes", lambda x: jnp.fft.fftn(x, axes=(0, 2)), (4, 3, 5), (C64,)),
        ("rfft", jnp.fft.rfft, (3, 10), REAL),
        ("irfft", lambda x: jnp.fft.irfft(x, n=10), (3, 6), COMPLEX),
        ("rfft2", jnp.fft.rfft2, (2, 6, 8), REAL),
        ("irfftn", lambda x: jnp.fft.irfftn(x, s=(4, 6)), (4, 4), (C64,)),
        ("fft_norm_ortho", lambda x: jnp.fft.fft(x, norm="ortho"), (16,), (C64,)),
        ("fftfreq_shift", lambda x: jnp.fft.fftshift(jnp.fft.fft(x)), (9,), (C64,)),
    ]
    for name, fn, shape, dtypes in cases:
        for dtype in dtypes:
            # pocketfft and XLA's DUCC sum in different orders: a few ulps of log2(n) terms.
            add("fft", name, fn, lambda rng, shape=shape, dtype=dtype: (
                _random(rng, shape, dtype),), tag(dtype, shape), capability="JAX fft",
                loosen=10.0)


def _linalg() -> None:
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax import lax

    def one(maker, shape):
        return lambda rng, dtype: (maker(rng, shape, dtype),)

    square, tall = (5, 5), (6, 4)

    def slogdet(a):
        sign, logdet = jnp.linalg.slogdet(a)
        return sign, logdet

    def lstsq(a, b):
        solution, residuals, rank, singular = jnp.linalg.lstsq(a, b)
        return solution, residuals, rank, singular

    # (name, fn, make(rng, dtype), dtypes, invariants)
    # Complex: both widths for the decompositions, complex64 alone for the rest.
    both, narrow = REAL + COMPLEX, REAL + (C64,)
    table = [
        ("eigh", jnp.linalg.eigh, one(_hermitian, square), both, _eigh_invariants),
        ("eigvalsh", jnp.linalg.eigvalsh, one(_hermitian, square), narrow, None),
        ("svd", lambda a: jnp.linalg.svd(a, full_matrices=False), one(_random, tall),
         both, _svd_invariants),
        ("svd_values", lambda a: jnp.linalg.svd(a, compute_uv=False), one(_random, tall),
         narrow, None),
        ("qr", jnp.linalg.qr, one(_random, tall), both, _qr_invariants),
        ("cholesky", jnp.linalg.cholesky, one(_positive_definite, square), both,
         None),
        ("solve", jnp.linalg.solve, lambda rng, d: (_well_conditioned(rng, square, d),
                                                    _random(rng, (5, 2), d)),
         both, None),
        ("inv", jnp.linalg.inv, one(_well_conditioned, square), narrow, None),
        ("det", jnp.linalg.det, one(_well_conditioned, square), narrow, None),
        ("slogdet", slogdet, one(_well_conditioned, square), narrow, None),
        ("pinv", jnp.linalg.pinv, one(_random, tall), narrow, None),
        ("lstsq", lstsq, lambda rng, d: (_random(rng, tall, d), _random(rng, (6, 2), d)),
         narrow, None),
        ("eig", jnp.linalg.eig, one(_random, square), both, _eig_invariants),
        ("lu", jsl.lu, one(_random, square), narrow, None),
        ("lax_lu", lax.linalg.lu, one(_random, tall), narrow, None),
        ("lu_factor", jsl.lu_factor, one(_random, square), narrow, None),
        ("lu_solve", lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b),
         lambda rng, d: (_well_conditioned(rng, square, d), _random(rng, (5, 3), d)),
         narrow, None),
        ("solve_triangular", lambda t, b: jsl.solve_triangular(t, b, lower=True),
         lambda rng, d: (np.tril(_well_conditioned(rng, square, d)), _random(rng, (5, 3), d)),
         narrow, None),
        ("solve_triangular_trans", lambda t, b: jsl.solve_triangular(t, b, trans="T"),
         lambda rng, d: (np.triu(_well_conditioned(rng, square, d)), _random(rng, (5, 3), d)),
         REAL, None),
        ("expm", jsl.expm, lambda rng, d: ((_random(rng, square, d) / 2).astype(d),),
         REAL, None),
        ("schur", jsl.schur, one(_random, square), REAL, _schur_invariants),
        ("schur_complex", lambda a: jsl.schur(a, output="complex"), one(_random, square),
         narrow, _schur_invariants),
        ("batched_eigh", jnp.linalg.eigh, one(_hermitian, (3, 4, 4)), (F32,), _eigh_invariants),
        ("batched_solve", jnp.linalg.solve,
         lambda rng, d: (_well_conditioned(rng, (2, 4, 4), d), _random(rng, (2, 4, 1), d)),
         (F32,), None),
    ]
    for name, fn, make, dtypes, invariants in table:
        for dtype in dtypes:
            shape = make(np.random.default_rng(0), dtype)[0].shape
            add("linalg", name, fn, lambda rng, make=make, dtype=dtype: make(rng, dtype),
                tag(dtype, shape), invariants=invariants, loosen=LINALG_LOOSEN,
                capability="JAX linalg complex" if dtype.kind == "c" else "JAX linalg")


BUILDERS = (_complex, _fft, _linalg)
