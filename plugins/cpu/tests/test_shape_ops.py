"""Structural ops (constant, iota, broadcast_in_dim, reshape, transpose, slice, dynamic slices,
concatenate, pad, reverse, optimization_barrier) against XLA's CPU backend."""
import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
NUMERIC = [d for d in DTYPES if d is not np.bool_]


def ids(dtypes):
    return [np.dtype(d).name for d in dtypes]


def sample(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * 4).astype(dtype)


# -- constant and iota ------------------------------------------------------------------------
# One program per dtype holds every configuration of an op (each is a separate output), which
# keeps the number of XLA compilations, and so the test time, down.
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_constant(check, rng, dtype):
    values = []
    for shape in [(), (0,), (5,), (2, 3)]:
        values += [sample(rng, shape, dtype), np.full(shape, sample(rng, (), dtype), dtype=dtype)]
    check(lambda: tuple(values))


IOTAS = [((0,), 0), ((7,), 0), ((3, 5), 1), ((3, 0, 2), 2), ((300,), 0), ((2, 2049), 1)]


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
def test_iota(check, dtype):
    # 300 wraps int8/uint8; 2049 is not representable in float16 or bfloat16 (rounding).
    check(lambda: tuple(lax.broadcasted_iota(dtype, shape, dim) for shape, dim in IOTAS))


# -- broadcast, reshape, transpose ------------------------------------------------------------
BROADCASTS = [((), (4, 3), ()), ((3,), (4, 3), (1,)), ((3,), (3, 4), (0,)),
              ((1, 3), (2, 5, 3), (1, 2)), ((2, 1), (2, 0), (0, 1)), ((0,), (4, 0), (1,)),
              ((2, 3), (2, 3), (0, 1))]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_broadcast_in_dim(check, rng, dtype):
    xs = [sample(rng, src, dtype) for src, _, _ in BROADCASTS]
    check(lambda *xs: tuple(lax.broadcast_in_dim(x, shape, dims)
                            for x, (_, shape, dims) in zip(xs, BROADCASTS)), *xs)


RESHAPES = [((6,), (2, 3)), ((2, 3, 4), (4, 6)), ((), (1, 1)), ((0, 3), (3, 0)), ((5, 1), (5,))]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_reshape(check, rng, dtype):
    xs = [sample(rng, src, dtype) for src, _ in RESHAPES]
    check(lambda *xs: tuple(lax.reshape(x, shape) for x, (_, shape) in zip(xs, RESHAPES)), *xs)


def test_reshape_of_transposed_view(check, rng):
    # The transpose kernel returns a view; reshaping it must copy, not reinterpret memory.
    check(lambda x: lax.reshape(lax.transpose(x, (1, 0)), (12,)),
          sample(rng, (3, 4), np.float32))


TRANSPOSES = [((3, 4), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 0, 3), (1, 2, 0)), ((5,), (0,)),
              ((), ())]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_transpose(check, rng, dtype):
    xs = [sample(rng, src, dtype) for src, _ in TRANSPOSES]
    check(lambda *xs: tuple(lax.transpose(x, p) for x, (_, p) in zip(xs, TRANSPOSES)), *xs)


# -- slicing ----------------------------------------------------------------------------------
SLICES = [((7,), (1,), (6,), (2,)), ((5, 6), (1, 0), (4, 6), (1, 3)),
          ((4, 5), (2, 2), (2, 2), None), ((3, 4, 5), (0, 1, 2), (3, 4, 5), (2, 2, 2)),
          ((0, 3), (0, 1), (0, 3), None)]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_slice(check, rng, dtype):
    xs = [sample(rng, case[0], dtype) for case in SLICES]
    check(lambda *xs: tuple(lax.slice(x, *case[1:]) for x, case in zip(xs, SLICES)), *xs)


REVERSES = [((5,), (0,)), ((3, 4), (1,)), ((2, 3, 4), (0, 2)), ((0, 2), (0, 1)), ((), ())]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_reverse(check, rng, dtype):
    xs = [sample(rng, src, dtype) for src, _ in REVERSES]
    check(lambda *xs: tuple(lax.rev(x, dims) for x, (_, dims) in zip(xs, REVERSES)), *xs)


# Start indices are traced arguments, so clamping happens in the op (JAX only wraps negatives
# once by adding the dimension size; what is still out of range is clamped by XLA).
DYNAMIC_SLICES = [((7,), (3,), [(2,), (-1,), (-30,), (6,), (100,)]),
                  ((4, 5), (2, 3), [(1, 1), (-9, 4), (3, 100), (0, -2)]),
                  ((4, 0), (2, 0), [(1, 0), (9, 9)]),
                  ((3, 4), (0, 2), [(5, 1)])]


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64, np.uint32])
@pytest.mark.parametrize("src,sizes,starts", DYNAMIC_SLICES)
def test_dynamic_slice_clamps(check, rng, index_dtype, src, sizes, starts):
    x = sample(rng, src, np.float32)
    update = sample(rng, sizes, np.float32)

    def f(x, u, *i):  # one function, so XLA compiles once for all start values
        return lax.dynamic_slice(x, i, sizes), lax.dynamic_update_slice(x, u, i)

    for start in starts:
        if np.dtype(index_dtype).kind == "u" and min(start) < 0:
            continue
        check(f, x, update, *[np.asarray(s, dtype=index_dtype) for s in start])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_dynamic_slice_dtypes(check, rng, dtype):
    x = sample(rng, (5, 6), dtype)
    u = sample(rng, (2, 4), dtype)
    i, j = np.int32(2), np.int32(5)
    check(lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 4)), x, i, j)
    check(lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)


