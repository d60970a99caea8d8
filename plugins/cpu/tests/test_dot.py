"""dot_general / dot against XLA's CPU backend: dimension numbers, dtypes, mixed precision."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from pjrtkit.errors import Unimplemented

from dtype_sample import sampled

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def ids(dtypes):
    return [np.dtype(d).name for d in dtypes]


def sample(rng, shape, dtype):
    """Full-range integers (to exercise wraparound); small-integer floats, so every product and
    partial sum is exact and results are bit-comparable whatever the summation order."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if dtype.kind == "c":
        return (rng.integers(-4, 5, shape) + 1j * rng.integers(-4, 5, shape)).astype(dtype)
    return rng.integers(-4, 5, shape).astype(dtype)


# (lhs shape, rhs shape, ((lhs contracting, rhs contracting), (lhs batch, rhs batch)))
DOTS = [
    ((3, 4), (4, 5), (((1,), (0,)), ((), ()))),                   # matmul
    ((4,), (4,), (((0,), (0,)), ((), ()))),                       # inner product
    ((3, 4), (4,), (((1,), (0,)), ((), ()))),                     # matrix-vector
    ((3,), (5,), (((), ()), ((), ()))),                           # outer product
    ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),         # batched matmul
    ((4, 2, 3), (4, 3, 5, 2), (((0,), (0,)), ((1, 2), (3, 1)))),  # batch dims anywhere
    ((3, 4, 5), (5, 6, 4), (((1, 2), (2, 0)), ((), ()))),         # two contracting dims
    ((3, 0), (0, 5), (((1,), (0,)), ((), ()))),                   # empty contraction -> zeros
    ((0, 4), (4, 5), (((1,), (0,)), ((), ()))),                   # empty result
    ((2, 3, 7), (7, 2, 1), (((2,), (0,)), ((0,), (1,)))),
]


# dtype_sample's dtypes in make test, the others in make test-long
@pytest.mark.parametrize("dtype", sampled(DTYPES), ids=ids(DTYPES))
def test_dot_general(check, rng, dtype):
    operands = [(sample(rng, a, dtype), sample(rng, b, dtype)) for a, b, _ in DOTS]
    check(lambda ops: tuple(lax.dot_general(x, y, dims)
                            for (x, y), (_, _, dims) in zip(ops, DOTS)), operands)


def test_float_rounds_once_on_long_contractions(check, rng):
    # Sums of 64 terms exceed f16/bf16 precision: the result must be the exact sum rounded
    # once, not a running sum rounded per step.
    for dtype in (np.float16, ml_dtypes.bfloat16):
        x, y = sample(rng, (5, 64), dtype), sample(rng, (64, 3), dtype)
        check(jnp.matmul, x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_float_values(check, rng, dtype):
    x = rng.standard_normal((17, 33)).astype(dtype)
    y = rng.standard_normal((2, 33, 9)).astype(dtype)
    # Non-integer values: results differ from XLA only by summation order; with 33 terms of
    # magnitude ~1 that is a few ulps of the term size, hence the looser absolute bound.
    check(lambda x, y: jnp.einsum("mk,bkn->bmn", x, y), x, y, loosen=20)


@pytest.mark.parametrize("lhs,rhs,out", [
    (np.int8, np.int8, np.int32), (np.uint8, np.uint8, np.int32), (np.int16, np.int16, np.int64),
    (np.int32, np.int32, np.int64), (np.uint32, np.uint32, np.uint64), (np.int8, np.int8, np.int8),
    (ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32), (np.float16, np.float16, np.float32),
    (np.float32, np.float32, np.float64), (np.bool_, np.bool_, np.int32),
])
def test_preferred_element_type(check, rng, lhs, rhs, out):
    x, y = sample(rng, (4, 6), lhs), sample(rng, (6, 3), rhs)
    check(lambda x, y: lax.dot(x, y, preferred_element_type=out), x, y)


def test_integer_wraparound_in_result_type(check, rng):
    # Products near the top of int64/uint64 overflow: XLA wraps modulo 2**64.
    for dtype in (np.int64, np.uint64, np.int32):
        info = np.iinfo(dtype)
        x = rng.integers(info.max // 4, info.max, (3, 40), dtype=dtype, endpoint=True)
        y = rng.integers(info.max // 4, info.max, (40, 2), dtype=dtype, endpoint=True)
        check(jnp.matmul, x, y)


def test_dot_in_larger_program(check, rng):
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    check(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, x, w1, w2, loosen=20)


def test_default_equivalent_algorithm_is_accepted(check, rng):
    x, y = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5), (5, 2)))
    check(lambda x, y: lax.dot(x, y, precision=lax.DotAlgorithmPreset.F32_F32_F32), x, y,
          loosen=20)


# The presets XLA's CPU backend runs on float operands, and how (see reference/dot.py):
# BF16_BF16_F32 and its splits as float32 contractions, F64_F64_F64 in float64.
XLA_CPU_PRESETS = ["BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "F32_F32_F32",
                   "F64_F64_F64"]
