"""The layer-3 table: JAX programs x dtypes x shapes, each compared against XLA's CPU backend.

This module holds the table's vocabulary (``Case``, ``add``, ``sample``) and the op families
every backend is expected to grow into (elementwise, reductions, dots, control flow, ...). The
rest of JAX's surface is in its siblings: ``jax_cases_dtypes`` (every PJRT buffer dtype),
``jax_cases_numerics`` (complex numbers, linalg, fft) and ``jax_cases_programs`` (random as
users call it, host callbacks, training steps); ``jax_checks.all_cases`` joins them.

Ids read ``jax.<family>.<program>[<dtype>-<shape>]``. Inputs are drawn from an RNG seeded with
the id. Where float results would depend on summation order (sums, dots, convolutions,
cumulative sums), inputs are small integers stored as floats, so every order gives the same
exact answer and the table's tolerance stays meaningful.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ml_dtypes
import numpy as np


BOOL = np.dtype(np.bool_)
SIGNED = tuple(np.dtype(d) for d in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = tuple(np.dtype(d) for d in (np.uint8, np.uint16, np.uint32, np.uint64))
INTS = SIGNED + UNSIGNED
FLOATS = tuple(np.dtype(d) for d in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
NUMERIC = INTS + FLOATS
ALL = (BOOL,) + NUMERIC
F32, F64, I32 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32)


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def sample(rng: np.random.Generator, shape, dtype, kind: str = "any") -> np.ndarray:
    """Inputs of ``dtype``. kinds: any, positive, nonzero, unit (|x| < 1), small_int (integers
    -8..8, exact in every float dtype), shift (valid shift amounts)."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype == BOOL:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        if kind == "shift":
            return rng.integers(0, dtype.itemsize * 8, size=shape).astype(dtype)
        low = 1 if kind in ("positive", "nonzero") else (0 if dtype.kind == "u" else -50)
        high = 100 if dtype.kind == "u" else 50
        values = rng.integers(low, high, size=shape)
        if kind == "nonzero" and dtype.kind == "i":
            values = values * rng.choice([-1, 1], size=shape)
        return values.astype(dtype)
    if kind == "small_int":
        return rng.integers(-8, 9, size=shape).astype(dtype)
    if kind == "positive":
        values = rng.uniform(0.1, 4.0, size=shape)
    elif kind == "unit":
        values = rng.uniform(-0.9, 0.9, size=shape)
    elif kind == "nonzero":
        values = rng.uniform(0.5, 3.0, size=shape) * rng.choice([-1, 1], size=shape)
    else:
        values = rng.normal(0.0, 2.0, size=shape)
    return np.asarray(values).astype(dtype)


def arguments(*specs) -> Callable[[np.random.Generator], tuple]:
    """specs: (shape, dtype[, kind]) per argument."""

    def make(rng):
        return tuple(sample(rng, *spec) for spec in specs)

    return make


@dataclasses.dataclass(frozen=True)
class Case:
    """One row of the table. ``make_args(rng)`` returns NumPy inputs (possibly non-contiguous);
    ``fn`` is a JAX function of them. ``loosen`` multiplies the tolerance (say why where set).
    ``donate``: argument 0 is donated and must read as deleted afterwards on the device under
    test. ``prejitted``: ``fn`` is already a jitted function (jit of grad/vmap cases).
    ``eager``: ``fn`` is called without jit under ``jax.default_device`` (op-by-op dispatch,
    eager PRNG keys, plain transfers). ``invariants(outputs, args)``: for results with a
    freedom (signs of eigenvectors, ...), maps one side's NumPy outputs to what must agree
    (sorted eigenvalues, reconstructions); None compares the outputs themselves.
    ``prints``: what the program prints (``jax.debug.print``) must also agree.
    ``capability``: the feature a case measures in the report (default ``JAX <family>``)."""

    id: str
    family: str
    fn: Callable
    make_args: Callable[[np.random.Generator], tuple]
    loosen: float = 1.0
    donate: bool = False
    prejitted: bool = False
    jit_kwargs: dict = dataclasses.field(default_factory=dict)
    description: str = ""
    eager: bool = False
    invariants: Callable[[list, tuple], list] | None = None
    prints: bool = False
    capability: str = ""

    @property
    def feature(self) -> str:
        return self.capability or f"JAX {self.family}"

    @property
    def dtype_name(self) -> str:
        """The dtype part of the id's tag (``float32`` of ``jax.x.y[float32-3x4]``)."""
        return self.id[self.id.index("[") + 1:-1].split("-")[0]

    @property
    def op_name(self) -> str:
        """``<family>.<program>`` of the id."""
        return self.id[len("jax."):self.id.index("[")]


