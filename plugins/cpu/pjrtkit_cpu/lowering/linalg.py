"""Linear algebra on LAPACK through SciPy: ``stablehlo.cholesky``, ``stablehlo.triangular_solve``,
JAX's own custom-call targets ``Qr`` and ``ProductOfElementaryHouseholderReflectors`` (and, for
programs exported for ``tpu``, ``Eigh`` and ``LuDecomposition``), and the
``pjrtkit_<primitive>`` targets that ``pjrtkit_cpu.jax_rules`` emits for eigh, svd, eig, schur,
hessenberg, tridiagonal and lu.

Every kernel calls the LAPACK routine JAX's own cpu lowering calls (jaxlib takes those from
SciPy too), one matrix of the batch at a time, and treats LAPACK's ``info`` as that lowering
does: a failed matrix comes back as NaN (for lu only an illegal argument, not a singular
matrix, counts as failure). So results agree with XLA's CPU backend, NaN and all. Shapes are
checked at compile time, so SciPy never sees a matrix LAPACK would reject; dtypes other than
float32, float64, complex64 and complex128 are UNIMPLEMENTED naming the op and the dtype.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from pjrtkit.errors import InvalidArgument
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.semantics.dtypes import COMPLEXES, FLOAT32, FLOAT64

from pjrtkit_cpu.jax_rules import target
from pjrtkit_cpu.lowering.registry import RULES

LAPACK_DTYPES = frozenset({FLOAT32, FLOAT64, *COMPLEXES})


def lapack(name: str, dtype: np.dtype) -> Callable:
    """SciPy's wrapper of LAPACK routine ``name`` (without its s/d/c/z letter) for ``dtype``."""
    from scipy.linalg import lapack as scipy_lapack

    return scipy_lapack.get_lapack_funcs((name,), dtype=dtype)[0]


def unsupported(op, ctx, why: str):
    """UNIMPLEMENTED for ``op``, naming the custom-call target too (the op's own description
    shows only ``stablehlo.custom_call``)."""
    target_name = op.attributes.get("call_target_name")
    return ctx.unimplemented(op, f"@{target_name}: {why}" if target_name else why)


def expect_matrices(op, count: int) -> None:
    """INVALID_ARGUMENT unless ``op`` has at least ``count`` operands, the first a batch of
    matrices: a custom call written by hand may name a target with another signature."""
    shapes = [v.type.shape for v in op.operands]
    if len(shapes) < count or len(shapes[0]) < 2:
        target_name = op.attributes.get("call_target_name", op.name)
        raise InvalidArgument(f"custom_call @{target_name}: operands {shapes} do not match its "
                              f"signature ({count} operand(s), the first of rank >= 2)")


def lapack_dtype(op, ctx, operand: int = 0) -> np.dtype:
    """The LAPACK dtype of ``op``'s operand, or UNIMPLEMENTED naming the op and the dtype
    (INVALID_ARGUMENT when the operand is not a batch of matrices)."""
    expect_matrices(op, operand + 1)
    dtype = op.operands[operand].type.dtype
    if dtype not in LAPACK_DTYPES:
        raise unsupported(op, ctx, f"{dtype.name} operands; the LAPACK kernels take "
                                   f"float32, float64, complex64 and complex128")
    return dtype


def backend_config(op) -> dict:
    text = op.attributes.get("backend_config") or "{}"
    return json.loads(text) if isinstance(text, str) else {}


def config_flag(op, config: dict, name: str) -> bool:
    """A flag of the backend_config that pjrtkit_cpu.jax_rules writes; INVALID_ARGUMENT when a
    hand-written call leaves it out."""
    if name not in config:
        raise InvalidArgument(f"custom_call @{op.attributes.get('call_target_name')}: its "
                              f"backend_config has no {name!r} (it has {sorted(config)})")
    return bool(config[name])


def is_complex(dtype: np.dtype) -> bool:
    return dtype.kind == "c"


