"""Linear algebra at the JAX-rule level, for a backend without linear-algebra kernels.

JAX lowers eigh, svd, eig, schur, hessenberg and tridiagonal only on its own platforms: on
any other, a program using them fails in JAX ("MLIR translation rule ... not found") before a
backend sees it. ``portable_linalg_rules()`` gives the JAX lowering rules a backend returns
from its ``pjrtkit_jax_lowering_rules`` hook to run them anyway. Each rule lowers to standard
StableHLO (loops, dots, and the ops ``pjrtkit.expansions`` expands: cholesky, triangular
solves, QR's custom calls), so the program runs on the backend's primitive set:

- **eigh**: up to ``JACOBI_MAX`` (256, where JAX's TPU rule also stops recursing) and whenever
  the Jacobi algorithm is asked for, pjrtkit's own cyclic Jacobi (``jax_impl/jacobi.py``); above,
  JAX's own QDWH divide and conquer (the TPU's algorithm, in JAX's private tpu.linalg), whose
  blocks come back to this rule as Jacobi problems.
- **svd**: JAX's own QDWH-based SVD (TPU's), which JAX registers for every platform but
  which refuses an explicit ``algorithm``: here the algorithm is a hint and every one is
  answered by the polar decomposition.
- **eig**, **schur**, **hessenberg**, **tridiagonal** (the non-symmetric eigenproblem and
  LAPACK's reductions): no portable implementation (JAX has none outside LAPACK, cuSOLVER and
  MAGMA, and pjrtkit none yet): the rule raises UNIMPLEMENTED naming the primitive and the
  platform instead of JAX's generic "rule not found".

The rules import JAX lazily (a backend's hook module must load without it); every private
JAX name they use goes through ``pjrtkit.jax_compat``.
"""
from __future__ import annotations

from collections.abc import Iterable

from pjrtkit.types import JaxLoweringRule

# Largest eigh solved by Jacobi directly (JAX's QDWH recursion stops at the same size).
JACOBI_MAX = 256


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
        return mlir.lower_fun(impl, multiple_results=True)(ctx, operand)
    return mlir.lower_fun(jax_compat.eigh_qdwh_implementation(), multiple_results=True)(
        ctx, operand, lower=lower, sort_eigenvalues=sort, subset_by_index=subset)


def _svd_rule(ctx, operand, **params):
    from pjrtkit import jax_compat

    params = dict(params)
    params["algorithm"] = None  # a hint; the polar decomposition answers every one
    return jax_compat.svd_polar_lowering()(ctx, operand, **params)


def unimplemented_rule(primitive: str, why: str):
    """A JAX lowering rule that refuses ``primitive`` with UNIMPLEMENTED and ``why``."""

    def rule(ctx, *operands, **params):
        platforms = ", ".join(getattr(ctx.module_context, "platforms", ()) or ("this platform",))
        raise NotImplementedError(f"UNIMPLEMENTED: {primitive} on {platforms}: {why}")

    rule.__name__ = f"unimplemented_{primitive}"
    return rule


_NO_PORTABLE_FORM = ("it has no portable implementation in JAX (only LAPACK, cuSOLVER and "
                     "MAGMA kernels) or in pjrtkit yet; run it on pjrtkit_cpu or XLA's CPU "
                     "backend")


def portable_linalg_rules() -> Iterable[JaxLoweringRule]:
    """The JAX lowering rules of this module, as ``pjrtkit_jax_lowering_rules`` returns them.

    A backend with kernels of its own for some of these primitives leaves those records out
    (or returns its own rule for them: the hook's records are registered in order)."""
    from pjrtkit import jax_compat

    rules = {
        "eigh": _eigh_rule,
        "svd": _svd_rule,
        **{name: unimplemented_rule(name, _NO_PORTABLE_FORM)
           for name in ("eig", "schur", "hessenberg", "tridiagonal")},
    }
    return [JaxLoweringRule(jax_compat.linalg_primitive(name), rule)
            for name, rule in rules.items()]
