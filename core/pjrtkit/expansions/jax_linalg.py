"""Linear algebra at the JAX-rule level, for a backend without linear-algebra kernels.

JAX lowers eigh, svd, eig, schur, hessenberg, tridiagonal and geqp3 only on its own platforms
(and tridiagonal_solve with pivoting only there): on any other, a program using them fails in
JAX ("MLIR translation rule ... not found") before a backend sees it.
``portable_linalg_rules()`` gives the JAX lowering rules that run them anyway: a backend
declaring a primitive set inherits them (``JAX_LOWERING_RULES``), any other may return them
from its ``pjrtkit_jax_lowering_rules`` hook. Each rule lowers to standard StableHLO (loops,
dots, and the ops ``pjrtkit.expansions`` expands: cholesky, triangular solves, QR's custom
calls), so the program runs on the backend's primitive set:

- **eigh**: up to ``JACOBI_MAX`` (256, where JAX's TPU rule also stops recursing) and whenever
  the Jacobi algorithm is asked for, pjrtkit's own cyclic Jacobi (``jax_impl/jacobi.py``); above,
  JAX's own QDWH divide and conquer (the TPU's algorithm, in JAX's private tpu.linalg), whose
  blocks come back to this rule as Jacobi problems.
- **svd**: JAX's own QDWH-based SVD (TPU's), which JAX registers for every platform but
  which refuses an explicit ``algorithm``: here the algorithm is a hint and every one is
  answered by the polar decomposition.
- **eig**, **schur**, **hessenberg** (JAX has no portable form of the non-symmetric
  eigenproblem): pjrtkit's Householder reduction and shifted QR algorithm
  (``jax_impl/schur.py``): complex Schur form for complex input, real Schur form (2x2 blocks
  for complex pairs, Francis' double-shift QR) for real input, as LAPACK's gees gives them;
  eigenvalues of a real matrix come in exact conjugate pairs.
- **tridiagonal** (LAPACK's sytrd/hetrd form, from the Hessenberg reduction of the Hermitian
  matrix), **tridiagonal_solve** (row-pivoted elimination as gtsv, or with
  ``perturb_singular`` as lagtf/lagts: JAX's generic rule neither pivots nor perturbs) and
  **geqp3** (QR with column pivoting, ``jnp.linalg.qr(..., pivoting=True)``):
  ``jax_impl/tridiagonal.py``, ``jax_impl/pivoted_qr.py``.
- refused as UNIMPLEMENTED, naming the primitive and the platform instead of JAX's generic
  "rule not found": schur with sorted eigenvalues (XLA's CPU backend refuses it too).

The rules import JAX lazily (a backend's hook module must load without it); every private
JAX name they use goes through ``pjrtkit.jax_compat``.
"""
from __future__ import annotations

from collections.abc import Iterable

from pjrtkit.types import JaxLoweringRule

# Largest eigh solved by Jacobi directly (JAX's QDWH recursion stops at the same size).
JACOBI_MAX = 256


def _as_written(impl):
    """``impl`` traced under the numpy rules it was written for, whatever the user's program
    sets (JAX's own tests run with ``jax_numpy_rank_promotion='raise'`` and sometimes
    ``jax_numpy_dtype_promotion='strict'``; the rule's arithmetic is not the user's code)."""
    def traced(*args, **kwargs):
        import jax

        with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
            return impl(*args, **kwargs)
    return traced


def _eigh_rule(ctx, operand, **params):
    from jax.interpreters import mlir

    from pjrtkit import jax_compat
    from pjrtkit.expansions.jax_impl.jacobi import jacobi_eigh

    (aval,) = ctx.avals_in
    n = aval.shape[-1]
    algorithm = params.get("algorithm")
    lower = bool(params.get("lower", True))
    sort = bool(params.get("sort_eigenvalues", True))
    subset = params.get("subset_by_index")
    if n <= JACOBI_MAX or jax_compat.is_jacobi_eigh(algorithm):
        def impl(a):
            return jacobi_eigh(a, lower=lower, sort_eigenvalues=sort, subset_by_index=subset)
        return mlir.lower_fun(_as_written(impl), multiple_results=True)(ctx, operand)
    return mlir.lower_fun(jax_compat.eigh_qdwh_implementation(), multiple_results=True)(
        ctx, operand, lower=lower, sort_eigenvalues=sort, subset_by_index=subset)