OPERANDS = [(np.float32, np.float32), (np.float32, ml_dtypes.bfloat16),
            (ml_dtypes.bfloat16, ml_dtypes.bfloat16)]


@pytest.mark.parametrize("operands", OPERANDS, ids=lambda p: "x".join(ids(p)))
@pytest.mark.parametrize("preset", XLA_CPU_PRESETS)
def test_algorithms_xla_cpu_runs(check, rng, preset, operands):
    # Normal values, not small integers: rounding an operand to bfloat16 (what the preset's
    # name suggests, and what XLA's CPU backend does not do) shows at 1e-3, far past the
    # float32 tolerance.
    (lt, rt) = operands
    x = rng.standard_normal((2, 7, 33)).astype(lt)
    y = rng.standard_normal((2, 33, 5)).astype(rt)
    algorithm = getattr(lax.DotAlgorithmPreset, preset)
    check(lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))), precision=algorithm,
                                       preferred_element_type=np.float32), x, y, loosen=20)


def test_attention_with_its_bf16_algorithm_matches_xla(check, rng):
    # jax.nn.dot_product_attention's XLA path contracts float32 x bfloat16 with BF16_BF16_F32
    # (what JAX's nn_test.py runs).
    import jax
    q, k, v = (rng.standard_normal((2, 16, 2, 8)).astype(ml_dtypes.bfloat16) for _ in "qkv")
    check(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla"), q, k, v,
          loosen=4)


def test_f16_algorithm_is_the_default_float16_dot(check, rng):
    # F16_F16_F16: JAX casts the operands to float16; XLA's CPU backend computes the float16 dot
    # as it computes the default one (in float32, rounded once).
    x, y = (rng.standard_normal(s).astype(np.float32) for s in ((16, 300), (300, 8)))
    check(lambda x, y: lax.dot(x, y, precision=lax.DotAlgorithmPreset.F16_F16_F16), x, y)


TF32_DOT = """
func.func public @main(%x: tensor<3x5xf32>, %y: tensor<5x2xf32>) -> tensor<3x2xf32> {
  %r = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0], algorithm = <lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, allow_imprecise_accumulation = false> : (tensor<3x5xf32>, tensor<5x2xf32>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}
"""


def test_other_algorithm_is_unimplemented(registry):
    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.stablehlo.loader import load_program

    # TF32_TF32_F32 (JAX refuses it on cpu before lowering, so the program is written out): a
    # compile-time refusal naming the algorithm and the dtypes.
    with pytest.raises(Unimplemented, match="dot algorithm .* on float32 x float32"):
        build_plan(load_program(TF32_DOT), registry)


COMPLEX = [np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", COMPLEX, ids=ids(COMPLEX))
def test_complex_dot_general(check, rng, dtype):
    # Small Gaussian integers: every product and partial sum is exact, so any summation order
    # gives XLA's bits, over every dimension-number form.
    operands = [(sample(rng, a, dtype), sample(rng, b, dtype)) for a, b, _ in DOTS]
    check(lambda ops: tuple(lax.dot_general(x, y, dims)
                            for (x, y), (_, _, dims) in zip(ops, DOTS)), operands)


@pytest.mark.parametrize("dtype", COMPLEX, ids=ids(COMPLEX))
def test_complex_values_and_precision(check, rng, dtype):
    # Non-integer values contract in the operands' precision (XLA's complex GEMM does not
    # widen complex64): differences are summation order only, a few ulps of the terms.
    def draw(shape):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    x, y, v = draw((17, 33)), draw((2, 33, 9)), draw((33,))
    check(lambda x, y, v: (jnp.einsum("mk,bkn->bmn", x, y), jnp.vdot(v, v),
                           jnp.matmul(x, y[0], precision="highest"),
                           x @ x.conj().T),
          x, y, v, loosen=20)


def test_complex_preferred_element_type_and_mixed_operands(check, rng):
    x, y = sample(rng, (4, 6), np.complex64), sample(rng, (6, 3), np.complex64)
    real = sample(rng, (4, 6), np.float32)
    check(lambda x, y, real: (lax.dot(x, y, preferred_element_type=np.complex128),
                              jnp.matmul(real, y)), x, y, real)


def test_complex_non_finite_values_propagate_like_xla(check):
    inf, nan = np.inf, np.nan
    x = np.array([[inf + 0j, 1j], [1, nan], [1 + 1j, 2]], np.complex64)
    y = np.array([[1 + 1j, 0], [0, 1j]], np.complex64)
    check(jnp.matmul, x, y)


NARROW = [ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3b11fnuz,
          ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e4m3,
          ml_dtypes.float8_e3m4, ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn]


@pytest.mark.parametrize("dtype", NARROW, ids=ids(NARROW))
def test_float8_and_float4_dot_bit_for_bit(rng, dtype):
    # XLA contracts in float32 and rounds once, through float16 for the types it computes in
    # float16. Every bit pattern (NaN, infinities, zeros, denormals), short and long
    # contractions, and a float32 result (the usual fp8 matmul).
    from pjrtkit.testing.programs import run_on_xla_cpu, run_with_registry
    from pjrtkit_cpu.lowering import RULES

    float4 = np.dtype(dtype) == np.dtype(ml_dtypes.float4_e2m1fn)

    def draw(shape):
        bits = rng.integers(0, 256, shape).astype(np.uint8)
        return (bits & 0x0F if float4 else bits).view(dtype)

    args = (draw((6, 8)), draw((8, 5)), draw((4, 300)), draw((300, 3)))

    def fn(a, b, c, d):
        out = (lax.dot(a, b), lax.dot(c, d))
        if float4:  # XLA's CPU backend refuses float4 operands with a float32 result
            return out
        return (*out, lax.dot(c, d, preferred_element_type=np.float32))

    ours = run_with_registry(fn, args, RULES)
    ref = run_on_xla_cpu(fn, args)
    for i, (x, y) in enumerate(zip(ours, ref)):
        assert x.dtype == y.dtype, (i, x.dtype, y.dtype)
        if i == 2:
            # A float32 sum of 300 products: its last bit depends on the summation order, which
            # XLA's dot emitter changes between versions (1 ulp apart on jax 0.12).
            np.testing.assert_allclose(x, y, rtol=4e-7, atol=0, err_msg=f"output {i}")
            continue
        np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32),
                                      err_msg=f"output {i}")


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4], ids=["int4", "uint4"])
def test_int4_dot_wraps_like_xla(check, rng, dtype):
    # Every value of the type; sums wrap to 4 bits, as XLA's int8 arithmetic narrowed back.
    info = ml_dtypes.iinfo(dtype)
    x, y = (rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)
            for shape in ((5, 7), (7, 3)))
    # (XLA's CPU backend refuses int4 operands with a wider result, so none is compared.)
    check(lambda x, y: lax.dot(x, y), x, y)