CASES: list[Case] = []


def add(family: str, name: str, fn: Callable, make_args, tag: str, **kwargs) -> None:
    CASES.append(Case(id=f"jax.{family}.{name}[{tag}]", family=family, fn=fn,
                      make_args=make_args, **kwargs))


def tag(dtype, shape) -> str:
    return f"{np.dtype(dtype).name}-{shape_text(shape)}"


def _elementwise() -> None:
    import jax.numpy as jnp
    from jax import lax

    s = (3, 4)
    binary = [
        ("add", jnp.add, ALL, "any"),
        ("subtract", jnp.subtract, NUMERIC, "any"),
        ("multiply", jnp.multiply, ALL, "any"),
        ("divide", jnp.divide, FLOATS, "nonzero"),
        ("integer_divide", lax.div, INTS, "nonzero"),
        ("remainder", lax.rem, INTS + (F32, F64), "nonzero"),
        ("maximum", jnp.maximum, NUMERIC, "any"),
        ("minimum", jnp.minimum, NUMERIC, "any"),
        ("power", jnp.power, (F32, F64), "positive"),
        ("atan2", jnp.arctan2, FLOATS, "nonzero"),
        ("bitwise_and", jnp.bitwise_and, (BOOL,) + INTS, "any"),
        ("bitwise_or", jnp.bitwise_or, (BOOL,) + INTS, "any"),
        ("bitwise_xor", jnp.bitwise_xor, (BOOL,) + INTS, "any"),
    ]
    for name, fn, dtypes, kind in binary:
        for d in dtypes:
            add("elementwise", name, fn, arguments((s, d), (s, d, kind)), tag(d, s))
    for name, fn in (("shift_left", lax.shift_left),
                     ("shift_right_logical", lax.shift_right_logical),
                     ("shift_right_arithmetic", lax.shift_right_arithmetic)):
        for d in INTS:
            add("elementwise", name, fn, arguments((s, d), (s, d, "shift")), tag(d, s))

    unary_float = [
        ("negate", jnp.negative, "any"), ("abs", jnp.abs, "any"), ("exp", jnp.exp, "unit"),
        ("log", jnp.log, "positive"), ("sin", jnp.sin, "any"), ("cos", jnp.cos, "any"),
        ("tanh", jnp.tanh, "any"), ("sqrt", jnp.sqrt, "positive"),
        ("rsqrt", lax.rsqrt, "positive"), ("logistic", lax.logistic, "any"),
        ("floor", jnp.floor, "any"), ("ceil", jnp.ceil, "any"), ("round", jnp.round, "any"),
        ("sign", jnp.sign, "any"), ("expm1", jnp.expm1, "unit"), ("log1p", jnp.log1p, "unit"),
    ]
    for name, fn, kind in unary_float:
        for d in FLOATS:
            add("elementwise", name, fn, arguments((s, d, kind)), tag(d, s))
    for d in SIGNED:
        add("elementwise", "negate", jnp.negative, arguments((s, d)), tag(d, s))
        add("elementwise", "abs", jnp.abs, arguments((s, d)), tag(d, s))
    for d in (BOOL,) + INTS:
        add("elementwise", "bitwise_not", jnp.invert, arguments((s, d)), tag(d, s))
    for d in INTS:
        add("elementwise", "population_count", lax.population_count, arguments((s, d)), tag(d, s))
    for d in (I32, np.dtype(np.uint8), np.dtype(np.int64)):
        add("elementwise", "count_leading_zeros", lax.clz, arguments((s, d)), tag(d, s))


def _compare_select() -> None:
    import jax.numpy as jnp

    s = (4, 3)
    for d in ALL:
        add("compare", "less", jnp.less, arguments((s, d), (s, d)), tag(d, s))
        add("compare", "equal", jnp.equal, arguments((s, d), (s, d)), tag(d, s))
        add("select", "where", lambda c, x, y: jnp.where(c, x, y),
            arguments((s, BOOL), (s, d), (s, d)), tag(d, s))
    for d in (F32, I32, np.dtype(np.uint16)):
        add("select", "clip", lambda x: jnp.clip(x, 1, 20), arguments((s, d)), tag(d, s))