def _svd_rule(ctx, operand, **params):
    from pjrtkit import jax_compat

    params = dict(params)
    params["algorithm"] = None  # a hint; the polar decomposition answers every one
    return jax_compat.svd_polar_lowering()(ctx, operand, **params)


def _eig_rule(ctx, operand, **params):
    from jax.interpreters import mlir

    from pjrtkit.expansions.jax_impl.schur import eig

    left = bool(params.get("compute_left_eigenvectors", False))
    right = bool(params.get("compute_right_eigenvectors", True))
    return mlir.lower_fun(_as_written(lambda a: eig(a, left=left, right=right)),
                          multiple_results=True)(ctx, operand)


def _schur_rule(ctx, operand, **params):
    from jax.interpreters import mlir

    from pjrtkit.expansions.jax_impl.schur import complex_schur, real_schur

    (aval,) = ctx.avals_in
    if params.get("sort_eig_vals"):
        raise NotImplementedError("UNIMPLEMENTED: schur with sorted eigenvalues (as on XLA's "
                                  "CPU backend, whose LAPACK call does not sort either)")
    decompose = complex_schur if _is_complex(aval.dtype) else real_schur
    vectors = bool(params.get("compute_schur_vectors", True))

    def impl(a):
        t, z = decompose(a)
        return (t, z) if vectors else (t,)

    return mlir.lower_fun(_as_written(impl), multiple_results=True)(ctx, operand)


def _hessenberg_rule(ctx, operand, **params):
    from jax.interpreters import mlir

    from pjrtkit.expansions.jax_impl.schur import hessenberg

    return mlir.lower_fun(_as_written(hessenberg), multiple_results=True)(ctx, operand)


def _is_complex(dtype) -> bool:
    import numpy as np

    return np.dtype(dtype).kind == "c"


def unimplemented_rule(primitive: str, why: str):
    """A JAX lowering rule that refuses ``primitive`` with UNIMPLEMENTED and ``why``."""

    def rule(ctx, *operands, **params):
        platforms = ", ".join(getattr(ctx.module_context, "platforms", ()) or ("this platform",))
        raise NotImplementedError(f"UNIMPLEMENTED: {primitive} on {platforms}: {why}")

    rule.__name__ = f"unimplemented_{primitive}"
    return rule


def _tridiagonal_rule(ctx, operand, **params):
    from jax.interpreters import mlir

    from pjrtkit.expansions.jax_impl.tridiagonal import tridiagonal

    lower = bool(params.get("lower", True))
    return mlir.lower_fun(_as_written(lambda a: tridiagonal(a, lower=lower)),
                          multiple_results=True)(ctx, operand)


def _tridiagonal_solve_rule(ctx, dl, d, du, b, **params):
    from jax.interpreters import mlir

    from pjrtkit.expansions.jax_impl.tridiagonal import tridiagonal_solve

    perturb = bool(params.get("perturb_singular", False))
    return mlir.lower_fun(_as_written(
        lambda *args: tridiagonal_solve(*args, perturb_singular=perturb)),
        multiple_results=False)(ctx, dl, d, du, b)


def _geqp3_rule(ctx, operand, jpvt, **params):
    from jax.interpreters import mlir

    from pjrtkit.expansions.jax_impl.pivoted_qr import geqp3

    return mlir.lower_fun(_as_written(geqp3), multiple_results=True)(ctx, operand, jpvt)


def portable_linalg_rules() -> Iterable[JaxLoweringRule]:
    """The JAX lowering rules of this module, as ``pjrtkit_jax_lowering_rules`` returns them.

    A backend with kernels of its own for some of these primitives leaves those records out
    (or returns its own rule for them: the hook's records are registered in order)."""
    from pjrtkit import jax_compat

    rules = {
        "eigh": _eigh_rule,
        "svd": _svd_rule,
        "eig": _eig_rule,
        "schur": _schur_rule,
        "hessenberg": _hessenberg_rule,
        "tridiagonal": _tridiagonal_rule,
        "geqp3": _geqp3_rule,
        "tridiagonal_solve": _tridiagonal_solve_rule,
    }
    return [JaxLoweringRule(jax_compat.linalg_primitive(name), rule)
            for name, rule in rules.items()]


# A backend declaring a primitive set inherits these where its plugin gives no rule of its own
# (``expansions.jax_lowering_rules``, ``Backend.jax_lowering_rules``).
JAX_LOWERING_RULES = portable_linalg_rules