def test_complex_dot_inside_loops(check, rng):
    # Native while loops have no complex code: the loop must stay interpreted and still agree.
    a = sample(rng, (6, 6), np.complex64) / 4

    def fn(a):
        powers = lax.fori_loop(0, 4, lambda i, x: x @ a + jnp.conj(x) * 0.5,
                               jnp.eye(6, dtype=a.dtype))
        rows = lax.scan(lambda c, r: (c + r @ a, (r @ a).real), jnp.zeros(6, a.dtype), a)
        return powers, *rows

    check(fn, a, loosen=20)


def test_complex_dot_gradient(check, rng):
    x = sample(rng, (3, 3), np.complex128)
    check(lambda x: jax.grad(lambda a: jnp.real(jnp.sum(a @ a.conj().T)))(x), x)


PLAIN_DOT = """
func.func public @main(%m: tensor<3x4xi32>, %n: tensor<4x2xi32>, %v: tensor<4xi32>) -> (tensor<3x2xi32>, tensor<3xi32>, tensor<i32>) {
  %a = stablehlo.dot %m, %n : (tensor<3x4xi32>, tensor<4x2xi32>) -> tensor<3x2xi32>
  %b = stablehlo.dot %m, %v : (tensor<3x4xi32>, tensor<4xi32>) -> tensor<3xi32>
  %c = stablehlo.dot %v, %v : (tensor<4xi32>, tensor<4xi32>) -> tensor<i32>
  return %a, %b, %c : tensor<3x2xi32>, tensor<3xi32>, tensor<i32>
}
"""


def test_plain_dot(check_mlir, rng):
    # JAX emits only dot_general; older producers still emit stablehlo.dot.
    check_mlir(PLAIN_DOT, sample(rng, (3, 4), np.int32), sample(rng, (4, 2), np.int32),
               sample(rng, (4,), np.int32))


def test_integer_contraction_too_long_for_float64_limbs(check, rng):
    # 2**21 terms: past the exact float64 limb path, so the int64 fallback runs.
    x = sample(rng, (1, 2 ** 21), np.int32)
    y = sample(rng, (2 ** 21, 1), np.int32)
    check(jnp.matmul, x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_operands_that_are_views(check, rng, dtype):
    # Operands arrive as transposed, head-split and broadcast views (transpose, reshape and
    # broadcast_in_dim return views); the kernel hands BLAS what it can read in place and
    # copies the rest. Small-integer values keep every sum exact.
    B, T, H, D = 2, 5, 3, 4
    x = sample(rng, (B, T, H * D), dtype)
    w = sample(rng, (H * D, 7), dtype)
    g = sample(rng, (T, H * D), dtype)

    def fn(x, w, g):
        heads = x.reshape(B, T, H, D).transpose(0, 2, 1, 3)           # (B, H, T, D) view
        scores = heads @ heads.transpose(0, 1, 3, 2)                   # batched, both views
        mixed = scores @ heads                                         # (B, H, T, D)
        merged = mixed.transpose(0, 2, 1, 3).reshape(B, T, H * D)
        return (scores, mixed,
                merged @ w,                                            # copy of a merge
                g.T @ g,                                               # lhs transposed
                jnp.einsum("tk,bkn->btn", g, jnp.broadcast_to(w, (B, H * D, 7))),
                jnp.einsum("bki,bkj->bij", x, x[:, :, ::-1]))          # reversed columns
    check(fn, x, w, g)