def batched(op, per_matrix: Callable[..., tuple | None]):
    """A kernel applying ``per_matrix`` to each matrix of the batch.

    Operands and results share their leading batch dimensions: as many as operand 0 has
    beyond its last two. ``per_matrix`` gets one batch element of every operand and returns
    one value per result, or None when LAPACK reports failure: that element's floating
    results are then NaN, as JAX's cpu lowering makes them.
    """
    results = [(r.type.shape, r.type.dtype) for r in op.results]
    batch = tuple(op.operands[0].type.shape[:-2])

    def kernel(*operands):
        # Integer results (pivots) are zero, never garbage, should a matrix fail.
        outs = [np.empty(shape, dtype) if dtype.kind in "fc" else np.zeros(shape, dtype)
                for shape, dtype in results]
        for index in np.ndindex(*batch):
            values = per_matrix(*(x[index] for x in operands))
            for out, value in zip(outs, values or [None] * len(outs)):
                if value is not None:
                    out[index] = value
                elif out.dtype.kind in "fc":
                    out[index] = np.nan
        return tuple(outs)

    return kernel


def empty_results(op) -> tuple[np.ndarray, ...]:
    """One batch element's results of ``op`` for an empty matrix (LAPACK is not called)."""
    batch_rank = len(op.operands[0].type.shape) - 2
    return tuple(np.zeros(r.type.shape[batch_rank:], r.type.dtype) for r in op.results)


def failed(info) -> bool:
    return int(info) != 0


# -- stablehlo ops ------------------------------------------------------------------------------

