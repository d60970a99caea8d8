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


@pytest.mark.long  # 15-20 s under Triton's interpreter; make test sorts uneven runs with ties
# through merge passes in test_the_hardware_tile_and_block_sizes_sort_like_xla
def test_merge_passes_keep_ties_in_order_over_uneven_runs(agrees_with_xla):
    # 1000 = 15 full tiles and a short one: pairs with a short or missing right run, and
    # 10 merge passes over values with hundreds of ties each
    keys = sample("merge", (3, 1000), np.int32) % 5
    floats = with_specials("mergef", (3, 1000), F32)
    payload = np.arange(3000, dtype=np.int32).reshape(3, 1000)
    agrees_with_xla(lambda k, f, v: (jnp.argsort(k, axis=-1, stable=True),
                                     *jax.lax.sort((k, v), dimension=1, num_keys=1),
                                     jnp.sort(f, axis=-1), jnp.argsort(f, descending=True),
                                     jnp.sort(f, axis=0)), keys, floats, payload)


def test_the_hardware_tile_and_block_sizes_sort_like_xla(agrees_with_xla, monkeypatch):
    # emulation sorts with larger tiles and blocks (sort.INTERPRETED_*); these are the sizes a
    # GPU runs: 11 tiles of 64 and 4 merge passes of 1024-element blocks
    from pjrtkit_gpu.lowering import sort

    monkeypatch.setattr(sort, "INTERPRETED_SORT_TILE", sort.SORT_TILE)
    monkeypatch.setattr(sort, "INTERPRETED_MERGE_BLOCK", sort.MERGE_BLOCK)
    x = with_specials("hwsizes", (2, 700), F32)
    x[:, ::5] = 0.25
    agrees_with_xla(lambda x: (jnp.sort(x), jnp.argsort(x, descending=True)), x)


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


def test_a_reduce_body_that_calls_functions(agrees_with_xla):
    # jnp.where in a body lowers to func.call @_where: inlined before the body becomes Triton
    x = sample("argmax_where", (3, 70), np.int32).astype(F32) % 5

    def body(a, b):
        return (jnp.where(a[0] > b[0], a[0], b[0]), jnp.where(a[0] > b[0], a[1], b[1]))

    agrees_with_xla(lambda x: jax.lax.reduce(
        (x, jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)), (np.float32(-np.inf), np.int32(-1)),
        body, (1,)), x)


def test_approx_max_k_and_min_k(agrees_with_xla):
    # custom_call @ApproxTopK: the core's rule, a sort and slice compiled with the GPU rules;
    # a permutation per row, so no ties (XLA's own sort is unstable among them)
    x = np.argsort(sample("approx", (3, 40), F32), axis=1).astype(F32)
    agrees_with_xla(lambda x: (*jax.lax.approx_max_k(x, 4), *jax.lax.approx_min_k(x, 1)), x)
