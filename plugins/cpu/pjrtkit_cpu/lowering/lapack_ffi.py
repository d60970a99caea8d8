"""The LAPACK custom calls JAX's cpu lowering emits (``lapack_sgetrf_ffi``, ...), for programs
exported for ``cpu`` (``jax.export``) and run on pjrtkit_cpu.

On pjrtkit_cpu itself JAX lowers linear algebra to the ``pjrtkit_<primitive>`` targets
(``pjrtkit_cpu.jax_rules``); a program JAX lowered for its own cpu platform instead carries the
targets of jaxlib's LAPACK FFI kernels, which JAX guarantees stable for exports
(``jax_compat.cpu_stable_custom_call_targets``). Each target here has the contract of jaxlib's
kernel: the raw LAPACK outputs (factors, 1-based pivots, ``info`` per matrix, packed
reflectors), which the rest of the exported program turns into the primitive's results (NaN
where ``info`` says a matrix failed), and the same LAPACK routine through SciPy.

Layouts: jaxlib's kernels ask XLA for column-major matrices (``operand_layouts``); that is the
order in which LAPACK reads memory, not a change of the values, so the kernels here compute
on the logical arrays and ignore the layouts. ``backend_config`` is a dictionary of ASCII
codes (``mode = 86`` is ``'V'``) as jaxlib's kernels read it. Dtypes: float32, float64,
complex64, complex128, the ``s``/``d``/``c``/``z`` of the target's name. Anything else (an
operand signature that does not match the target's, another dtype, a bad ``backend_config``)
compiles and is refused with INVALID_ARGUMENT when the call runs, as XLA's CPU backend does
(jaxlib's FFI kernels check their arguments at the call: "Wrong number of arguments").
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pjrtkit.errors import InvalidArgument
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.semantics import dtypes as D

from pjrtkit_cpu.lowering.linalg import (
    empty_results, lapack, no_eigenvalue_selection, unpack_conjugate_pairs)
from pjrtkit_cpu.lowering.registry import RULES

# The letter LAPACK names each type by.
TYPE_LETTERS = {"s": D.FLOAT32, "d": D.FLOAT64, "c": D.COMPLEX64, "z": D.COMPLEX128}
REAL_LETTERS, COMPLEX_LETTERS = "sd", "cz"


def config_code(op, name: str, default: str) -> str:
    """A one-character option of ``mhlo.backend_config`` (stored as its ASCII code)."""
    config = op.attributes.get("mhlo.backend_config") or {}
    value = config.get(name, ord(default)) if isinstance(config, dict) else ord(default)
    try:
        return chr(int(value))
    except (TypeError, ValueError):
        raise InvalidArgument(f"custom_call @{op.attributes.get('call_target_name')}: "
                              f"backend_config {name}={value!r} is not a character code") from None


def config_int(op, name: str, default: int) -> int:
    config = op.attributes.get("mhlo.backend_config") or {}
    return int(config.get(name, default)) if isinstance(config, dict) else default


def check_signature(op, dtype: np.dtype, operands: int, results: int) -> None:
    """INVALID_ARGUMENT unless ``op`` has jaxlib's kernel's operand and result counts, its first
    operand a batch of matrices of ``dtype``."""
    target = op.attributes.get("call_target_name")
    shapes = [v.type.shape for v in op.operands]
    if len(op.operands) != operands or len(op.results) != results:
        raise InvalidArgument(f"custom_call @{target}: {len(op.operands)} operand(s) and "
                              f"{len(op.results)} result(s); jaxlib's kernel takes {operands} "
                              f"and returns {results}")
    main = op.operands[-1] if target.endswith("gtsv_ffi") else op.operands[0]
    if len(main.type.shape) < 2 or main.type.dtype != dtype:
        raise InvalidArgument(f"custom_call @{target}: operands {shapes} of "
                              f"{[v.type.dtype.name for v in op.operands]}; it takes a batch of "
                              f"{dtype.name} matrices")


def per_batch(op, batch: tuple[int, ...], per_matrix: Callable[..., tuple]):
    """A kernel applying ``per_matrix`` to each batch element of every operand; it returns one
    value per result of ``op`` (the batch dimensions lead every operand and result)."""
    results = [(r.type.shape, r.type.dtype) for r in op.results]

    def kernel(*operands):
        outs = [np.zeros(shape, dtype) for shape, dtype in results]
        for index in np.ndindex(*batch):
            for out, value in zip(outs, per_matrix(*(x[index] for x in operands))):
                out[index] = value
        return tuple(outs)

    return kernel


def info_of(value) -> np.int32:
    return np.int32(int(value))


def targets(routine: str, letters: str = REAL_LETTERS + COMPLEX_LETTERS):
    """Register the decorated rule factory ``make(op, ctx, dtype, letter)`` for
    ``lapack_<letter><routine>_ffi`` of each letter."""

    def register(make):
        for letter in letters:
            dtype = TYPE_LETTERS[letter]

            def rule(op, ctx, dtype=dtype, letter=letter):
                try:
                    return make(op, ctx, dtype, letter)
                except InvalidArgument as exc:
                    return refused_when_run(str(exc))

            RULES.register(custom_call_rule(f"lapack_{letter}{routine}_ffi"))(rule)
        return make

    return register


def refused_when_run(message: str):
    """The kernel of a call jaxlib's kernel would refuse: INVALID_ARGUMENT at each run."""

    def kernel(*operands):
        raise InvalidArgument(message)

    return kernel