def _convert() -> None:
    from jax import lax

    s = (3, 5)
    pairs = [(F32, I32, "any"), (I32, F32, "any"), (F64, np.float16, "any"),
             (ml_dtypes.bfloat16, F32, "any"), (F32, ml_dtypes.bfloat16, "any"),
             (BOOL, np.int8, "any"), (np.uint8, F32, "any"), (F32, BOOL, "any"),
             (np.int64, np.int8, "any"), (np.uint32, np.int64, "any"), (F64, np.uint8, "positive"),
             (np.float16, F64, "any")]
    for src, dst, kind in pairs:
        src, dst = np.dtype(src), np.dtype(dst)
        add("convert", f"to_{dst.name}", lambda x, dst=dst: x.astype(dst),
            arguments((s, src, kind)), tag(src, s))
    bitcasts = [(F32, np.int32), (np.float16, np.uint16), (ml_dtypes.bfloat16, np.int16),
                (F64, np.uint64), (I32, F32)]
    for src, dst in bitcasts:
        src, dst = np.dtype(src), np.dtype(dst)
        add("convert", f"bitcast_to_{dst.name}",
            lambda x, dst=dst: lax.bitcast_convert_type(x, dst), arguments((s, src)), tag(src, s))


def _reductions() -> None:
    import jax.numpy as jnp
    from jax import lax

    s = (4, 5)
    for d in NUMERIC:
        kind = "small_int" if d.kind == "f" else "any"
        add("reduce", "sum_axis1", lambda x: jnp.sum(x, axis=1), arguments((s, d, kind)),
            tag(d, s))
    for d in (F32, I32, np.dtype(np.uint8), np.dtype(ml_dtypes.bfloat16), F64):
        add("reduce", "max", lambda x: jnp.max(x, axis=0), arguments((s, d)), tag(d, s))
        add("reduce", "min", jnp.min, arguments((s, d)), tag(d, s))
    for d in (F32, I32):
        add("reduce", "prod", lambda x: jnp.prod(x, axis=1), arguments((s, d, "small_int")),
            tag(d, s))
        add("reduce", "argmax", lambda x: jnp.argmax(x, axis=1), arguments((s, d)), tag(d, s))
        add("reduce", "argmin", lambda x: jnp.argmin(x, axis=0), arguments((s, d)), tag(d, s))
    for d in (F32, F64):
        add("reduce", "mean", lambda x: jnp.mean(x, axis=(0, 1)), arguments((s, d, "small_int")),
            tag(d, s))
        add("reduce", "sum_keepdims", lambda x: jnp.sum(x, axis=0, keepdims=True),
            arguments(((2, 3, 4), d, "small_int")), tag(d, (2, 3, 4)))
    add("reduce", "any", lambda x: jnp.any(x, axis=1), arguments((s, BOOL)), tag(BOOL, s))
    add("reduce", "all", lambda x: jnp.all(x, axis=0), arguments((s, BOOL)), tag(BOOL, s))

    def argmax_body(a, b):  # jnp.where in a body: a func.call the region must take whole
        return (jnp.where(a[0] > b[0], a[0], b[0]), jnp.where(a[0] > b[0], a[1], b[1]))

    add("reduce", "variadic_body_calling_functions",
        lambda x: lax.reduce((x, lax.broadcasted_iota(jnp.int32, x.shape, 1)),
                             (np.float32(-np.inf), np.int32(-1)), argmax_body, (1,)),
        arguments(((3, 100), F32)), tag(F32, (3, 100)))


