"""stablehlo.gather and stablehlo.scatter, as jnp indexing emits them, against XLA's CPU."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from dtype_sample import sampled

# The per-dtype sweeps run dtype_sample's dtypes in make test, the others in make test-long.
ALL_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
NUMERIC = [d for d in ALL_DTYPES if d is not np.bool_]
INDEX_DTYPES = [np.int32, np.int64, np.uint8, np.uint32]


def sample(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -9, 10, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def gathers(x, i, j, k):
    """Reads of x (5, 6, 4) with i (3,), j (2, 3) index arrays and k a scalar index."""
    return [
        x[k], x[k, 2], x[:, k], x[i], x[i, 1:3], x[:, i], x[j], x[i, i], x[:, i, j[0]],
        x[..., i[:2]], x[j, :, 1], x[1:4, k, ::2],
        jnp.take(x, i, axis=2, mode="clip"), jnp.take(x, i, axis=1, mode="fill"),
        jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
        x.at[i + 3].get(mode="clip"), x.at[i - 4].get(mode="fill", fill_value=1),
        lax.dynamic_slice(x, (k, k + 2, k), (2, 3, 2)),
        lax.dynamic_index_in_dim(x, k + 7, axis=0),
    ]


@pytest.mark.parametrize("dtype", sampled(ALL_DTYPES), ids=lambda d: np.dtype(d).name)
def test_gather_dtypes(check, rng, dtype):
    x = sample(rng, (5, 6, 4), dtype)
    i = rng.integers(0, 4, size=3).astype(np.int32)
    j = rng.integers(0, 4, size=(2, 3)).astype(np.int64)
    check(gathers, x, i, j, np.int32(2))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_index_dtypes_and_out_of_bounds(check, rng, index_dtype):
    x = sample(rng, (5, 6, 4), np.float32)
    info = np.iinfo(index_dtype)
    i = np.array([0, 4, info.max, info.min, 2], dtype=index_dtype)
    check(lambda x, i: [jnp.take(x, i, axis=0, mode="clip"), jnp.take(x, i, axis=1, mode="fill"),
                        x.at[i, 1].get(mode="clip"),
                        lax.gather(x, i[:, None], lax.GatherDimensionNumbers(
                            offset_dims=(1, 2), collapsed_slice_dims=(0,),
                            start_index_map=(0,)), (1, 6, 4),
                            mode=lax.GatherScatterMode.CLIP)], x, i)


def scatters(x, u, i, k):
    """Updates of x (5, 6) with u (3, 6) updates, i (3,) indices (duplicates allowed)."""
    return [
        x.at[i].set(u), x.at[i].add(u), x.at[i].mul(u), x.at[i].min(u), x.at[i].max(u),
        x.at[k].set(u[0]), x.at[k, 2].add(u[1, 1]), x.at[:, i].add(u.T[:5]),
        x.at[i, i].set(u[:, 0]), x.at[i, 1:4].max(u[:, :3]),
        x.at[i + 3].add(u, mode="drop"), x.at[i - 2].set(u, mode="drop"),
        x.at[i + 3].min(u, mode="clip"), x.at[k + 5].set(u[0], mode="drop"),
    ]


@pytest.mark.parametrize("dtype", sampled(ALL_DTYPES), ids=lambda d: np.dtype(d).name)
def test_scatter_dtypes(check, rng, dtype):
    x = sample(rng, (5, 6), dtype)
    u = sample(rng, (3, 6), dtype)
    i = np.array([1, 4, 1], dtype=np.int32)  # a duplicate: updates accumulate or the last wins
    fns = scatters if dtype is not np.bool_ else (
        lambda x, u, i, k: [x.at[i].set(u), x.at[i, 2].set(u[:, 0]), x.at[i + 3].set(u, mode="drop")])
    check(fns, x, u, i, np.int64(3))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_scatter_out_of_bounds_windows_are_dropped(check, rng, index_dtype):
    x = sample(rng, (5, 6), np.float32)
    u = sample(rng, (5, 2), np.float32)
    info = np.iinfo(index_dtype)
    i = np.array([0, 4, info.max, 3, 2], dtype=index_dtype)
    j = np.array([0, 5, 4, info.max, 1], dtype=index_dtype)  # window of 2 at 5 is out of bounds
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0, 1))
    check(lambda x, u, i, j: [
        lax.scatter_add(x, jnp.stack([i, j], axis=1), u, dnums,
                        mode=lax.GatherScatterMode.FILL_OR_DROP),
        x.at[i, 1].add(u[:, 0], mode="drop"),
    ], x, u, i, j)


def test_vmap_of_indexing_uses_batching_dims(check, rng):
    x = sample(rng, (4, 5, 3), np.float32)
    i = rng.integers(0, 4, size=(4, 2)).astype(np.int32)
    u = sample(rng, (4, 2, 3), np.float32)
    rows = sample(rng, (2, 5, 3), np.float32)
    check(lambda x, i, u: [jax.vmap(lambda x, i: x[i])(x, i),
                           jax.vmap(lambda x, i, u: x.at[i].add(u))(x, i, u),
                           jax.vmap(lambda x, r: x.at[i[0]].set(r), in_axes=(2, 2),
                                    out_axes=2)(x, rows),
                           jax.vmap(lambda x, i: x[:, i], in_axes=(0, 0))(x, i)], x, i, u)


def test_embedding_lookup_and_gradient(check, rng):
    table = sample(rng, (10, 4), np.float32)
    ids = rng.integers(0, 10, size=(3, 5)).astype(np.int32)

    def loss(table, ids):
        return jnp.sum(jnp.tanh(table[ids]) * jnp.arange(4, dtype=np.float32))

    check(lambda t, i: [t[i], jax.grad(loss)(t, i), jax.nn.one_hot(i, 10, dtype=np.float32)],
          table, ids)


def test_dynamic_index_in_loop(check, rng):
    x = sample(rng, (6, 3), np.float64)

    def fn(x):
        def body(k, acc):
            return acc.at[k].set(acc[k - 1] * 2.0 + x[k])

        return lax.fori_loop(1, 6, body, x)

    check(fn, x)


def test_general_update_computation(check, rng):
    # scatter_apply's update computation ignores the update: a body that is no single ufunc,
    # applied twice at the duplicated index.
    x = sample(rng, (5, 6), np.float32)
    i = np.array([[1], [4], [1]], dtype=np.int32)
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))
    check(lambda x, i: lax.scatter_apply(x, i, lambda v: v * 2.0 + 1.0, dnums,
                                         update_shape=(3, 6)), x, i)
