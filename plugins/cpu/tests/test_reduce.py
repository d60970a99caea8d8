"""stablehlo.reduce, reduce_window and select_and_scatter against XLA's CPU backend."""
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
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 3), (4, 3, 5)]


def sample(rng, shape, dtype, special=False):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -9, 10, size=shape).astype(dtype)
    x = rng.normal(size=shape)
    if special and x.size:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, size=max(1, flat.size // 5))] = np.nan
        flat[rng.integers(0, flat.size, size=max(1, flat.size // 5))] = -0.0
        flat[rng.integers(0, flat.size, size=max(1, flat.size // 5))] = np.inf
    return x.astype(dtype)


def all_axes(shape):
    return [None] + list(range(len(shape))) + ([(0, len(shape) - 1)] if len(shape) > 1 else [])


REDUCTIONS = {
    "sum": (jnp.sum, NUMERIC),
    "prod": (jnp.prod, NUMERIC),
    "max": (jnp.max, ALL_DTYPES),
    "min": (jnp.min, ALL_DTYPES),
    "any": (jnp.any, [np.bool_]),
    "all": (jnp.all, [np.bool_]),
    "argmax": (jnp.argmax, ALL_DTYPES),
    "argmin": (jnp.argmin, ALL_DTYPES),
}


@pytest.mark.parametrize("dtype", sampled(ALL_DTYPES), ids=lambda d: np.dtype(d).name)
def test_jnp_reductions(check, rng, dtype):
    # One program per dtype holding every reduction over every axis choice of every shape, so
    # the comparison with XLA costs one compile.
    cases = []
    for name, (fn, dtypes) in REDUCTIONS.items():
        if dtype not in dtypes:
            continue
        for i, shape in enumerate(SHAPES):
            for axis in all_axes(shape):
                if name.startswith("arg") and (not isinstance(axis, int) or 0 in shape):
                    continue  # argmax needs one axis and a non-empty input
                if name in ("max", "min") and 0 in shape:
                    continue  # jnp refuses empty max/min without an initial value
                cases.append((fn, i, axis))
    xs = [sample(rng, shape, dtype, special=True) for shape in SHAPES]
    check(lambda *xs: [fn(xs[i], axis=axis) for fn, i, axis in cases], *xs)


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
def test_lax_reduce_non_identity_init(check, rng, dtype):
    x = sample(rng, (3, 6), dtype)
    init = np.asarray(3, dtype)
    ops = [lax.add, lax.mul, lax.max, lax.min]
    if np.dtype(dtype).kind in "iu":
        ops += [lax.bitwise_and, lax.bitwise_or, lax.bitwise_xor]
    check(lambda x, i: [lax.reduce(x, i, op, dims) for op in ops for dims in ((1,), (0, 1))],
          x, init)


def test_lax_reduce_bool_bitwise(check, rng):
    x = sample(rng, (4, 5), np.bool_)
    ops = [lax.bitwise_and, lax.bitwise_or, lax.bitwise_xor, lax.max, lax.min]
    check(lambda x: [lax.reduce(x, init, op, (0,)) for op in ops for init in (False, True)], x)


@pytest.mark.parametrize("length", [1, 5, 64, 65, 300])
def test_region_body_sequential_and_tree(check, rng, length):
    # XLA leaves the order of a reduction unspecified (it splits long rows into partial
    # accumulators and drops the init of length-1 rows), so only associative region bodies with
    # identity inits have one right answer; these take the region path, not a ufunc.
    x = sample(rng, (3, length), np.float64)
    check(lambda x: [lax.reduce(x, -np.inf, lambda a, b: jnp.maximum(a, b) * 1.0, (1,)),
                     lax.reduce(x, np.inf, lambda a, b: jnp.minimum(a + 0.0, b), (0,))], x)


@pytest.mark.parametrize("length", [5, 65, 300])
def test_region_bodies_that_call_functions(check, rng, length):
    # jnp.where in a body lowers to ``func.call @_where`` with scalar types: applied to whole
    # arrays (the tree path past 64 elements, reduce_window, scatter), the call is inlined so
    # its ops take the array shape (it failed with INTERNAL "cannot reshape" before).
    x = rng.integers(0, 5, size=(3, length)).astype(np.float32)

    def body(a, b):
        return (jnp.where(a[0] > b[0], a[0], b[0]), jnp.where(a[0] > b[0], a[1], b[1]))

    def fn(x):
        i = lax.broadcasted_iota(jnp.int32, x.shape, 1)
        inits = (np.float32(-np.inf), np.int32(-1))
        return [*lax.reduce((x, i), inits, body, (1,)),
                *lax.reduce_window((x, i), inits, body, (1, 4), (1, 2), "SAME"),
                x[0].at[jnp.array([1, 1, 3])].apply(lambda v: jnp.where(v > 2, v * 2, -v))]

    check(fn, x)


def test_variadic_reduce_argmax_large_axis_ties_and_nan(check, rng):
    x = rng.integers(0, 4, size=(3, 500)).astype(np.float32)
    x[1, 200] = np.nan
    x[1, 300] = np.nan
    check(lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=1)), x)
    check(lambda x: (jnp.argmax(x, axis=0), jnp.argmin(x, axis=0)), x)


WINDOWS = [
    # window, strides, padding, base_dilation, window_dilation
    ((2, 2), (1, 1), "VALID", None, None),
    ((3, 2), (2, 1), "SAME", None, None),
    ((2, 3), (1, 2), ((1, 2), (-1, 1)), (2, 1), (1, 2)),
    ((1, 1), (3, 2), ((0, 0), (2, 2)), None, None),
    ((5, 1), (1, 1), ((4, 0), (0, 0)), None, None),  # the shape jnp.cumsum emits
]


@pytest.mark.parametrize("dtype", sampled(ALL_DTYPES), ids=lambda d: np.dtype(d).name)
def test_reduce_window(check, rng, dtype):
    x = sample(rng, (5, 7), dtype, special=True)
    # Non-identity inits: XLA folds the init in once and skips padding and dilation holes.
    ops = [(lax.max, np.asarray(0, dtype)), (lax.min, np.asarray(1, dtype))]
    if dtype is not np.bool_:
        ops += [(lax.add, np.asarray(0, dtype)), (lax.add, np.asarray(2, dtype))]

    def fn(x, *inits):
        return [lax.reduce_window(x, init, op, dims, strides, padding, base, wdil)
                for (op, _), init in zip(ops, inits)
                for dims, strides, padding, base, wdil in WINDOWS]

    check(fn, x, *(init for _, init in ops))


@pytest.mark.parametrize("dtype", sampled(NUMERIC), ids=lambda d: np.dtype(d).name)
def test_cumulative(check, rng, dtype):
    x = sample(rng, (4, 9), dtype)
    check(lambda x: [fn(x, axis=axis, reverse=reverse)
                     for fn in (lax.cumsum, lax.cummax, lax.cummin, lax.cumprod)
                     for axis in (0, 1) for reverse in (False, True)]
          + [jnp.cumsum(x, axis=1), jnp.cumprod(x, axis=0)], x)


def test_cumsum_non_identity_init_and_region_body(check, rng):
    x = sample(rng, (3, 6), np.float32)
    pad = ((0, 0), (5, 0))
    check(lambda x: lax.reduce_window(x, np.float32(0.5), lambda a, b: a * 0.5 + b, (1, 6),
                                      (1, 1), ((0, 0), (2, 3)), (1, 2)), x)
    check(lambda x: lax.reduce_window(x, np.float32(1), lax.add, (1, 6), (1, 1), pad), x)
    check(lambda x: lax.reduce_window(x, np.float32(0.5), lambda a, b: a * 0.5 + b, (1, 3),
                                     (1, 1), pad), x)


def test_variadic_reduce_window(check, rng):
    x = sample(rng, (6, 5), np.float32)
    idx = np.arange(30, dtype=np.int32).reshape(6, 5)

    def body(a, b):
        take = a[0] >= b[0]
        return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])

    check(lambda x, i: lax.reduce_window((x, i), (np.float32(-np.inf), np.int32(0)), body, (2, 2), (2, 1),
                                         "SAME"), x, idx)


POOLS = [((2, 2), (2, 2), "VALID"), ((3, 3), (2, 2), "SAME"), ((3, 2), (1, 1), "SAME")]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_pool_gradients_select_and_scatter(check, rng, dtype):
    # Integer-valued inputs make ties, which select GE must resolve to the first maximum.
    x = rng.integers(0, 4, size=(2, 7, 6, 3)).astype(dtype)

    def pool_loss(x, op, init, window, strides, padding):
        y = lax.reduce_window(x, init, op, (1, *window, 1), (1, *strides, 1), padding)
        return (y * (jnp.arange(y.size) % 7).astype(y.dtype).reshape(y.shape)).sum()

    check(lambda x: [jax.grad(pool_loss)(x, op, init, *pool)
                     for pool in POOLS for op, init in ((lax.max, -jnp.inf), (lax.add, 0.0))], x)


# Windows that do not overlap (strides of at least the window, no padding): the gradient
# needs no scatter (reference/reduce.py, _disjoint_windows_kernel); with gaps between windows,
# NaNs, ties and a dtype of every width the blend reads as bits.
DISJOINT_POOLS = [((2, 2), (2, 2)), ((2, 3), (3, 3)), ((1, 2), (1, 2))]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int8,
                                   np.uint16], ids=lambda d: np.dtype(d).name)
def test_max_pool_gradients_of_disjoint_windows(check, rng, dtype):
    from jax._src.lax.windowed_reductions import _select_and_scatter

    x = rng.integers(0, 5, size=(3, 8, 9, 4)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[0, 0, :3, 0] = np.nan
        x[1] = rng.normal(size=x.shape[1:]).astype(dtype)  # no ties: half the choices move

    def pool_grad(x, window, strides):
        rows = (x.shape[1] - window[0]) // strides[0] + 1
        cols = (x.shape[2] - window[1]) // strides[1] + 1
        source = (jnp.arange(3 * rows * cols * 4) % 7 + 1).astype(x.dtype)
        return _select_and_scatter(x, lambda a, b: a >= b, (1, *window, 1), (1, *strides, 1),
                                   ((0, 0),) * 4, source.reshape(3, rows, cols, 4),
                                   np.array(0, x.dtype), lambda a, b: a + b)

    check(lambda x: [pool_grad(x, *pool) for pool in DISJOINT_POOLS], x)


def test_select_and_scatter_general_regions(check, rng):
    from jax._src.lax.windowed_reductions import _select_and_scatter

    operand = rng.normal(size=(6, 6)).astype(np.float32)
    source = rng.normal(size=(3, 3)).astype(np.float32)

    def fn(operand, source):
        return _select_and_scatter(operand, lambda a, b: a <= b + 0.0, (2, 2), (2, 2),
                                   ((0, 0), (0, 0)), source, np.float32(1.0),
                                   lambda a, b: a * 2.0 + b)

    check(fn, operand, source)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_complex_reductions(check, rng, dtype):
    # sum/prod in the complex type; max/min order complex numbers lexicographically
    # (real part, then imaginary), as XLA's CPU backend does; many ties on purpose.
    def draw(shape):
        return (rng.integers(-2, 3, shape) + 1j * rng.integers(-2, 3, shape)).astype(dtype)

    xs = [draw(shape) for shape in SHAPES]
    wide = (rng.normal(size=(40, 33)) + 1j * rng.normal(size=(40, 33))).astype(dtype)

    def fn(wide, *xs):
        out = [jnp.sum(wide, axis=0), jnp.prod(wide[:6] / 2, axis=0), jnp.cumsum(wide, axis=1),
               lax.reduce_window(wide, np.array(0, dtype), lax.add, (2, 3), (1, 2), "VALID"),
               jax.grad(lambda w: jnp.real(jnp.sum(lax.reduce_window(
                   w, np.array(0, dtype), lax.add, (2, 2), (2, 2), "VALID") ** 2)))(wide)]
        for x in xs:
            for axis in all_axes(x.shape):
                out += [jnp.sum(x, axis=axis), jnp.prod(x, axis=axis)]
                if 0 not in x.shape:
                    out += [jnp.max(x, axis=axis), jnp.min(x, axis=axis)]
        return out

    check(fn, wide, *xs, loosen=4.0)