def _dot() -> None:
    import jax.numpy as jnp
    from jax import lax

    for d in FLOATS + (np.dtype(np.int8), I32, np.dtype(np.int64), np.dtype(np.uint8)):
        kind = "small_int" if d.kind == "f" else "any"
        add("dot", "matmul", jnp.matmul, arguments(((3, 4), d, kind), ((4, 5), d, kind)),
            tag(d, (3, 4)))
    for d in (F32, F64, I32):
        kind = "small_int" if d.kind == "f" else "any"
        add("dot", "batched_matmul", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
            arguments(((2, 3, 4), d, kind), ((2, 4, 5), d, kind)), tag(d, (2, 3, 4)))
    add("dot", "matvec", jnp.dot, arguments(((5, 6), F32, "small_int"), ((6,), F32, "small_int")),
        tag(F32, (5, 6)))
    add("dot", "dot_general_transposed",
        lambda a, b: lax.dot_general(a, b, (((0,), (1,)), ((2,), (0,)))),
        arguments(((4, 3, 2), F32, "small_int"), ((2, 4, 5), F32, "small_int")),
        tag(F32, (4, 3, 2)))
    add("dot", "matmul_large", jnp.matmul,
        arguments(((128, 256), F32, "small_int"), ((256, 64), F32, "small_int")),
        tag(F32, (128, 256)))


def _convolution() -> None:
    from jax import lax

    def conv(**kw):
        return lambda x, w: lax.conv_general_dilated(x, w, **kw)

    specs = [
        ("conv2d_nchw", dict(window_strides=(1, 1), padding="VALID"), (1, 2, 6, 6), (3, 2, 3, 3)),
        ("conv2d_stride_same", dict(window_strides=(2, 2), padding="SAME"), (2, 3, 7, 7),
         (4, 3, 3, 3)),
        ("conv2d_dilated", dict(window_strides=(1, 1), padding=((1, 1), (2, 2)),
                                rhs_dilation=(2, 2)), (1, 2, 8, 8), (2, 2, 3, 3)),
        ("conv2d_grouped", dict(window_strides=(1, 1), padding="VALID", feature_group_count=2),
         (1, 4, 5, 5), (4, 2, 2, 2)),
        ("conv1d", dict(window_strides=(1,), padding="SAME"), (2, 3, 9), (2, 3, 4)),
    ]
    for name, kw, xs, ws in specs:
        for d in (F32, F64) if name == "conv2d_nchw" else (F32,):
            add("convolution", name, conv(**kw), arguments((xs, d, "small_int"), (ws, d, "small_int")),
                tag(d, xs))
    add("convolution", "conv2d_nhwc",
        lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC")),
        arguments(((2, 5, 5, 3), F32, "small_int"), ((3, 3, 3, 4), F32, "small_int")),
        tag(F32, (2, 5, 5, 3)))


