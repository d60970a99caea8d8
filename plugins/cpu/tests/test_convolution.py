"""stablehlo.convolution against XLA's CPU backend: layouts, strides, padding, dilations,
feature and batch groups, and the transposed/batch-grouped forms jax.grad produces."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]

# (lhs shape NC..., rhs shape OI..., strides, padding, lhs_dilation, rhs_dilation, groups)
CASES = [
    ((2, 3, 9), (4, 3, 3), (1,), "VALID", None, None, 1),
    ((2, 4, 8, 7), (6, 2, 3, 2), (2, 1), "SAME", None, None, 2),
    ((1, 3, 7, 6), (2, 3, 3, 3), (1, 2), ((2, -1), (0, 3)), (1, 2), (2, 1), 1),
    ((2, 2, 5, 4, 6), (3, 2, 2, 3, 2), (1, 2, 1), "SAME", None, (1, 1, 2), 1),
    ((3, 4, 6, 6), (4, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), None, None, 4),  # depthwise
    ((2, 3, 5), (2, 3, 1), (3,), ((0, 0),), (2,), None, 1),
    ((2, 3, 0), (2, 3, 1), (1,), "VALID", None, None, 1),  # zero-size spatial
]


def conv(lhs, rhs, strides, padding, lhs_dil, rhs_dil, groups, layout):
    return lax.conv_general_dilated(lhs, rhs, strides, padding, lhs_dil, rhs_dil,
                                    dimension_numbers=layout, feature_group_count=groups)


def inputs(rng, case, dtype, layout):
    lhs_shape, rhs_shape = case[0], case[1]
    lhs = rng.normal(size=lhs_shape).astype(dtype)
    rhs = rng.normal(size=rhs_shape).astype(dtype)
    k = len(lhs_shape) - 2
    if layout == "channels_last":
        lhs = np.moveaxis(lhs, 1, -1).copy()
        rhs = np.moveaxis(rhs, (0, 1), (-1, -2)).copy()
        spatial = "DHW"[-k:] if k <= 3 else None
        return lhs, rhs, (f"N{spatial}C", f"{spatial}IO", f"N{spatial}C")
    spatial = "DHW"[-k:]
    return lhs, rhs, (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_conv_general_dilated(check, rng, dtype, layout):
    args, fns = [], []
    for case in CASES:
        lhs, rhs, dn = inputs(rng, case, dtype, layout)
        args += [lhs, rhs]
        fns.append((case, dn))

    def fn(*args):
        return [conv(args[2 * i], args[2 * i + 1], *case[2:], dn)
                for i, (case, dn) in enumerate(fns)]

    # bf16/f16 products are exact in f32, but XLA and BLAS sum in different orders, and the
    # rounded result can land one half-precision ulp apart on sums of up to 54 terms.
    check(fn, *args, loosen=2.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16],
                         ids=lambda d: np.dtype(d).name)
def test_conv_gradients(check, rng, dtype):
    # jax.grad turns a conv into an lhs-dilated (transposed) conv for the input gradient and a
    # batch-grouped conv (for grouped convs) for the weight gradient.
    fns, args = [], []
    for case in CASES[:5]:
        lhs, rhs, dn = inputs(rng, case, dtype, "channels_last")

        def loss(lhs, rhs, case=case, dn=dn):
            y = conv(lhs, rhs, *case[2:], dn)
            return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=y.dtype).reshape(y.shape)))

        fns.append(jax.grad(loss, argnums=(0, 1)))
        args += [lhs, rhs]

    check(lambda *a: [f(a[2 * i], a[2 * i + 1]) for i, f in enumerate(fns)], *args, loosen=2.0)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_integer_conv(check, rng, dtype):
    lhs = rng.integers(-3, 4, size=(2, 3, 6, 5)).astype(dtype)
    rhs = rng.integers(-3, 4, size=(4, 3, 2, 2)).astype(dtype)
    check(lambda a, b: [conv(a, b, (1, 1), "SAME", None, None, 1, ("NCHW", "OIHW", "NCHW")),
                        lax.conv_general_dilated(a, b, (2, 1), "VALID",
                                                 preferred_element_type=np.int64)], lhs, rhs)



# NHWC convs big enough to need several patch chunks: (lhs, rhs, strides, padding, rhs_dilation)
CHUNKED = [
    ((5, 11, 9, 3), (3, 3, 3, 4), (1, 1), "SAME", (1, 1)),
    ((3, 12, 10, 2), (2, 3, 2, 5), (2, 1), ((1, 2), (0, 1)), (2, 1)),
    ((4, 10, 6), (4, 6, 3), (1,), "VALID", (1,)),  # no padding: windows read in place
]


@pytest.mark.parametrize("chunk_bytes", [1, 2000, 25000],
                         ids=["line_by_line", "lines", "images"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_patches_in_chunks(check, rng, monkeypatch, chunk_bytes, dtype):
    # The patch matrix is built piece by piece in a reused buffer; pieces of one line, of a
    # few lines (the last one shorter) and of several images (the last group smaller) must
    # land at the right rows. float16 also casts while copying.
    from pjrtkit.reference import convolution
    monkeypatch.setattr(convolution, "CHUNK_BYTES", chunk_bytes)
    args, dims = [], []
    for lhs_shape, rhs_shape, strides, padding, rhs_dil in CHUNKED:
        args += [rng.normal(size=lhs_shape).astype(dtype), rng.normal(size=rhs_shape).astype(dtype)]
        spatial = "DHW"[-(len(lhs_shape) - 2):]
        dims.append((strides, padding, rhs_dil, (f"N{spatial}C", f"{spatial}IO", f"N{spatial}C")))

    def fn(*a):
        return [lax.conv_general_dilated(a[2 * i], a[2 * i + 1], s, p, None, d,
                                         dimension_numbers=dn)
                for i, (s, p, d, dn) in enumerate(dims)]

    check(fn, *args, loosen=2.0)


@pytest.mark.parametrize("keep_bytes", [64 << 20, 0], ids=["kept", "per_call"])
def test_reused_buffers_never_leak_between_calls_or_threads(registry, rng, monkeypatch,
                                                            keep_bytes):
    # One plan called again and again, also from several threads at once: every result must
    # match XLA for its own input, and results already returned must not change afterwards
    # (the kernel's padded-input and patch buffers are reused, its outputs never are).
    from concurrent.futures import ThreadPoolExecutor

    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
    from pjrtkit.testing.tolerances import assert_close
    from pjrtkit.reference import conv_scratch, convolution

    monkeypatch.setattr(convolution, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(conv_scratch, "KEEP_BYTES", keep_bytes)

    def fn(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=(
            "NHWC", "HWIO", "NHWC"))

    k = rng.normal(size=(3, 3, 4, 6)).astype(np.float32)
    xs = [rng.normal(size=(3, 9, 8, 4)).astype(np.float32) for _ in range(12)]
    plan = build_plan(lower_program(fn, xs[0], k), registry)
    expected = [run_on_xla_cpu(fn, (x, k))[0] for x in xs]

    sequential = [plan(x, k)[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(lambda x: plan(x, k)[0], xs * 4))
    # loosen=2.0 as in the convolution checks above: each output sums 36 products, and where
    # they cancel (an output of 1e-2 from terms of about 1) BLAS's and XLA's summation orders
    # differ by ~1.3e-6 absolute, just over float32's atol (a leaked buffer is off by O(1)).
    for i, got in enumerate(sequential + concurrent):
        assert_close(np.asarray(got), expected[i % len(xs)], what=f"call {i}", loosen=2.0)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_complex_convolution_and_its_gradient(check, rng, dtype):
    # Complex convolutions contract in the operands' precision, like complex dot_general;
    # the gradient adds the transposed and batch-grouped forms.
    args, fns = [], []
    for case in CASES:
        lhs, rhs, dn = inputs(rng, case, np.float64, "channels_first")
        args += [(lhs + 1j * rng.normal(size=lhs.shape)).astype(dtype),
                 (rhs + 1j * rng.normal(size=rhs.shape)).astype(dtype)]
        fns.append((case, dn))

    def fn(*args):
        out = [conv(args[2 * i], args[2 * i + 1], *case[2:], dn)
               for i, (case, dn) in enumerate(fns)]
        case, dn = fns[1]
        out += jax.grad(lambda a, b: jnp.real(jnp.sum(conv(a, b, *case[2:], dn))),
                        argnums=(0, 1))(args[2], args[3])
        return out

    check(fn, *args, loosen=2.0)
