"""float8, float4_e2m1fn and int2/int4/uint2/uint4 onto wider types (``pjrtkit.expansions.narrow``
and ``narrow_codec``), checked bit for bit against XLA's CPU backend: every stored value decoded
and encoded again, conversions from float32 and float64 at every rounding boundary of every
format (midpoints, one ulp either side, overflow, NaN, infinities, zeros), and arithmetic that
rounds after each op."""
from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

from pjrtkit.expansions import formats as F
from pjrtkit.expansions.narrow import NarrowLowering

from expansion_support import primitives, run_expanded

FLOATS = [d.name for d in F.FLOAT8_AND_FLOAT4]
INTS = [d.name for d in F.NARROW_INTS]


def on_both(fn, *args):
    """(outputs through the expansions, outputs on XLA's CPU backend)."""
    prims = primitives(lacking=F.NARROW)
    _, ours = run_expanded(fn, args, prims)
    cpu = jax.devices("cpu")[0]
    theirs = [np.asarray(x) for x in jax.tree_util.tree_leaves(
        jax.jit(fn, device=cpu)(*args))]
    return ours, theirs


def bits(x):
    return np.ascontiguousarray(x).view(np.uint8)


def every_value(dtype):
    dtype = np.dtype(dtype)
    count = 16 if dtype == np.dtype(ml_dtypes.float4_e2m1fn) or dtype.name.endswith("4") \
        else 4 if dtype.name.endswith("2") else 256
    return np.arange(count, dtype=np.uint8).view(dtype)


def boundaries(dtype, wide):
    """Every value of ``dtype``, the midpoints between neighbours, one ulp of ``wide`` either
    side of each, the overflow threshold, and the specials."""
    values = every_value(dtype).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[1:] + finite[:-1]) / 2
    top = finite[-1] + (finite[-1] - finite[-2]) / 2
    points = np.concatenate([finite, mids, [top, 2 * top, -top, 1e30, -1e30]]).astype(wide)
    around = np.concatenate([points, np.nextafter(points, wide(np.inf)),
                             np.nextafter(points, wide(-np.inf))])
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], wide)
    return np.concatenate([around, specials, -around]).astype(wide)


@pytest.mark.parametrize("name", FLOATS)
def test_every_stored_value_decodes_and_encodes_as_on_xla(name):
    dtype = np.dtype(getattr(ml_dtypes, name))
    x = every_value(dtype)
    (widened, same), (xla_widened, xla_same) = on_both(lambda v: (v.astype(np.float32), v), x)
    np.testing.assert_array_equal(bits(widened.view(np.uint32)), bits(xla_widened.view(np.uint32)))
    # a round trip keeps the bytes, NaN encodings included
    np.testing.assert_array_equal(bits(same), bits(xla_same))


@pytest.mark.parametrize("wide", [np.float32, np.float64], ids=["from_f32", "from_f64"])
@pytest.mark.parametrize("name", FLOATS)
def test_conversions_round_once_as_on_xla(name, wide):
    dtype = np.dtype(getattr(ml_dtypes, name))
    x = boundaries(dtype, wide)
    with jax.enable_x64(wide == np.float64):
        (ours,), (theirs,) = on_both(lambda v: v.astype(dtype), x)
    mismatch = np.nonzero(bits(ours) != bits(theirs))[0]
    assert not mismatch.size, (f"{len(mismatch)} of {x.size}: x={x[mismatch[:5]]!r} ours="
                               f"{bits(ours)[mismatch[:5]]} xla={bits(theirs)[mismatch[:5]]}")


@pytest.mark.parametrize("name", FLOATS)
def test_arithmetic_rounds_after_every_op_as_on_xla(name):
    dtype = np.dtype(getattr(ml_dtypes, name))
    values = every_value(dtype)
    rng = np.random.default_rng(len(name))
    a, b = rng.choice(values, 512), rng.choice(values, 512)
    ours, theirs = on_both(lambda p, q: (p + q, p * q, p - q, p / q, p < q, p == q), a, b)
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if o.dtype == np.bool_:
            np.testing.assert_array_equal(o, t, err_msg=f"output {i}")
            continue
        o32, t32 = o.astype(np.float32), t.astype(np.float32)
        same = (o32 == t32) | (np.isnan(o32) & np.isnan(t32))
        assert same.all(), f"output {i}: {a[~same][:4]} {b[~same][:4]} -> {o[~same][:4]} vs " \
                           f"{t[~same][:4]}"


@pytest.mark.parametrize("name", INTS)
def test_narrow_integers_wrap_and_saturate_as_on_xla(name):
    dtype = np.dtype(getattr(ml_dtypes, name))
    values = every_value(dtype)
    rng = np.random.default_rng(len(name))
    a, b = rng.choice(values, 64), rng.choice(values, 64)
    floats = np.array([7.9, 8.5, -9, 100, -100, np.nan, np.inf, -np.inf, 3.5, -3.5, 1.5, -0.5],
                      np.float32)
    ints = np.array([100, -100, 7, 15, 300, -3, 2, 1], np.int32)
    # (XLA's CPU backend shifts uint4/uint2 right arithmetically: uint4 11 >> 1 is 13 there;
    # the expansion shifts logically, as the op says. Shifts are compared for signed types.)
    signed = dtype.name.startswith("int")
    ours, theirs = on_both(lambda p, q, f, i: (p + q, p * q, p - q, -p, p < q, p.astype(
        np.float32), f.astype(dtype), i.astype(dtype), p, p >> 1 if signed else p, p & q),
        a, b, floats, ints)
    for i, (o, t) in enumerate(zip(ours, theirs)):
        np.testing.assert_array_equal(o.astype(np.float32), t.astype(np.float32),
                                      err_msg=f"output {i}")


def test_the_formats_are_read_from_ml_dtypes():
    fmt = F.float_format(ml_dtypes.float8_e4m3fn)
    assert (fmt.mantissa, fmt.exponent, fmt.bias, fmt.max, fmt.kind) == (3, 4, 7, 448.0, "fn")
    assert F.float_format(ml_dtypes.float8_e5m2).kind == "ieee"
    assert F.float_format(ml_dtypes.float8_e4m3fnuz).kind == "fnuz"
    assert F.float_format(ml_dtypes.float4_e2m1fn).kind == "f4"
    assert F.float_format(ml_dtypes.float8_e8m0fnu).kind == "e8m0"
    assert NarrowLowering(F.NARROW).part_types.__self__.dtypes == set(F.NARROW)
