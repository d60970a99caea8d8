"""CHLO ops reach plugins as stablehlo.composite with a decomposition; compare with XLA."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest


@pytest.mark.parametrize("name,fn", [
    ("erf", jax.lax.erf), ("erf_inv", lambda x: jax.lax.erf_inv(x * 0.5)),
    ("asinh", jnp.arcsinh), ("acos", lambda x: jnp.arccos(x * 0.5)), ("atan", jnp.arctan),
    ("sinh", jnp.sinh), ("lgamma", lambda x: jax.lax.lgamma(jnp.abs(x) + 0.5)),
    ("digamma", lambda x: jax.lax.digamma(jnp.abs(x) + 0.5)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chlo_composites_match_xla(check, rng, name, fn, dtype):
    x = rng.standard_normal(17).astype(dtype)
    check(fn, x, loosen=10.0 if name in ("lgamma", "digamma") else 1.0)  # long polynomial chains