def routine_name(letter: str, real: str, complex_: str) -> str:
    return complex_ if letter in COMPLEX_LETTERS else real


@targets("potrf")
def lower_potrf(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 2)
    lower = config_code(op, "uplo", "L") == "L"
    potrf = lapack("potrf", dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return a, 0
        factor, info = potrf(a, lower=lower, clean=False)  # the other triangle as given
        return factor, info_of(info)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("getrf")
def lower_getrf(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 3)
    getrf = lapack("getrf", dtype)

    def per_matrix(a):
        if a.size == 0:
            return a, 0, 0
        factors, pivots, info = getrf(a)
        return factors, pivots + 1, info_of(info)  # LAPACK's 1-based pivots, as jaxlib's

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("geqrf")
def lower_geqrf(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 2)
    geqrf = lapack("geqrf", dtype)

    def per_matrix(a):
        if a.size == 0:
            return a, 0
        factors, taus, _work, _info = geqrf(a)
        return factors, taus

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("orgqr", REAL_LETTERS)
@targets("ungqr", COMPLEX_LETTERS)
def lower_orgqr(op, ctx, dtype, letter):
    check_signature(op, dtype, 2, 1)
    m, n = op.operands[0].type.shape[-2:]
    k = op.operands[1].type.shape[-1]
    if not m >= n >= k:
        raise ctx.unimplemented(op, f"@{op.attributes['call_target_name']}: reflectors of "
                                    f"shape ({m}, {n}) with {k} taus; need m >= n >= k")
    orgqr = lapack(routine_name(letter, "orgqr", "ungqr"), dtype)

    def per_matrix(a, taus):
        if a.size == 0:
            return (a,)
        q, _work, _info = orgqr(a, taus)
        return (q,)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("syevd", REAL_LETTERS)
@targets("heevd", COMPLEX_LETTERS)
def lower_syevd(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 3)
    vectors = config_code(op, "mode", "V") == "V"
    lower = int(config_code(op, "uplo", "L") == "L")
    syevd = lapack(routine_name(letter, "syevd", "heevd"), dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return a, np.zeros(0, a.real.dtype), 0
        w, v, info = syevd(a, compute_v=int(vectors), lower=lower)
        return (v if vectors else a), w, info_of(info)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("gesdd")
@targets("gesvd")
def lower_gesdd(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 5)
    mode = config_code(op, "mode", "A")
    if mode not in "ASN":
        raise ctx.unimplemented(op, f"@{op.attributes['call_target_name']}: mode {mode!r}")
    routine = op.attributes["call_target_name"][len("lapack_x"):-len("_ffi")]
    driver = lapack(routine, dtype)
    compute_uv, full = mode != "N", mode == "A"

    def per_matrix(a):
        u, s, vt, info = driver(a, compute_uv=int(compute_uv), full_matrices=int(full))
        if not compute_uv:  # the u and vt results are not read; keep them zero
            return a, s, 0, 0, info_of(info)
        return a, s, u, vt, info_of(info)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("geev")
def lower_geev(op, ctx, dtype, letter):
    real = letter in REAL_LETTERS
    check_signature(op, dtype, 1, 5 if real else 4)
    left = config_code(op, "compute_left", "N") == "V"
    right = config_code(op, "compute_right", "V") == "V"
    geev = lapack("geev", dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return empty_results(op)
        if real:
            wr, wi, vl, vr, info = geev(a, compute_vl=int(left), compute_vr=int(right))
            vl = unpack_conjugate_pairs(wi, vl) if left else 0
            vr = unpack_conjugate_pairs(wi, vr) if right else 0
            return wr, wi, vl, vr, info_of(info)
        w, vl, vr, info = geev(a, compute_vl=int(left), compute_vr=int(right))
        return w, (vl if left else 0), (vr if right else 0), info_of(info)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("gees")
def lower_gees(op, ctx, dtype, letter):
    real = letter in REAL_LETTERS
    check_signature(op, dtype, 1, 6 if real else 5)
    if config_code(op, "sort", "N") != "N":
        raise ctx.unimplemented(op, f"@{op.attributes['call_target_name']}: sorted "
                                    f"eigenvalues (LAPACK's gees sorting is not wired)")
    vectors = config_code(op, "mode", "V") == "V"
    gees = lapack("gees", dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return empty_results(op)
        form, sdim, *eigenvalues, z, _work, info = gees(
            no_eigenvalue_selection, a, compute_v=int(vectors), sort_t=0)
        return (form, (z if vectors else 0), *eigenvalues, info_of(sdim), info_of(info))

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("gehrd")
def lower_gehrd(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 3)
    n = op.operands[0].type.shape[-1]
    low, high = config_int(op, "low", 1), config_int(op, "high", n)
    if not 1 <= low <= max(high, 1) <= max(n, 1):
        raise InvalidArgument(f"custom_call @{op.attributes['call_target_name']}: low={low}, "
                              f"high={high} outside [1, {n}]")
    gehrd = lapack("gehrd", dtype)

    def per_matrix(a):
        if n <= 1:
            return a, np.zeros(max(n - 1, 0), dtype), 0
        packed, taus, info = gehrd(a, lo=low - 1, hi=high - 1)
        return packed, taus[:n - 1], info_of(info)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


@targets("sytrd", REAL_LETTERS)
@targets("hetrd", COMPLEX_LETTERS)
def lower_sytrd(op, ctx, dtype, letter):
    check_signature(op, dtype, 1, 5)
    lower = int(config_code(op, "uplo", "L") == "L")
    sytrd = lapack(routine_name(letter, "sytrd", "hetrd"), dtype)

    def per_matrix(a):
        if a.shape[-1] == 0:
            return empty_results(op)
        packed, d, e, taus, info = sytrd(a, lower=lower)
        return packed, d, e, taus, info_of(info)

    return per_batch(op, op.operands[0].type.shape[:-2], per_matrix)


_TRANSPOSE = {"N": 0, "T": 1, "C": 2}


@targets("trsm")
def lower_trsm(op, ctx, dtype, letter):
    # jaxlib 0.10.2 passes (a, b); later jaxlibs may add alpha, a scalar third operand
    check_signature(op, dtype, 3 if len(op.operands) == 3 else 2, 1)
    trans = config_code(op, "trans_x", "N")
    if trans not in _TRANSPOSE:
        raise InvalidArgument(f"custom_call @{op.attributes['call_target_name']}: "
                              f"trans_x={trans!r}")
    from scipy.linalg import blas

    trsm = blas.get_blas_funcs(("trsm",), dtype=dtype)[0]
    options = dict(side=int(config_code(op, "side", "L") == "R"),
                   lower=int(config_code(op, "uplo", "L") == "L"), trans_a=_TRANSPOSE[trans],
                   diag=int(config_code(op, "diag", "N") == "U"))
    batch = op.operands[1].type.shape[:-2]

    def per_matrix(a, b, alpha=1.0):
        if b.size == 0:
            return (b,)
        return (trsm(alpha, a, b, **options),)

    if len(op.operands) == 2:
        return per_batch(op, batch, per_matrix)
    solve = per_batch(op, batch, per_matrix)
    return lambda a, b, alpha: solve(a, b, np.broadcast_to(alpha, batch))


@targets("gtsv")
def lower_gtsv(op, ctx, dtype, letter):
    check_signature(op, dtype, 4, 5)
    gtsv = lapack("gtsv", dtype)

    def per_matrix(dl, d, du, b):
        if b.size == 0:
            return dl, d, du, b, 0
        # JAX passes dl with a leading and du with a trailing unused entry (length n each)
        n = d.shape[-1]
        sub, diag, sup, x, info = gtsv(dl[1:n], d, du[:n - 1], b)
        return (np.concatenate([dl[:1], sub]), diag, np.concatenate([sup, du[n - 1:]]), x,
                info_of(info))

    return per_batch(op, op.operands[3].type.shape[:-2], per_matrix)