@RULES.register("stablehlo.cholesky")
def lower_cholesky(op, ctx):
    dtype = lapack_dtype(op, ctx)
    lower = bool(op.attributes.get("lower", False))
    potrf = lapack("potrf", dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return (a,)
        # clean: the other triangle is zero (the spec leaves it implementation-defined).
        factor, info = potrf(a, lower=lower, clean=True)
        return None if failed(info) else (factor,)

    return batched(op, per_matrix)


_TRANSPOSE_CODES = {"NO_TRANSPOSE": 0, "TRANSPOSE": 1, "ADJOINT": 2}


@RULES.register("stablehlo.triangular_solve")
def lower_triangular_solve(op, ctx):
    dtype = lapack_dtype(op, ctx)
    attributes = op.attributes
    transpose = str(attributes.get("transpose_a", "NO_TRANSPOSE"))
    if transpose not in _TRANSPOSE_CODES:
        raise unsupported(op, ctx, f"transpose_a={transpose}")
    from scipy.linalg import blas

    trsm = blas.get_blas_funcs(("trsm",), dtype=dtype)[0]
    options = dict(side=0 if attributes.get("left_side", False) else 1,
                   lower=int(bool(attributes.get("lower", False))),
                   trans_a=_TRANSPOSE_CODES[transpose],
                   diag=int(bool(attributes.get("unit_diagonal", False))))

    def per_matrix(a, b):
        if b.size == 0:
            return (b,)
        # trsm never checks the diagonal: a zero pivot gives inf/NaN, as XLA's does.
        return (trsm(1.0, a, b, **options),)

    return batched(op, per_matrix)


# -- JAX's own custom-call targets (jax.lax.linalg.geqrf / householder_product) -----------------

@RULES.register(custom_call_rule("Qr"))
def lower_qr_factor(op, ctx):
    dtype = lapack_dtype(op, ctx)
    geqrf = lapack("geqrf", dtype)

    def per_matrix(a):
        if a.size == 0:
            return a, np.zeros(0, dtype)
        factors, taus, _work, info = geqrf(a)
        return None if failed(info) else (factors, taus)

    return batched(op, per_matrix)


@RULES.register(custom_call_rule("ProductOfElementaryHouseholderReflectors"))
def lower_householder_product(op, ctx):
    expect_matrices(op, 2)
    dtype = lapack_dtype(op, ctx)
    m, n = op.operands[0].type.shape[-2:]
    k = op.operands[1].type.shape[-1]
    if not m >= n >= k:
        raise unsupported(op, ctx, f"reflectors of shape ({m}, {n}) with {k} taus; "
                                    f"need rows >= columns >= taus")
    orgqr = lapack("ungqr" if is_complex(dtype) else "orgqr", dtype)

    def per_matrix(a, taus):
        if a.size == 0:
            return (a,)
        q, _work, info = orgqr(a, taus)
        return None if failed(info) else (q,)

    return batched(op, per_matrix)


@RULES.register(custom_call_rule("Eigh"))
def lower_tpu_eigh(op, ctx):
    """JAX's TPU lowering of eigh (a program exported for ``tpu``): ``backend_config`` is
    "lower,sort_eigenvalues,max_iterations,tolerance". LAPACK's syevd/heevd answers it (always
    sorted ascending): the same decomposition as the TPU's Jacobi iteration, up to each
    eigenvector's sign or phase and rounding."""
    fields = str(op.attributes.get("backend_config") or "").split(",")
    if len(fields) != 4 or fields[0] not in ("0", "1") or fields[1] not in ("0", "1"):
        raise InvalidArgument(f"custom_call @Eigh: backend_config {fields!r} is not "
                              f"'lower,sort_eigenvalues,max_iterations,tolerance'")
    if len(op.results) != 2:
        raise InvalidArgument(f"custom_call @Eigh: {len(op.results)} results; it returns "
                              f"(eigenvectors, eigenvalues)")
    return eigh_kernel(op, ctx, int(fields[0]), None)


# -- the pjrtkit_<primitive> targets of pjrtkit_cpu.jax_rules -----------------------------------

@RULES.register(custom_call_rule(target("eigh")))
def lower_eigh(op, ctx):
    config = backend_config(op)
    return eigh_kernel(op, ctx, int(config.get("lower", True)), config.get("subset_by_index"))


def eigh_kernel(op, ctx, lower: int, subset):
    """(eigenvectors as columns, eigenvalues ascending) of each Hermitian matrix, read from
    its ``lower`` (else upper) triangle; ``subset`` (low, high) keeps those eigenpairs."""
    dtype = lapack_dtype(op, ctx)
    n = op.operands[0].type.shape[-1]
    whole = subset is None or tuple(subset) == (0, n)
    if whole:
        syevd = lapack("heevd" if is_complex(dtype) else "syevd", dtype)

        def per_matrix(a):
            if n == 0:
                return a, np.zeros(0, a.real.dtype)
            w, v, info = syevd(a, compute_v=1, lower=lower)
            return None if failed(info) else (v, w)
    else:
        low, high = (int(i) for i in subset)
        if not 0 <= low <= high <= n:
            raise unsupported(op, ctx, f"subset_by_index={subset} outside [0, {n}]")
        syevr = lapack("heevr" if is_complex(dtype) else "syevr", dtype)

        def per_matrix(a):
            if high == low:
                return np.zeros((n, 0), dtype), np.zeros(0, a.real.dtype)
            w, z, found, _support, info = syevr(a, compute_v=1, range="I", lower=lower,
                                                il=low + 1, iu=high)
            if failed(info) or found != high - low:
                return None
            return z[:, :found], w[:found]

    return batched(op, per_matrix)


@RULES.register(custom_call_rule(target("svd")))
def lower_svd(op, ctx):
    dtype = lapack_dtype(op, ctx)
    config = backend_config(op)
    m, n = op.operands[0].type.shape[-2:]
    full, compute_uv = config_flag(op, config, "full_matrices"), config_flag(op, config, "compute_uv")
    rank = min(m, n)
    low, high = config.get("subset_by_index") or (0, rank)
    driver = lapack(config.get("driver", "gesdd"), dtype)
    real = np.dtype(dtype.char.lower())

    def per_matrix(a):
        if rank == 0:  # JAX's convention for an empty matrix: identities around no values
            u = np.eye(m, m if full else 0, dtype=dtype)
            vt = np.eye(n if full else 0, n, dtype=dtype)
            return (np.zeros(0, real), u, vt)[:3 if compute_uv else 1]
        u, s, vt, info = driver(a, compute_uv=int(compute_uv), full_matrices=int(full))
        if failed(info):
            return None
        if not compute_uv:
            return (s[low:high],)
        if (low, high) != (0, rank):
            return s[low:high], u[:, low:high], vt[low:high]
        return s, u, vt

    return batched(op, per_matrix)


@RULES.register(custom_call_rule(target("eig")))
def lower_eig(op, ctx):
    dtype = lapack_dtype(op, ctx)
    config = backend_config(op)
    left, right = config_flag(op, config, "left"), config_flag(op, config, "right")
    geev = lapack("geev", dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return empty_results(op)
        if is_complex(dtype):
            w, vl, vr, info = geev(a, compute_vl=int(left), compute_vr=int(right))
        else:
            wr, wi, vl, vr, info = geev(a, compute_vl=int(left), compute_vr=int(right))
            w = wr + 1j * wi
            vl, vr = unpack_conjugate_pairs(wi, vl), unpack_conjugate_pairs(wi, vr)
        if failed(info):
            return None
        return (w, *([vl] if left else []), *([vr] if right else []))

    return batched(op, per_matrix)


def unpack_conjugate_pairs(wi: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Complex eigenvectors from LAPACK's real packing: for a pair of conjugate eigenvalues
    (positive imaginary part first) columns j and j+1 hold the real and imaginary parts."""
    out = v.astype(np.result_type(v.dtype, np.complex64))
    j = 0
    while j < len(wi):
        if wi[j] != 0 and j + 1 < v.shape[-1]:
            out[:, j] = v[:, j] + 1j * v[:, j + 1]
            out[:, j + 1] = v[:, j] - 1j * v[:, j + 1]
            j += 2
        else:
            j += 1
    return out


@RULES.register(custom_call_rule(target("schur")))
def lower_schur(op, ctx):
    dtype = lapack_dtype(op, ctx)
    config = backend_config(op)
    if config.get("sort"):
        raise unsupported(op, ctx, f"sorted eigenvalues (sort_eig_vals=True) on "
                                   f"{dtype.name}; LAPACK's gees sorting is not wired")
    vectors = config_flag(op, config, "compute_schur_vectors")
    gees = lapack("gees", dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return (a, a)[:len(op.results)]
        form, _sdim, *_eigenvalues, z, _work, info = gees(
            no_eigenvalue_selection, a, compute_v=int(vectors), sort_t=0)
        if failed(info):
            return None
        return (form, z) if vectors else (form,)

    return batched(op, per_matrix)


def no_eigenvalue_selection(*_eigenvalue):
    return False


@RULES.register(custom_call_rule(target("hessenberg")))
def lower_hessenberg(op, ctx):
    dtype = lapack_dtype(op, ctx)
    gehrd = lapack("gehrd", dtype)

    def per_matrix(a):
        n = a.shape[-1]
        if n <= 1:
            return a, np.zeros(max(n - 1, 0), dtype)
        packed, taus, info = gehrd(a, lo=0, hi=n - 1)
        return None if failed(info) else (packed, taus[:n - 1])

    return batched(op, per_matrix)


@RULES.register(custom_call_rule(target("tridiagonal")))
def lower_tridiagonal(op, ctx):
    dtype = lapack_dtype(op, ctx)
    lower = int(backend_config(op).get("lower", True))
    sytrd = lapack("hetrd" if is_complex(dtype) else "sytrd", dtype)

    def per_matrix(a):
        packed, d, e, taus, info = sytrd(a, lower=lower)
        return None if failed(info) else (packed, d, e, taus)

    return batched(op, per_matrix)


@RULES.register(custom_call_rule(target("lu")), custom_call_rule("LuDecomposition"))
def lower_lu(op, ctx):
    """(factors, 0-based pivots, permutation): the results of ``lax.linalg.lu``, as the
    ``pjrtkit_lu`` target and JAX's TPU lowering's ``LuDecomposition`` return them."""
    dtype = lapack_dtype(op, ctx)
    getrf = lapack("getrf", dtype)
    m = op.operands[0].type.shape[-2]

    def per_matrix(a):
        if a.size == 0:
            return a, np.zeros(0, np.int32), np.arange(m, dtype=np.int32)
        factors, pivots, info = getrf(a)
        # info > 0 is an exactly singular U, still a valid factorization (as in JAX's lowering).
        if int(info) < 0:
            return None, pivots, permutation_of(pivots, m)
        return factors, pivots, permutation_of(pivots, m)

    return batched(op, per_matrix)


def permutation_of(pivots: np.ndarray, m: int) -> np.ndarray:
    """LAPACK's row swaps (0-based: row i swapped with row pivots[i], in order) as the
    permutation ``perm`` with ``a[perm] == l @ u``."""
    perm = np.arange(m, dtype=np.int32)
    for i, p in enumerate(pivots):
        perm[i], perm[p] = perm[p], perm[i]
    return perm
