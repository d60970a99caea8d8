"""The GPU plugins reach complex numbers, narrow types, fft and linear algebra only through the
core's expansions (``pjrtkit.expansions``): their registry has no rule of its own for any of
them, and programs using them run on the emulated GPU as on XLA's CPU backend."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.expansions.formats import COMPLEX_PARTS, NARROW

from gpu_support import emulated_driver, rng_for

# What the GPU lowering must leave to the expansions: complex and narrow-type ops, fft and the
# linear-algebra ops and custom calls JAX emits (on any platform without its own rules).
COMPLEX_OPS = {"stablehlo.complex", "stablehlo.real", "stablehlo.imag"}
FFT_AND_LINALG_OPS = {"stablehlo.fft", "stablehlo.cholesky", "stablehlo.triangular_solve"}
LINALG_CUSTOM_CALL_PREFIXES = ("lapack_", "cusolver", "hipsolver", "cublas", "hipblas", "Qr",
                               "ProductOfElementaryHouseholderReflectors", "LuDecomposition",
                               "Eigh", "pjrtkit_eig", "pjrtkit_svd", "pjrtkit_lu", "ducc_fft",
                               "cufft", "hipfft")


def test_the_gpu_registry_has_no_rule_of_its_own_for_what_the_expansions_bring():
    emulated_driver()
    from pjrtkit_gpu.lowering import PRIMITIVES, RULES

    assert not (COMPLEX_OPS | FFT_AND_LINALG_OPS) & set(RULES.rules)
    assert not [t for t in RULES.custom_call_targets
                if t.startswith(LINALG_CUSTOM_CALL_PREFIXES)]
    computed = {np.dtype(name) for name in PRIMITIVES.dtypes}
    assert not computed & {*COMPLEX_PARTS, *NARROW}
    # ... and no rule computes on them: they are held only as bytes.
    assert PRIMITIVES.ops == RULES.op_names


def _cplx(name, shape):
    rng = rng_for(name)
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)


@pytest.mark.parametrize("name,fn,arity", [
    ("arithmetic", lambda a, b: (a * b - a, a / b, jnp.abs(a), jnp.conj(b)), 2),
    ("functions", lambda a: (jnp.exp(a), jnp.sqrt(a), jnp.tanh(a)), 1),
    ("matmul", lambda a, b: a @ b.T, 2),
    ("reductions", lambda a: (jnp.sum(a, axis=0), jnp.cumsum(a, axis=1)), 1),
    ("sort", lambda a: jnp.sort(a), 1),
    ("parts", lambda a: (jnp.real(a), jnp.imag(a), jnp.real(a) * jnp.imag(a)), 1),
])
def test_complex_programs_on_the_emulated_gpu(agrees_with_xla, name, fn, arity):
    agrees_with_xla(fn, *[_cplx(f"{name}{i}", (3, 4)) for i in range(arity)], loosen=4.0)


def test_cases_the_gpu_rules_hand_to_the_core(agrees_with_xla):
    """Batched gathers/scatters and grouped convolutions go through the core's rewrites
    (``lower_by_expansion``); cumulative products and integer scatter-max run as kernels."""
    import jax
    from jax import lax

    from gpu_support import sample

    x = sample("tk", (4, 6), np.float32)
    order = np.argsort(x, axis=1).astype(np.int32)
    agrees_with_xla(lambda a, i: (jnp.take_along_axis(a, i, axis=1),
                                  jax.grad(lambda a: jnp.sum(jnp.take_along_axis(a, i, 1) ** 2))(a)),
                    x, order)
    image, kernel = sample("img", (1, 4, 5, 5), np.float32), sample("k", (4, 2, 2, 2), np.float32)
    agrees_with_xla(lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "VALID",
                                                         feature_group_count=2), image, kernel)
    agrees_with_xla(lambda a: jnp.cumprod(a, axis=1), sample("cp", (3, 5), np.float32))
    base = sample("sm", (5, 3), np.int32)
    idx = np.array([[1], [3], [1], [7]], np.int32)
    upd = sample("su", (4, 3), np.int32)
    agrees_with_xla(lambda a, i, u: (a.at[i[:, 0]].max(u, mode="drop"),
                                     a.at[i[:, 0]].min(u, mode="drop")), base, idx, upd)
