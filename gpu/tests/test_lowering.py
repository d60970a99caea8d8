"""The GPU lowering's kernels, on real JAX programs, against XLA's CPU backend (emulated)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from pjrtkit.errors import Unimplemented

from gpu_support import gpu_plan, rng_for, sample

F32, BF16 = np.float32, ml_dtypes.bfloat16


UNARY = {
    "neg": jnp.negative, "abs": jnp.abs, "exp": jnp.exp, "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid, "sign": jnp.sign, "floor": jnp.floor,
    "log1p_abs": lambda x: jnp.log1p(jnp.abs(x)), "expm1": jnp.expm1,
    "sqrt_abs": lambda x: jnp.sqrt(jnp.abs(x)), "rsqrt_abs": lambda x: jax.lax.rsqrt(jnp.abs(x) + 1),
    "sin": jnp.sin, "cos": jnp.cos, "log_abs": lambda x: jnp.log(jnp.abs(x) + 0.5),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64])
def test_unary_float(agrees_with_xla, dtype):
    # One program computing every op (fused into one kernel), one output per op.
    agrees_with_xla(lambda x: tuple(UNARY[name](x) for name in sorted(UNARY)),
                    sample(f"unary{np.dtype(dtype).name}", (5, 7), dtype))


BINARY = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum,
          "min": jnp.minimum, "div": jax.lax.div, "rem": jax.lax.rem}


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int32, np.uint8, np.uint32,
                                   np.int64, np.float16])
def test_binary(agrees_with_xla, dtype):
    name = np.dtype(dtype).name
    x, y = sample(name, (4, 9), dtype), sample(name + "y", (4, 9), dtype)
    if np.dtype(dtype).kind in "iu":
        y[0, :3] = 0  # XLA's division by zero
        if np.dtype(dtype).kind == "i":
            x[1, 0], y[1, 0] = np.iinfo(dtype).min, -1  # and its overflow
    agrees_with_xla(lambda a, b: tuple(BINARY[op](a, b) for op in sorted(BINARY)), x, y)


def test_nan_propagating_max_and_saturating_convert(agrees_with_xla):
    x = np.array([1.0, np.nan, -np.inf, 3e9, -3e9, np.inf, 0.5, -0.5], F32)
    y = np.array([np.nan, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], F32)
    agrees_with_xla(lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), a.astype(jnp.int32),
                                  a.astype(jnp.uint8), a.astype(jnp.int8)), x, y)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32, np.int64])
def test_shifts_past_the_width(agrees_with_xla, dtype):
    x = sample("shift", (3, 12), dtype)
    bits = np.dtype(dtype).itemsize * 8
    y = np.resize(np.array([0, 1, 3, bits - 1, bits, bits + 5], dtype), (3, 12))
    agrees_with_xla(lambda a, b: (jax.lax.shift_left(a, b), jax.lax.shift_right_logical(a, b),
                                  jax.lax.shift_right_arithmetic(a, b)), x, y)


def test_compare_select_and_bool_ops(agrees_with_xla):
    x, y = sample("c", (6, 5), F32), sample("d", (6, 5), F32)
    agrees_with_xla(lambda a, b: (jnp.where(a < b, a, b * 2), (a >= b) & (a > 0), ~(a == b),
                                  jnp.clip(a, -1.0, 1.0)), x, y)


AXES = [(0,), (1,), (0, 2), None]


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16, np.int32, np.uint8, np.bool_])
def test_reductions(agrees_with_xla, dtype):
    x = sample(f"r{np.dtype(dtype).name}", (3, 5, 4), dtype)
    if np.dtype(dtype) == np.bool_:
        agrees_with_xla(lambda a: tuple(f(a, axis=axes) for axes in AXES
                                        for f in (jnp.any, jnp.all)), x)
    else:
        agrees_with_xla(lambda a: tuple(f(a, axis=axes) for axes in AXES
                                        for f in (jnp.sum, jnp.max, jnp.min)), x)


def test_max_reduction_propagates_nan(agrees_with_xla):
    x = sample("nan", (4, 40), F32)
    x[1, 17] = np.nan
    agrees_with_xla(lambda a: jnp.max(a, axis=1), x)


@pytest.mark.parametrize("dtype,out", [(np.float32, None), (np.float16, None), (BF16, None),
                                       (BF16, np.float32), (np.float64, None),
                                       (np.int32, None), (np.int8, np.int32)])
def test_dot_general(agrees_with_xla, dtype, out):
    a, b = sample("a", (2, 37, 19), dtype), sample("b", (2, 19, 45), dtype)
    # Sums of 19 products of magnitude ~10 that cancel to ~0.1: the tile order of the sum
    # differs from XLA's (Eigen's blocking), which float32's atol of 1e-6 cannot absorb.
    agrees_with_xla(lambda x, y: jnp.einsum("bij,bjk->bik", x, y,
                                            preferred_element_type=out), a, b, loosen=8)


def test_dot_with_transposed_operands(agrees_with_xla):
    a, b = sample("ta", (33, 20), F32), sample("tb", (17, 33), F32)
    agrees_with_xla(lambda x, y: (x.T @ y.T, jnp.tensordot(x, y, axes=([0], [1]))), a, b,
                    loosen=8)  # summation order, as in test_dot_general


def test_structural_ops(agrees_with_xla):
    x = sample("s", (2, 3, 4, 5), F32)
    agrees_with_xla(lambda a: (jnp.transpose(a, (3, 1, 0, 2)), a[:, 1:, ::2, 1:4],
                               jnp.flip(a, (1, 3)), jnp.concatenate([a, a * 2], axis=2),
                               jnp.broadcast_to(a[:, :, :1, :], (2, 3, 4, 5)),
                               a.reshape(6, 20), jax.lax.pad(a, 0.5, [(1, 2, 0), (-1, 0, 1),
                                                                     (0, 0, 2), (2, -2, 0)]),
                               jnp.arange(10, dtype=jnp.int32), jax.lax.iota(jnp.float32, 7)),
                    x)


def test_dynamic_slices(agrees_with_xla):
    x = sample("ds", (6, 8), F32)
    agrees_with_xla(lambda a, i: (jax.lax.dynamic_slice(a, (i, i + 2), (3, 4)),
                                  jax.lax.dynamic_update_slice(a, jnp.ones((2, 3)), (i, 7))),
                    x, np.int32(4))


def test_while_loop_driven_from_the_host(agrees_with_xla):
    def loop(x):
        return jax.lax.fori_loop(0, 5, lambda i, c: c * 1.5 + i, x)

    agrees_with_xla(loop, sample("w", (3, 4), F32))


def test_mlp_training_step(agrees_with_xla):
    def loss(params, x, y):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        logits = h @ params["w2"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return value, jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w1": sample("w1", (8, 16), F32) * 0.1, "b1": np.zeros(16, F32),
              "w2": sample("w2", (16, 4), F32) * 0.1}
    x = sample("x", (6, 8), F32)
    y = np.eye(4, dtype=F32)[rng_for("y").integers(0, 4, 6)]
    agrees_with_xla(step, params, x, y)


def _unknown_custom_call(x):
    return jax.ffi.ffi_call("pjrtkit_no_such_target", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@pytest.mark.parametrize("fn,args,op,dtype", [
    # Complex values are rewritten onto float pairs, except where no rewrite exists: a custom
    # call the backend does not run.
    (_unknown_custom_call, (np.zeros(3, np.complex64),), "pjrtkit_no_such_target",
     "complex64"),
])
def test_what_is_missing_is_unimplemented_at_compile_naming_op_and_dtype(fn, args, op, dtype):
    with pytest.raises(Unimplemented) as info:
        gpu_plan(fn, *args)
    assert op in str(info.value) and dtype in str(info.value)


def test_gather_embedding_lookup_and_its_scatter_add_gradient(agrees_with_xla):
    table = sample("emb", (11, 6), F32)
    tokens = np.array([[1, 4, 4, 10], [0, 3, 12, -2]], np.int32)  # out of range: clamped
    agrees_with_xla(lambda t, i: (t[i], jax.grad(lambda t: jnp.sum(t[i] ** 2))(t)),
                    table, tokens)


def test_scatter_replace_and_out_of_bounds_windows(agrees_with_xla):
    x = sample("sc", (8, 3), F32)
    idx = np.array([1, 6, 9, -1], np.int32)
    agrees_with_xla(lambda a, i: (a.at[i].set(7.0, mode="drop"), a.at[i].add(1.0, mode="drop"),
                                  jnp.take(a, i, axis=0, mode="clip")), x, idx)


def test_scatter_and_gather_at_one_traced_index(agrees_with_xla):
    # one start index for every element (no batch dims), as LU's row swaps write
    x = sample("one", (4, 5), F32)
    row = sample("onerow", (5,), F32)
    agrees_with_xla(lambda a, r, i: (a.at[i].set(r), a.at[i, 2].add(1.0),
                                     jnp.take(a, i, axis=0), jnp.take(a, i, axis=1)),
                    x, row, np.int32(2))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_convolution_forward_and_both_gradients(agrees_with_xla, dtype):
    x, w = sample("cx", (2, 7, 6, 3), dtype), sample("cw", (3, 3, 3, 4), dtype)

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (2, 1), ((1, 1), (0, 2)),
                                            rhs_dilation=(1, 2),
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss(x, w):
        return jnp.sum(conv(x, w) ** 2)

    if np.dtype(dtype) == BF16:
        # bfloat16 gradients cancel sums of ~100s rounded to 8 bits at every op: XLA keeps
        # some intermediates wider, so only the forward pass is compared.
        agrees_with_xla(conv, x, w)
        return
    agrees_with_xla(lambda x, w: (conv(x, w), *jax.grad(loss, argnums=(0, 1))(x, w)), x, w,
                    loosen=8)  # summation order, as in test_dot_general


def test_pooling_and_its_gradient(agrees_with_xla):
    x = sample("pool", (2, 6, 5, 3), F32)

    def pools(a):
        window = (1, 2, 2, 1)
        avg = jax.lax.reduce_window(a, 0.0, jax.lax.add, window, (1, 2, 2, 1), "SAME") / 4
        top = jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, window, (1, 1, 1, 1), "VALID")
        return avg, top, jax.grad(lambda a: jnp.sum(jax.lax.reduce_window(
            a, 0.0, jax.lax.add, window, (1, 2, 2, 1), "SAME") ** 2))(a)

    agrees_with_xla(pools, x)


def test_random_numbers_threefry_and_dropout(agrees_with_xla):
    def draws(key):
        k1, k2 = jax.random.split(key)
        x = jax.random.normal(k1, (4, 5))
        keep = jax.random.bernoulli(k2, 0.7, (4, 5))
        return x, jnp.where(keep, x / 0.7, 0.0), jax.random.randint(k2, (6,), 0, 10)

    agrees_with_xla(draws, np.asarray(jax.random.PRNGKey(3)))


def test_dce_sink_computes_nothing_and_the_program_runs(agrees_with_xla):
    """``lax.dce_sink`` (a custom call with no results, JAX's lax_test uses it): the core's
    backend-neutral rule, registered by the GPU rules too."""
    import jax.numpy as jnp
    from jax import lax

    def f(x):
        lax.dce_sink(jnp.sin(x) + 1, prevent_mlir_dce=True)
        return x * 3

    agrees_with_xla(f, np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("out", [None, np.int32, np.float32])
def test_a_dot_of_booleans_runs_in_integers(agrees_with_xla, out):
    """XLA's dot on pred (an OR of ANDs; JAX's lax_test has it), and bool operands with a
    wider preferred result, through the core's bool_dot_as_integers."""
    from jax import lax

    rng = np.random.default_rng(3)
    a, b = rng.random((5, 7)) < 0.3, rng.random((7, 4)) < 0.3
    a[0] = False  # a row with no true product

    agrees_with_xla(lambda x, y: lax.dot(x, y, preferred_element_type=out), a, b)


