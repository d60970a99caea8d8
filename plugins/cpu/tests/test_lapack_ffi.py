"""The LAPACK FFI custom calls of JAX's cpu lowering (what a program exported for ``cpu``
carries) on pjrtkit_cpu's rules, against XLA's CPU backend running the same program.

Each function is lowered with JAX's *cpu* rules (``lapack_<x><routine>_ffi`` targets, not the
``pjrtkit_<primitive>`` ones pjrtkit_cpu's own lowering emits), planned with the cpu registry and
compared with XLA's CPU backend on the same inputs: same LAPACK routine, so the decompositions'
freedoms (signs, phases) come out the same and are compared directly.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit import jax_compat
from pjrtkit.errors import InvalidArgument
from pjrtkit.lowering.plan import build_plan
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _herm(a):
    return a + jnp.conj(jnp.swapaxes(a, -1, -2))


FUNCTIONS = {
    "eigh": lambda a: jnp.linalg.eigh(_herm(a)),
    "svd": jnp.linalg.svd,
    "svd_reduced": lambda a: jnp.linalg.svd(a[..., :3], full_matrices=False),
    "svdvals": lambda a: jnp.linalg.svd(a, compute_uv=False),
    "svd_gesvd": lambda a: jax.lax.linalg.svd(a, algorithm=jax.lax.linalg.SvdAlgorithm.QR),
    "eig": jnp.linalg.eig,
    "eigvals": jnp.linalg.eigvals,
    "qr": jnp.linalg.qr,
    "cholesky": lambda a: jnp.linalg.cholesky(_herm(a) + 12 * jnp.eye(4)),  # diagonally dominant
    "lu": jax.lax.linalg.lu,
    "inv": jnp.linalg.inv,
    "slogdet": jnp.linalg.slogdet,
    "solve": lambda a: jnp.linalg.solve(a, a[..., :2]),
    "schur": jax.scipy.linalg.schur,
    "hessenberg": lambda a: jax.scipy.linalg.hessenberg(a[0], calc_q=True),
    "triangular_solve": lambda a: jax.scipy.linalg.solve_triangular(a, a, lower=True, trans=1),
    "triangular_solve_right": lambda a: jax.lax.linalg.triangular_solve(
        a, a, left_side=False, lower=False, conjugate_a=True, transpose_a=True,
        unit_diagonal=True),
    "tridiagonal": jax.lax.linalg.tridiagonal,
    "tridiagonal_solve": lambda a: jax.lax.linalg.tridiagonal_solve(
        a[0, 0], a[0, 1], a[0, 2], a[0, :, :2]),
    "singular_inv": lambda a: jnp.linalg.inv(jnp.zeros_like(a)),  # getrf's info > 0
    "failed_eigh": lambda a: jnp.linalg.eigh(_herm(a) * jnp.nan),  # info != 0 -> NaN
}


def custom_call_targets(program):
    return {op.attributes["call_target_name"] for function in program.functions.values()
            for op in function.body.blocks[0].ops if op.name == "stablehlo.custom_call"}


# make test runs each function on one real and one complex dtype (the widths alternating from one
# function to the next); make test-long, which CI runs, on the other two
@pytest.mark.parametrize("name, dtype", [
    pytest.param(name, dtype, id=f"{name}-{np.dtype(dtype).name}",
                 marks=() if dtype in (DTYPES[i % 2], DTYPES[2 + (i + 1) % 2]) else pytest.mark.long)
    for i, name in enumerate(FUNCTIONS) for dtype in DTYPES])
def test_cpu_lowering_runs_on_pjrtkit_cpu_rules_as_on_xla(name, dtype, rng, registry):
    fn = FUNCTIONS[name]
    x = rng.standard_normal((2, 4, 4))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((2, 4, 4))
    x = x.astype(dtype)
    program = lower_program(fn, x, platform="cpu")
    assert any(t.startswith("lapack_") for t in custom_call_targets(program)), \
        "JAX's cpu lowering no longer emits a LAPACK FFI call here"
    with np.errstate(all="ignore"):
        ours = [np.asarray(r) for r in build_plan(program, registry)(x)]
    reference = run_on_xla_cpu(fn, [x])
    assert len(ours) == len(reference)
    for i, (a, b) in enumerate(zip(ours, reference)):
        assert_close(a, b, what=f"{name} output {i}")


def test_every_lapack_target_jax_guarantees_stable_has_a_rule(registry):
    targets = jax_compat.cpu_stable_custom_call_targets()
    assert targets and all(t.startswith("lapack_") for t in targets)
    missing = [t for t in targets if custom_call_rule(t) not in registry]
    assert not missing, f"no pjrtkit_cpu rule for the stable cpu targets {missing}"


def test_a_call_with_another_signature_compiles_and_is_invalid_argument_when_run(registry):
    # As on XLA's CPU backend, which compiles such a call and whose kernel refuses it when it
    # runs ("INVALID_ARGUMENT: [execute] Wrong number of arguments"); JAX's ffi_test compiles a
    # call of lapack_sgetrf_ffi without operands and reads the compiled program's text.
    program = load_program("""
      func.func @main(%a: tensor<3x3xf32>, %b: tensor<3x3xf32>) -> tensor<3x3xf32> {
        %0 = stablehlo.custom_call @lapack_sgetrf_ffi(%a, %b) : (tensor<3x3xf32>,
            tensor<3x3xf32>) -> tensor<3x3xf32>
        return %0 : tensor<3x3xf32>
      }""")
    plan = build_plan(program, registry)
    a = np.eye(3, dtype=np.float32)
    for _ in range(2):  # every run
        with pytest.raises(InvalidArgument, match="lapack_sgetrf_ffi.*takes 1 and returns 3"):
            plan(a, a)
