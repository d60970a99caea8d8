"""``stablehlo.fft`` expanded into real arithmetic (``pjrtkit.expansions.fft``): real JAX
programs (``jnp.fft.*``), expanded, run with the reference rules (which have no fft rule) and
compared with XLA's CPU backend; every kind, rank 1 to 3, float32/float64, and lengths that
take each path (dense, mixed radix, Bluestein)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.errors import InvalidArgument
from pjrtkit import expansions
from pjrtkit.expansions.fft import DENSE_MAX, expand_fft
from pjrtkit.stablehlo.ir import Op, TensorType, Value, walk_ops
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from expansion_support import primitives, run_expanded, seeded_normal

# Ops an expanded fft may contain: what every backend's primitive set has.
PRIMITIVE_OPS = {"stablehlo.real", "stablehlo.imag", "stablehlo.complex", "stablehlo.reshape",
                 "stablehlo.concatenate", "stablehlo.slice", "stablehlo.transpose",
                 "stablehlo.dot_general", "stablehlo.constant", "stablehlo.broadcast_in_dim",
                 "stablehlo.multiply", "stablehlo.add"}



def _agrees(name, fn, x):
    """``fn`` through the expansions for the reference rules' primitive set (no fft), against
    XLA's CPU backend."""
    with jax.enable_x64(True):
        program, ours = run_expanded(fn, (x,), primitives())
        reference = run_on_xla_cpu(fn, (x,))
    assert "stablehlo.fft" not in {op.name for op in walk_ops(program)}
    assert len(ours) == len(reference)
    # An output element is a sum of n terms of mixed sign: one that cancels to near zero keeps
    # the absolute rounding of the large ones (jaxlib 0.12's DUCC and ours differ by 5e-6 on an
    # element of 0.16 in a length-1000 rfft whose largest is 89: 6e-8 of the scale).
    for i, (a, r) in enumerate(zip(ours, reference)):
        assert_close(a, r, what=f"{name} output {i}", to_scale=True)


# 1, 5, 16: dense; 18, 64, 1000: mixed radix; 17, 37, 289 = 17^2: Bluestein; 34: mixed radix
# over a Bluestein transform.
LENGTHS = (1, 5, 16, 17, 18, 34, 37, 64, 289, 1000)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_transforms_of_one_axis(n, dtype):
    x = seeded_normal(f"fft{n}{dtype}", (3, n), dtype)
    _agrees("fft", jnp.fft.fft, x)
    _agrees("ifft", jnp.fft.ifft, x)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_transforms_of_one_axis(n, dtype):
    _agrees("rfft", jnp.fft.rfft, seeded_normal(f"rfft{n}{dtype}", (2, n), dtype))
    spectrum = seeded_normal(f"irfft{n}{dtype}", (2, n // 2 + 1), np.result_type(dtype, np.complex64))
    _agrees("irfft", lambda x: jnp.fft.irfft(x, n=n), spectrum)


@pytest.mark.parametrize("name, fn, shape, dtype", [
    ("fft2", jnp.fft.fft2, (2, 4, 6), np.complex64),
    ("fftn", jnp.fft.fftn, (2, 5, 20, 7), np.complex128),
    ("ifftn", jnp.fft.ifftn, (3, 17, 6), np.complex64),
    ("fftn_axes", lambda x: jnp.fft.fftn(x, axes=(0, 2)), (4, 3, 5), np.complex64),
    ("rfftn", jnp.fft.rfftn, (2, 5, 20, 7), np.float32),
    ("rfft2", jnp.fft.rfft2, (3, 17, 10), np.float64),
    ("irfftn", lambda x: jnp.fft.irfftn(x, s=(5, 20, 12)), (2, 5, 20, 7), np.complex64),
    ("irfft2_odd", lambda x: jnp.fft.irfft2(x, s=(6, 19)), (6, 10), np.complex128),
])
def test_transforms_of_two_and_three_axes(name, fn, shape, dtype):
    _agrees(name, fn, seeded_normal(name, shape, dtype))


def test_empty_batch():
    _agrees("fft_empty", jnp.fft.fft, np.zeros((0, 8), np.complex64))


def _expanded_ops(fn, x):
    with jax.enable_x64(True):
        program = expansions.expand(lower_program(fn, x), primitives())
    return list(walk_ops(program))


@pytest.mark.parametrize("n", [16, 1000, 1009])
def test_expansion_is_primitive_ops_and_no_dense_matrix_past_16(n):
    """Only primitive ops; past 16 no constant grows like n^2 (the transform is O(n log n):
    the constants are the small DFT matrices, twiddles and one chirp spectrum, all O(n))."""
    ops = _expanded_ops(jnp.fft.fft, np.zeros((n,), np.complex64))
    names = {op.name for op in ops} - {"func.return", "func.call", "stablehlo.bitcast_convert"}
    assert names <= PRIMITIVE_OPS, names - PRIMITIVE_OPS
    largest = max(op.attributes["value"].size for op in ops if op.name == "stablehlo.constant")
    assert largest <= max(4 * DENSE_MAX ** 2, 8 * n + 64)
    dots = sum(op.name == "stablehlo.dot_general" for op in ops)
    assert dots <= (1 if n <= DENSE_MAX else 4 * int(np.ceil(np.log2(n))))


def test_mismatched_types_are_invalid_argument():
    x = Value(1, TensorType((4, 8), np.dtype(np.complex64)))
    y = Value(2, TensorType((4, 8), np.dtype(np.complex64)))
    op = Op("stablehlo.fft", (x,), (y,), {"fft_type": "RFFT", "fft_length": (8,)})
    with pytest.raises(InvalidArgument, match="RFFT"):
        expand_fft(op, None)