def test_reduce_window_skips_padding_and_dilation_holes_with_any_init(agrees_with_xla):
    # A non-identity init is folded in once per window, never once per padded position.
    x = sample("rwpad", (5, 6), F32)
    agrees_with_xla(lambda a: (
        jax.lax.reduce_window(a, 1.5, jax.lax.add, (3, 2), (1, 1), [(1, 1), (0, 2)]),
        jax.lax.reduce_window(a, 2.0, jax.lax.mul, (2, 2), (1, 2), [(1, 0), (1, 1)],
                              base_dilation=(2, 1), window_dilation=(1, 2)),
        jax.lax.reduce_window(a, 0.25, jax.lax.max, (2, 3), (2, 1), [(2, 2), (1, 1)],
                              base_dilation=(1, 2))), x)


def test_reduce_window_with_a_body_of_several_ops_and_of_several_operands(agrees_with_xla):
    x, y = sample("rwx", (6, 7), F32), sample("rwy", (6, 7), F32)
    i = np.arange(42, dtype=np.int32).reshape(6, 7)

    def custom(a, b):  # not one op: the region is inlined into the window fold
        return jnp.maximum(a, b) + 0.5 * jnp.minimum(a, b)

    def argmax_pair(acc, new):  # (value, index) pairs: the larger value, the first index
        (va, ia), (vb, ib) = acc, new
        take = (vb > va) | ((vb == va) & (ib < ia))
        return jnp.where(take, vb, va), jnp.where(take, ib, ia)

    agrees_with_xla(lambda a, b, i: (
        jax.lax.reduce_window(a, 0.0, custom, (2, 3), (1, 2), [(1, 0), (1, 1)]),
        jax.lax.reduce_window((a, i), (-jnp.inf, np.int32(0)), argmax_pair, (3, 2), (1, 1),
                              "SAME"),
        jax.lax.reduce_window((a, b), (0.0, 1.0), lambda p, q: (p[0] + q[0], p[1] * q[1]),
                              (2, 2), (2, 2), "VALID")), x, y, i)