def test_dynamic_update_slice_leaves_input_intact(registry, rng):
    from pjrtkit.testing.programs import run_with_registry
    x = sample(rng, (4, 4), np.float32)
    before = x.copy()
    run_with_registry(lambda x, u: lax.dynamic_update_slice(x, u, (1, 1)),
                      (x, np.zeros((2, 2), np.float32)), registry)
    np.testing.assert_array_equal(x, before)


# -- concatenate, pad -------------------------------------------------------------------------
CONCATS = [([(2,), (3,), (1,)], 0), ([(2, 3), (2, 0), (2, 4)], 1), ([(1, 3), (4, 3)], 0),
           ([(0, 2), (0, 2)], 0), ([(3,)], 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_concatenate(check, rng, dtype):
    groups = [[sample(rng, s, dtype) for s in shapes] for shapes, _ in CONCATS]
    check(lambda groups: tuple(lax.concatenate(xs, dim)
                               for xs, (_, dim) in zip(groups, CONCATS)), groups)


PADS = [((5,), [(1, 2, 0)]), ((5,), [(-2, -1, 0)]), ((5,), [(2, 3, 2)]), ((4,), [(-3, -2, 1)]),
        ((3, 4), [(1, -1, 1), (-2, 3, 0)]), ((3,), [(-5, -3, 3)]), ((0, 2), [(1, 1, 2), (0, 1, 1)]),
        ((2, 3), [(-2, 0, 0), (0, 0, 0)]), ((), [])]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_pad(check, rng, dtype):
    xs = [sample(rng, src, dtype) for src, _ in PADS]
    value = sample(rng, (), dtype)
    check(lambda xs, v: tuple(lax.pad(x, v, config) for x, (_, config) in zip(xs, PADS)),
          xs, value)


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, ml_dtypes.bfloat16, np.float64],
                         ids=ids([np.bool_, np.int32, ml_dtypes.bfloat16, np.float64]))
def test_optimization_barrier(check, rng, dtype):
    x, y = sample(rng, (3, 2), dtype), sample(rng, (), dtype)
    check(lambda x, y: lax.optimization_barrier((x, y)), x, y)


def test_structural_chain(check, rng):
    # Views from one kernel feed the next: broadcast -> transpose -> slice -> reshape -> pad.
    def f(x):
        y = lax.broadcast_in_dim(x, (2, 3, 4), (1, 2))
        y = lax.transpose(y, (2, 0, 1))
        y = lax.slice(y, (0, 0, 1), (4, 2, 3), (2, 1, 1))
        y = lax.reshape(y, (8,))
        return lax.pad(lax.rev(y, (0,)), np.float32(-1), [(1, -2, 1)])

    check(f, sample(rng, (3, 4), np.float32))


def test_jnp_indexing_programs(check, rng):
    x = sample(rng, (6, 5), np.float32)
    check(lambda x: (x[::-2, 1:4], x[None, :, 2], jax.numpy.tile(x[:2], (2, 1)),
                     jax.numpy.roll(x, 2, axis=1)), x)


# -- forms JAX does not emit, as StableHLO text -----------------------------------------------


UNSORTED_BROADCAST = """
func.func public @main(%x: tensor<3x2xi16>, %y: tensor<4x1xi16>) -> (tensor<2x5x3xi16>, tensor<3x4x2xi16>) {
  %a = stablehlo.broadcast_in_dim %x, dims = [2, 0] : (tensor<3x2xi16>) -> tensor<2x5x3xi16>
  %b = stablehlo.broadcast_in_dim %y, dims = [1, 0] : (tensor<4x1xi16>) -> tensor<3x4x2xi16>
  return %a, %b : tensor<2x5x3xi16>, tensor<3x4x2xi16>
}
"""


def test_broadcast_in_dim_with_unsorted_dimensions(check_mlir, rng):
    check_mlir(UNSORTED_BROADCAST, sample(rng, (3, 2), np.int16), sample(rng, (4, 1), np.int16))


TUPLES = """
func.func public @main(%x: tensor<3xf32>, %y: tensor<i8>) -> (tensor<i8>, tensor<3xf32>) {
  %t = stablehlo.tuple %x, %y : tuple<tensor<3xf32>, tensor<i8>>
  %a = stablehlo.get_tuple_element %t[1] : (tuple<tensor<3xf32>, tensor<i8>>) -> tensor<i8>
  %b = stablehlo.get_tuple_element %t[0] : (tuple<tensor<3xf32>, tensor<i8>>) -> tensor<3xf32>
  return %a, %b : tensor<i8>, tensor<3xf32>
}
"""


def test_tuple_and_get_tuple_element(check_mlir, rng):
    check_mlir(TUPLES, sample(rng, (3,), np.float32), sample(rng, (), np.int8))
