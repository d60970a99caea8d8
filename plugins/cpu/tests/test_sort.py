"""stablehlo.sort against XLA's CPU backend: jnp.sort/argsort, lax.sort with several operands
and num_keys, descending order, NaN and signed zeros, and comparators that are not key chains."""
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from dtype_sample import sampled

ALL_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
SHAPES = [(0,), (1,), (9,), (4, 7), (3, 0), (2, 3, 5)]


def sample(rng, shape, dtype):
    """Few distinct values (many ties); floats include NaN, -0.0, +0.0 and infinities."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, 0, 1, 2, info.max // 2], dtype=dtype)
        return pool[rng.integers(0, len(pool), size=shape)]
    pool = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.0, 3.0], dtype=dtype)
    return pool[rng.integers(0, len(pool), size=shape)]


# dtype_sample's dtypes in make test, the others in make test-long
@pytest.mark.parametrize("dtype", sampled(ALL_DTYPES), ids=lambda d: np.dtype(d).name)
def test_sort_and_argsort(check, rng, dtype):
    xs = [sample(rng, shape, dtype) for shape in SHAPES]

    def fn(*xs):
        out = []
        for x in xs:
            for axis in range(x.ndim):
                out += [jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis),
                        jnp.sort(x, axis=axis, descending=True),
                        jnp.argsort(x, axis=axis, descending=True)]
        return out

    check(fn, *xs)


@pytest.mark.parametrize("num_keys", [1, 2, 3])
def test_lax_sort_multiple_operands(check, rng, num_keys):
    a = sample(rng, (4, 11), np.float32)
    b = sample(rng, (4, 11), np.int8)
    c = sample(rng, (4, 11), np.uint16)
    d = np.arange(44, dtype=np.int32).reshape(4, 11)
    check(lambda a, b, c, d: [lax.sort((a, b, c, d), dimension=dim, num_keys=num_keys)
                              for dim in (0, 1)], a, b, c, d)


def test_lax_sort_unstable_without_ties_and_scalar(check, rng):
    x = rng.permutation(30).astype(np.float64).reshape(3, 10)
    check(lambda x: [lax.sort(x, is_stable=False), lax.sort_key_val(x, -x)[1]], x)


def _custom_sort_primitive():
    """A sort primitive whose comparator is any JAX function (lax.sort only emits key chains),
    lowered exactly like lax.sort's own rule, so XLA and we both run the same stablehlo.sort."""
    from jax._src import core, util
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    prim = core.Primitive("pjrtkit_test_custom_sort")
    prim.multiple_results = True
    prim.def_abstract_eval(lambda *avals, less: [core.ShapedArray(a.shape, a.dtype)
                                                 for a in avals])

    def lower(ctx, *operands, less):
        out_types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
        sort = hlo.SortOp(out_types, operands, dimension=mlir.i64_attr(1),
                          is_stable=ir.BoolAttr.get(True))
        scalars = [core.ShapedArray((), a.dtype) for a in ctx.avals_in]
        types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in scalars]
        block = sort.comparator.blocks.append(*util.flatten(zip(types, types)))
        with ir.InsertionPoint(block):
            sub = ctx.replace(primitive=None, avals_in=util.flatten(zip(scalars, scalars)),
                              avals_out=[core.ShapedArray((), np.bool_)])
            (out,) = mlir.lower_fun(less, multiple_results=False)(sub, *block.arguments)
            hlo.return_([out] if not isinstance(out, (list, tuple)) else list(out))
        return sort.results

    mlir.register_lowering(prim, lower)
    return prim


CUSTOM_SORT = _custom_sort_primitive()


def _mixed_less(a, b, ya, yb):
    # Not a key chain: the key mixes two operands, so the merge-sort fallback must run it.
    return (a + ya.astype(a.dtype)) < (b + yb.astype(b.dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, ml_dtypes.bfloat16],
                         ids=lambda d: np.dtype(d).name)
def test_general_comparator_merge_sort(check, rng, dtype):
    xs = []
    for length in (1, 2, 7, 16, 33):
        xs.append(sample(rng, (3, length), dtype) if dtype is np.int32 else
                  rng.integers(-3, 3, size=(3, length)).astype(dtype))  # finite, with ties
        xs.append(rng.integers(0, 3, size=(3, length)).astype(np.int32))
    check(lambda *a: [CUSTOM_SORT.bind(a[i], a[i + 1], less=_mixed_less)
                      for i in range(0, len(a), 2)], *xs)



def test_jax_comparators_take_the_key_sort_path():
    # The merge-sort fallback gives the same answers, only ~30x slower, so check directly that
    # every comparator JAX emits is recognised as a key chain.
    from pjrtkit.testing.programs import lower_program
    from pjrtkit.reference.sort import lexicographic_keys

    x = np.zeros((3, 4), np.float32)
    i = np.zeros((3, 4), np.int32)
    fns = [lambda x, i: jnp.sort(x), lambda x, i: jnp.argsort(i, descending=True),
           lambda x, i: lax.sort((x, i, x), num_keys=2), lambda x, i: lax.sort((i, x), num_keys=2),
           lambda x, i: lax.sort((x.astype(np.bool_), i, x), num_keys=3)]
    for fn, num_keys in zip(fns, [1, 1, 2, 2, 3]):
        program = lower_program(fn, x, i)
        sorts = [op for f in program.functions.values() for op in f.body.entry.ops
                 if op.name == "stablehlo.sort"]
        assert sorts
        for op in sorts:
            keys = lexicographic_keys(op.regions[0])
            assert keys is not None and len(keys) == num_keys, op.describe()


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_complex_sort_and_argsort(check, rng, dtype):
    # Lexicographic (real, then imaginary) with NaN parts and ties: XLA's total order on
    # complex keys, stable.
    parts = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.0], np.float64)
    xs = []
    for shape in SHAPES:
        x = np.empty(shape, dtype)
        x.real, x.imag = (parts[rng.integers(0, len(parts), shape)] for _ in range(2))
        xs.append(x)

    def fn(*xs):
        out = []
        for x in xs:
            for axis in range(x.ndim):
                out += [jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis),
                        jnp.argsort(x, axis=axis, descending=True)]
        return out

    check(fn, *xs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_approx_top_k_fallback(check, rng, dtype):
    # custom_call @ApproxTopK (JAX's lowering off TPU): XLA's fallback is an exact sort and
    # slice. Distinct values, so the indices are unique too (XLA's sort here is unstable: among
    # ties its order is its own); integers up to 240 are exact in bfloat16.
    x = (rng.permutation(2 * 120).reshape(2, 120) - 100).astype(dtype)

    def fn(x):
        return [*lax.approx_max_k(x, 5), *lax.approx_min_k(x, 3),
                *lax.approx_max_k(x, 2, reduction_dimension=0),
                *lax.approx_min_k(x, 4, recall_target=0.5, aggregate_to_topk=False)]

    out = check(fn, x)
    assert out[-1].shape[1] > 4  # aggregate_to_topk=False keeps more than k


def test_approx_top_k_one_keeps_the_last_tie_as_xla(check, rng):
    # For k = 1 XLA reduces with select(comparator(lhs, rhs), lhs, rhs) instead of sorting.
    x = rng.integers(0, 4, size=(3, 200)).astype(np.float32)
    check(lambda x: [*lax.approx_max_k(x, 1), *lax.approx_min_k(x, 1)], x)