@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16, F32])
def test_scatter_combiners_without_an_atomic_fold_the_updates_in_order(agrees_with_xla, dtype):
    # Duplicate and out-of-range indices; 16-bit adds round after every update, as on XLA's
    # CPU backend, and float max/min keep NaN.
    x = sample("ordx", (7, 3), F32).astype(dtype)
    x[2, 1] = np.nan
    upd = sample("ordu", (6, 3), F32).astype(dtype)
    upd[4, 0] = np.nan
    idx = np.array([1, 5, 1, 9, 1, -3], np.int32)
    agrees_with_xla(lambda a, i, u: (
        a.at[i].add(u, mode="drop"), a.at[i].max(u, mode="drop"), a.at[i].min(u, mode="drop"),
        a.at[i].mul(u, mode="drop"), a.at[i].apply(jnp.sin, mode="drop"),
        a.at[i, 1:].add(u[:, :2] * 3, mode="drop")), x, idx, upd)


def test_arrays_of_rank_over_six_move_and_reduce(agrees_with_xla):
    # Third derivatives of a 2x2 function (rank 7, JAX's testIssue1383): the strided copy
    # coalesces what it can and loops over leading dimensions past rank 6.
    x = sample("rank8", (2, 3, 2, 2, 3, 2, 2, 2), F32)
    agrees_with_xla(lambda a: (
        jnp.transpose(a, (7, 1, 0, 3, 2, 5, 4, 6)), a[:, ::-1, 1:, :, ::2][..., ::-1] * 2,
        jnp.sum(jnp.transpose(a, (2, 0, 4, 1, 3, 6, 5, 7)), axis=(1, 3, 6)),
        jnp.pad(a, [(0, 1), (1, 0), (0, 0), (1, 1), (0, 0), (0, 0), (2, 0), (0, 1)]),
        jnp.broadcast_to(a[:, :, None], (2, 3, 2, 2, 2, 3, 2, 2, 2))), x)


