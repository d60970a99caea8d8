"""stablehlo.sort and variadic stablehlo.reduce (argmax/argmin) in the GPU lowering, on real JAX
programs run emulated (Triton's interpreter), against XLA's CPU backend."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from gpu_support import sample

F32 = np.float32
SPECIALS = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, -np.nan, 1.5, 1.5], F32)


def with_specials(name, shape, dtype):
    """Seeded data with NaN (both signs), signed zeros, infinities and ties in every row."""
    x = sample(name, shape, dtype)
    x.reshape(-1, shape[-1])[:, :len(SPECIALS)] = SPECIALS.astype(dtype)
    return x


@pytest.mark.parametrize("dtype", [F32, np.float16, ml_dtypes.bfloat16])
def test_sort_and_argsort_order_nan_last_and_stable_ties_like_xla(agrees_with_xla, dtype):
    x = with_specials("sortf", (3, 13), dtype)
    agrees_with_xla(lambda x: (jnp.sort(x, axis=-1), jnp.argsort(x, axis=-1),
                               jnp.sort(x, axis=0), jnp.argsort(-x, axis=-1, stable=True)), x)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint32, np.bool_])
def test_sort_of_integers_and_bools(agrees_with_xla, dtype):
    x = sample(f"sorti{np.dtype(dtype).name}", (2, 3, 9), dtype)
    agrees_with_xla(lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=-1)), x)


def test_lax_sort_of_three_operands_with_two_keys_and_descending(agrees_with_xla):
    keys = sample("k1", (4, 17), np.int32) % 3
    second = with_specials("k2", (4, 17), F32)
    payload = sample("k3", (4, 17), F32)
    agrees_with_xla(lambda a, b, c: (*jax.lax.sort((a, b, c), dimension=1, num_keys=2),
                                     jnp.sort(b, descending=True)), keys, second, payload)


def test_a_sort_longer_than_one_tile(agrees_with_xla):
    x = sample("long", (2, 150), F32)
    x[:, ::7] = 0.5  # ties across tiles
    agrees_with_xla(lambda x: (jnp.sort(x), jnp.argsort(x)), x)


@pytest.mark.parametrize("dtype", [F32, ml_dtypes.bfloat16, np.int32, np.uint8])
def test_argmax_argmin_with_nan_and_ties_like_xla(agrees_with_xla, dtype):
    if np.dtype(dtype).kind == "f":
        x = with_specials("amax", (5, 11), dtype)
        x[1] = 2.0  # a row of ties: the lowest index wins
        x[2, 8:] = np.array([np.inf, -np.inf, 3.0], F32).astype(dtype)  # no NaN, infinities
        x[2, :8] = 1.0
    else:
        x = sample(f"amax{np.dtype(dtype).name}", (5, 11), dtype)
        x[1] = 7
    agrees_with_xla(lambda x: (jnp.argmax(x, axis=-1), jnp.argmin(x, axis=-1),
                               jnp.argmax(x, axis=0), jnp.argmin(x)), x)


def test_a_multi_op_single_operand_reduce_body(agrees_with_xla):
    x = sample("logsumexp", (3, 6), F32)
    # max(a, b) + 1 is not one op: the sequential fold runs it, in XLA's order
    agrees_with_xla(lambda x: jax.lax.reduce(x, np.float32(0), lambda a, b: jnp.maximum(a, b) + 1,
                                             (1,)), x)


def test_top_k_through_its_composite_decomposition(agrees_with_xla):
    x = with_specials("topk", (4, 19), F32)
    agrees_with_xla(lambda x: jax.lax.top_k(x, 5), x)