def _lowest(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.array(-np.inf if dtype.kind == "f" else np.iinfo(dtype).min).astype(dtype)


def _pooling() -> None:
    from jax import lax

    s = (2, 6, 6, 3)
    for d in (F32, I32, F64):
        add("reduce_window", "max_pool",
            lambda x: lax.reduce_window(x, _lowest(x.dtype), lax.max,
                                        (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
            arguments((s, d)), tag(d, s))
    for d in (F32, F64):
        add("reduce_window", "sum_pool_same",
            lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
            arguments((s, d, "small_int")), tag(d, s))
    add("reduce_window", "avg_pool_strided",
        lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4,
        arguments((s, F32, "small_int")), tag(F32, s))


def _indexing() -> None:
    import jax.numpy as jnp
    from jax import lax

    idx = lambda rng: np.array([3, 0, 2, 2], np.int32)  # noqa: E731 - fixed indices

    def with_idx(shape, dtype, kind="any"):
        return lambda rng: (sample(rng, shape, dtype, kind), idx(rng))

    for d in (F32, I32, np.dtype(np.uint8), F64):
        add("indexing", "gather_rows", lambda x, i: x[i], with_idx((5, 3), d), tag(d, (5, 3)))
    for d in (F32, np.dtype(np.int64)):
        add("indexing", "scatter_set", lambda x, i: x.at[i].set(7), with_idx((5, 3), d),
            tag(d, (5, 3)))
    add("indexing", "scatter_add", lambda x, i: x.at[i].add(1.5),
        with_idx((5, 3), F32, "small_int"), tag(F32, (5, 3)))
    add("indexing", "scatter_max", lambda x, i: x.at[i].max(0), with_idx((5, 3), I32),
        tag(I32, (5, 3)))
    add("indexing", "take_clip", lambda x, i: jnp.take(x, i * 2, axis=0, mode="clip"),
        with_idx((5, 3), F32), tag(F32, (5, 3)))
    add("indexing", "take_along_axis",
        lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
        arguments(((4, 6), F32)), tag(F32, (4, 6)))
    add("indexing", "dynamic_slice",
        lambda x, i: lax.dynamic_slice(x, (i[0], i[1]), (2, 2)), with_idx((5, 3), I32),
        tag(I32, (5, 3)))
    add("indexing", "dynamic_update_slice",
        lambda x, i: lax.dynamic_update_slice(x, jnp.ones((2, 2), x.dtype), (i[2], i[1])),
        with_idx((5, 3), F32), tag(F32, (5, 3)))


def _sorting() -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax

    s = (3, 7)
    for d in (F32, F64, I32, np.dtype(np.uint8), np.dtype(ml_dtypes.bfloat16),
              np.dtype(np.int64), np.dtype(np.float16)):
        add("sort", "sort", lambda x: jnp.sort(x, axis=-1), arguments((s, d)), tag(d, s))
    for d in (F32, I32):
        # Duplicates are frequent in small ints: argsort must be stable, as XLA's is.
        add("sort", "argsort", lambda x: jnp.argsort(x, axis=-1, stable=True),
            arguments((s, d, "small_int" if d.kind == "f" else "any")), tag(d, s))
    add("sort", "sort_axis0", lambda x: jnp.sort(x, axis=0), arguments((s, F32)), tag(F32, s))
    add("sort", "sort_with_nan",
        lambda x: jnp.sort(jnp.where(x > 1.0, jnp.nan, x)), arguments(((16,), F32)),
        tag(F32, (16,)))
    add("sort", "sort_key_value", lambda k, v: lax.sort((k, v), num_keys=1),
        arguments(((9,), I32), ((9,), F32)), tag(I32, (9,)))
    add("sort", "top_k", lambda x: jax.lax.top_k(x, 3), arguments(((4, 8), F32)), tag(F32, (4, 8)))
    # custom_call @ApproxTopK, JAX's lowering off TPU; distinct values (XLA's sort is unstable).
    add("sort", "approx_max_k",
        lambda x: lax.approx_max_k(jnp.argsort(x, axis=1).astype(x.dtype), 4),
        arguments(((4, 40), F32)), tag(F32, (4, 40)))


def _cumulative() -> None:
    import jax.numpy as jnp
    from jax import lax

    s = (4, 6)
    for d in (F32, I32, np.dtype(np.int64), F64):
        add("cumulative", "cumsum", lambda x: jnp.cumsum(x, axis=1),
            arguments((s, d, "small_int" if d.kind == "f" else "any")), tag(d, s))
    add("cumulative", "cumprod", lambda x: jnp.cumprod(x, axis=0),
        arguments((s, F32, "small_int")), tag(F32, s))
    add("cumulative", "cummax", lambda x: lax.cummax(x, axis=1), arguments((s, I32)), tag(I32, s))


def _control_flow() -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax

    add("control_flow", "fori_loop",
        lambda x: lax.fori_loop(0, 5, lambda i, a: a * 0.5 + i, x), arguments(((3,), F32)),
        tag(F32, (3,)))
    add("control_flow", "fori_loop",
        lambda x: lax.fori_loop(0, 7, lambda i, a: a * 3 + i, x), arguments(((4,), I32)),
        tag(I32, (4,)))
    add("control_flow", "while_loop",
        lambda x: lax.while_loop(lambda c: c[0] < 100, lambda c: (c[0] * 2 + 1, c[1] + 1),
                                 (x, np.int32(0))),
        arguments(((), I32, "positive")), tag(I32, ()))
    add("control_flow", "scan",
        lambda xs: lax.scan(lambda c, x: (c * 0.9 + x, c + x), np.float32(0), xs),
        arguments(((6,), F32)), tag(F32, (6,)))
    add("control_flow", "scan_pytree_carry",
        lambda xs: lax.scan(lambda c, x: ({"s": c["s"] + x, "n": c["n"] + 1}, x * 2),
                            {"s": np.zeros(3, np.float64), "n": np.int32(0)}, xs),
        arguments(((5, 3), F64)), tag(F64, (5, 3)))
    for branch, sign in (("true", 1.0), ("false", -1.0)):
        # The predicate depends on the data, so the branch is taken at run time.
        add("control_flow", f"cond_{branch}",
            lambda x, sign=sign: lax.cond(sign * (jnp.abs(x).sum() + 1) > 0,
                                          lambda v: v * 2, lambda v: v - 1, x),
            arguments(((3, 2), F32)), tag(F32, (3, 2)))
    add("control_flow", "switch",
        lambda i, x: lax.switch(i, [lambda v: v + 1, lambda v: v * 3, lambda v: -v], x),
        lambda rng: (np.int32(1), sample(rng, (4,), I32)), tag(I32, (4,)))
    add("control_flow", "nested_loops",
        lambda x: lax.fori_loop(0, 3, lambda i, a: lax.fori_loop(0, 2, lambda j, b: b + i * j,
                                                                  a), x),
        arguments(((2, 2), I32)), tag(I32, (2, 2)))
    add("control_flow", "jit_of_map", lambda x: jax.lax.map(lambda r: r.sum(), x),
        arguments(((4, 3), F32, "small_int")), tag(F32, (4, 3)))


def _random() -> None:
    import jax

    def key(seed: int):
        return lambda rng: (np.array([0, seed], np.uint32),)

    add("random", "bits", lambda k: jax.random.bits(k, (4, 5)), key(1), "uint32-4x5")
    add("random", "uniform", lambda k: jax.random.uniform(k, (4, 5)), key(2), "float32-4x5")
    add("random", "uniform", lambda k: jax.random.uniform(k, (3,), dtype=np.float64), key(3),
        "float64-3")
    add("random", "normal", lambda k: jax.random.normal(k, (6,)), key(4), "float32-6")
    add("random", "randint", lambda k: jax.random.randint(k, (8,), 0, 100), key(5), "int32-8")
    add("random", "permutation", lambda k: jax.random.permutation(k, 10), key(6), "int32-10")
    add("random", "split", lambda k: jax.random.split(k, 3), key(7), "uint32-2")
    add("random", "fold_in", lambda k: jax.random.fold_in(k, 42), key(8), "uint32-2")


def _shapes() -> None:
    import jax.numpy as jnp
    from jax import lax

    for d in ALL:
        add("shape", "transpose", lambda x: x.T, arguments(((3, 5), d)), tag(d, (3, 5)))
        add("shape", "concatenate", lambda x, y: jnp.concatenate([x, y, x], axis=1),
            arguments(((2, 3), d), ((2, 2), d)), tag(d, (2, 3)))
    for d in (F32, np.dtype(np.int8), BOOL, np.dtype(ml_dtypes.bfloat16)):
        add("shape", "pad", lambda x: jnp.pad(x, ((1, 2), (0, 3))), arguments(((3, 2), d)),
            tag(d, (3, 2)))
    add("shape", "pad_negative_interior",
        lambda x: lax.pad(x, np.float32(-1), ((-1, 2, 1), (1, -1, 2))), arguments(((4, 3), F32)),
        tag(F32, (4, 3)))
    for d in (F32, np.dtype(np.uint64)):
        add("shape", "reshape", lambda x: x.reshape(4, 3, 2)[:, None], arguments(((6, 4), d)),
            tag(d, (6, 4)))
    add("shape", "strided_slice", lambda x: x[1::2, ::-3], arguments(((7, 8), I32)),
        tag(I32, (7, 8)))
    add("shape", "flip", lambda x: jnp.flip(x, axis=(0, 1)), arguments(((3, 4), np.float16)),
        tag(np.float16, (3, 4)))
    add("shape", "broadcast", lambda x: jnp.broadcast_to(x[:, None], (3, 4, 2)),
        arguments(((3, 2), F64)), tag(F64, (3, 2)))
    for d in (I32, F32):
        add("shape", "iota", lambda x, d=d: jnp.arange(12, dtype=d).reshape(3, 4) + x,
            arguments(((), d)), tag(d, (3, 4)))


def _structure() -> None:
    import jax
    import jax.numpy as jnp

    add("structure", "multiple_outputs",
        lambda x, y: (x + 1, (y * 2).astype(jnp.int16), jnp.sum(x)),
        arguments(((3, 2), F32), ((4,), I32)), tag(F32, (3, 2)))
    add("structure", "pytree_in_out",
        lambda tree: {"a": tree["x"] @ tree["w"], "b": [tree["x"].T, tree["n"] + 1]},
        lambda rng: ({"x": sample(rng, (2, 3), F32, "small_int"),
                      "w": sample(rng, (3, 2), F32, "small_int"), "n": np.int64(5)},),
        tag(F32, (2, 3)))
    for d in (F32, I32):
        add("structure", "donation", lambda x: x * 2 + 1, arguments(((5, 4), d)), tag(d, (5, 4)),
            donate=True, jit_kwargs={"donate_argnums": 0})
    for d in (F32, F64):
        def loss(w, x):
            return jnp.sum(jnp.tanh(x @ w) ** 2)

        add("autodiff", "jit_grad", jax.jit(jax.grad(loss)),
            arguments(((3, 2), d, "unit"), ((4, 3), d, "unit")), tag(d, (3, 2)), prejitted=True)
    add("autodiff", "jit_value_and_grad",
        jax.jit(jax.value_and_grad(lambda w, x: jnp.mean(jax.nn.relu(x @ w) - 0.5 * w.sum()))),
        arguments(((4, 3), F32, "unit"), ((5, 4), F32, "unit")), tag(F32, (4, 3)), prejitted=True)
    add("autodiff", "jit_vmap", jax.jit(jax.vmap(lambda m, v: m @ v)),
        arguments(((3, 4, 5), F32, "small_int"), ((3, 5), F32, "small_int")),
        tag(F32, (3, 4, 5)), prejitted=True)
    add("autodiff", "jit_vmap_grad",
        jax.jit(jax.vmap(jax.grad(lambda w, x: jnp.sum(jnp.sin(w * x))), in_axes=(None, 0))),
        arguments(((3,), F32, "unit"), ((4, 3), F32, "unit")), tag(F32, (3,)), prejitted=True)
    add("autodiff", "jacfwd", jax.jit(jax.jacfwd(lambda x: jnp.exp(x) * x[::-1])),
        arguments(((4,), F64, "unit")), tag(F64, (4,)), prejitted=True)


def _host_layouts_and_sizes() -> None:
    import jax.numpy as jnp

    noncontiguous = [
        ("transposed", lambda rng: (sample(rng, (4, 6), F32).T,), F32, (6, 4)),
        ("strided", lambda rng: (sample(rng, (8, 6), I32)[::2, 1::2],), I32, (4, 3)),
        ("negative_stride", lambda rng: (sample(rng, (5, 3), F64)[::-1],), F64, (5, 3)),
        ("fortran_order", lambda rng: (np.asfortranarray(
            sample(rng, (3, 4), ml_dtypes.bfloat16)),), np.dtype(ml_dtypes.bfloat16), (3, 4)),
        ("broadcast_view", lambda rng: (np.broadcast_to(sample(rng, (1, 5), np.int16), (3, 5)),),
         np.dtype(np.int16), (3, 5)),
    ]
    for name, make, d, shape in noncontiguous:
        add("host_input", name, lambda x: x * 2 + x[:1], make, tag(d, shape))
    sizes = [
        ("add", lambda x, y: x + y, arguments(((0,), F32), ((0,), F32)), F32, (0,)),
        ("sum", lambda x: jnp.sum(x, axis=1), arguments(((3, 0), I32)), I32, (3, 0)),
        ("concat_empty", lambda x, y: jnp.concatenate([x, y]),
         arguments(((0, 2), F64), ((3, 2), F64)), F64, (0, 2)),
        ("add", lambda x, y: x + y, arguments(((), F32), ((), F32)), F32, ()),
        ("multiply", lambda x, y: x * y, arguments(((), np.int64), ((), np.int64)), np.int64, ()),
        ("where", lambda c, x: jnp.where(c, x, -x), arguments(((), BOOL), ((), np.float16)),
         np.float16, ()),
        ("add", lambda x, y: x + y, arguments(((1_000_000,), F32), ((1_000_000,), F32)), F32,
         (1_000_000,)),
        ("sum", jnp.sum, arguments(((1000, 1000), F32, "small_int")), F32, (1000, 1000)),
        ("sort", jnp.sort, arguments(((1_000_000,), I32)), I32, (1_000_000,)),
    ]
    for name, fn, make, d, shape in sizes:
        add("size", name, fn, make, tag(d, shape))


BUILDERS = (_elementwise, _compare_select, _convert, _reductions, _dot, _convolution, _pooling,
            _indexing, _sorting, _cumulative, _control_flow, _random, _shapes, _structure,
            _host_layouts_and_sizes)