def test_an_expanded_op_reading_one_value_twice(agrees_with_xla):
    # x @ x on booleans: the expansion's region takes the repeated operand once
    # (JAX's testMatrixPowerBool)
    mat = np.array([[True, True], [False, True]])
    agrees_with_xla(lambda m: (jnp.linalg.matrix_power(m, 2), m @ m, jnp.dot(m, m.T)), mat)


def test_a_complex_scatter_add_whose_region_was_fused_runs_ordered(agrees_with_xla):
    # After the complex expansion the scatter has two operands (real, imaginary parts); the
    # fusion pass groups its region's two adds into one op, which no longer reads as one
    # combiner per operand: the ordered scatter folds both (JAX's eig and lu gradients).
    x = (sample("csx", (4, 4), F32) + 1j * sample("csy", (4, 4), F32)).astype(np.complex64)
    u = (sample("csu", (5,), F32) - 2j).astype(np.complex64)
    rows, cols = np.array([0, 2, 1, 2, 3], np.int32), np.array([1, 3, 1, 3, 0], np.int32)
    agrees_with_xla(lambda x, u: (x.at[rows, cols].add(u), x.at[rows, cols].multiply(u)), x, u)


def test_complex_composites_run_their_decomposition_on_pairs_of_reals(agrees_with_xla):
    # jnp.arcsin & co. of complex numbers are stablehlo.composite ops in JAX's programs: the
    # complex expansion calls their decomposition, rewritten onto real pairs like any function
    x = (np.linspace(-2, 2, 6)[:, None] + 1j * np.linspace(-1.5, 1.5, 5)[None, :]).astype(
        np.complex64)
    agrees_with_xla(lambda z: (jnp.arccos(z), jnp.arcsinh(z), jnp.arctanh(z), jnp.cosh(z)), x)
