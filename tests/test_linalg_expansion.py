"""cholesky, triangular_solve and QR's custom calls expanded into loops
(``pjrtkit.expansions.linalg``, ``linalg_qr``): real JAX programs lowered as for a platform
without linear-algebra rules (JAX's generic lowering), expanded, run with the reference rules
and compared with XLA's CPU backend (LAPACK). Unique results are compared directly: the
packed Householder form and taus of geqrf too, whose convention the expansion follows."""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

from pjrtkit import jax_compat
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from expansion_support import primitives, run_expanded

# A platform name nothing registers: JAX lowers with its generic rules, as for a new backend.
UNKNOWN_PLATFORM = "pjrtkit_expansions_test"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
# Factorizations agree with LAPACK's to a few n * eps, not to the table's few ulps.
LOOSEN = 10.0


def _rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def _random(rng, shape, dtype):
    x = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.normal(size=shape)
    return x.astype(dtype)


def _positive_definite(rng, shape, dtype):
    x = _random(rng, shape, dtype)
    return (x @ np.conj(np.swapaxes(x, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _well_conditioned(rng, shape, dtype):
    return (_random(rng, shape, dtype) + 3 * np.eye(shape[-1])).astype(dtype)


def _keys(program) -> set[str]:
    return {custom_call_rule(op.attributes.get("call_target_name", ""))
            if op.name == "stablehlo.custom_call" else op.name for op in walk_ops(program)}


def _agrees(name, fn, args, expect):
    """``fn`` lowered by JAX's generic rules, its ``expect`` ops expanded for the reference
    rules' primitive set (which has none of them), against XLA's CPU backend."""
    with jax.enable_x64(True):
        lowered = lower_program(fn, *args, platform=UNKNOWN_PLATFORM)
        program, ours = run_expanded(fn, args, primitives(), platform=UNKNOWN_PLATFORM)
        reference = run_on_xla_cpu(fn, args)
    assert set(expect) <= _keys(lowered) and not set(expect) & _keys(program), expect
    assert len(ours) == len(reference)
    for i, (a, r) in enumerate(zip(ours, reference)):
        assert_close(a, r, what=f"{name} output {i}", loosen=LOOSEN)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 7, 7)])
def test_cholesky(dtype, shape):
    rng = _rng(f"cholesky{shape}{dtype}")
    _agrees("cholesky", jnp.linalg.cholesky, (_positive_definite(rng, shape, dtype),),
            {"stablehlo.cholesky"})
    _agrees("cholesky upper", lambda a: jsl.cholesky(a, lower=False),
            (_positive_definite(rng, shape, dtype),), {"stablehlo.cholesky"})


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan(dtype):
    """As XLA's CPU backend: LAPACK's failure makes the whole matrix NaN, per batch element."""
    rng = _rng(f"not_pd{dtype}")
    a = np.stack([_positive_definite(rng, (4, 4), dtype), _random(rng, (4, 4), dtype)])
    _agrees("cholesky", jnp.linalg.cholesky, (a,), {"stablehlo.cholesky"})


# One real and one complex dtype, of each width, for the 24 combinations.
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose", ["N", "T", "C"])
@pytest.mark.parametrize("unit", [False, True])
def test_triangular_solve_every_combination(dtype, left, lower, transpose, unit):
    rng = _rng(f"trsm{dtype}{left}{lower}{transpose}{unit}")
    a = _well_conditioned(rng, (2, 5, 5), dtype)  # both triangles full: only one may be read
    rhs = _random(rng, (2, 5, 3) if left else (2, 3, 5), dtype)

    def solve(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower,
                                           transpose_a=transpose != "N",
                                           conjugate_a=transpose == "C", unit_diagonal=unit)

    _agrees("triangular_solve", solve, (a, rhs), {"stablehlo.triangular_solve"})


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_and_inverse_through_lu(dtype):
    """JAX's generic lu (a loop of its own) then two triangular solves."""
    rng = _rng(f"solve{dtype}")
    _agrees("solve", jnp.linalg.solve, (_well_conditioned(rng, (6, 6), dtype),
                                        _random(rng, (6, 2), dtype)),
            {"stablehlo.triangular_solve"})
    _agrees("inv", jnp.linalg.inv, (_well_conditioned(rng, (3, 4, 4), dtype),),
            {"stablehlo.triangular_solve"})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (3, 5), (2, 5, 5), (1, 1)])
def test_geqrf_matches_lapack_packed_form(dtype, shape):
    geqrf = jax_compat.linalg_function("geqrf")
    _agrees("geqrf", geqrf, (_random(_rng(f"geqrf{shape}{dtype}"), shape, dtype),),
            {custom_call_rule("Qr")})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode, shape", [("reduced", (6, 4)), ("complete", (2, 6, 4)),
                                         ("reduced", (3, 5))])
def test_qr(dtype, mode, shape):
    a = _random(_rng(f"qr{mode}{shape}{dtype}"), shape, dtype)
    _agrees("qr", lambda a: jnp.linalg.qr(a, mode=mode), (a,),
            {custom_call_rule("Qr"),
             custom_call_rule("ProductOfElementaryHouseholderReflectors")})


def test_reflector_of_a_zero_column_is_the_identity():
    """xLARFG: a column that is already reduced gets tau = 0 (no reflection)."""
    a = np.array([[2.0, 1.0], [0.0, 3.0], [0.0, 4.0]], np.float32)
    _agrees("geqrf", jax_compat.linalg_function("geqrf"), (a,), {custom_call_rule("Qr")})
