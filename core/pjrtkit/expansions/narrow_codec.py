"""Decoding, encoding and rounding narrow types with integer and float ops a backend has.

A narrow value is held in its compute type (``formats.compute_dtype``: float16 or float32 for
the float8/float4 formats, int8/uint8 for int2/int4/uint2/uint4) and is always exactly one of
the narrow type's values there. The functions build StableHLO ops (``OpBuilder``) that

- ``decode``: a stored narrow value (its bytes reinterpreted as uint8) -> the held value;
- ``encode``: the held value -> the stored bytes;
- ``round_float``: any float (float16 ... float64) -> the nearest narrow value, rounding to
  nearest even once from the source's own bits, with each format's overflow rule (infinity,
  NaN, or saturation) and no -0 where the format has none: what XLA's CPU backend's
  conversions give, bit for bit (``tests/expansions/test_narrow_codec.py``);
- ``wrap_int``: an int8/uint8 result -> the narrow integer it wraps to.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.expansions import formats as F
from pjrtkit.expansions.build import OpBuilder, like
from pjrtkit.semantics import dtypes as D

# Source float layouts: (unsigned type of its bits, mantissa bits, exponent bias).
_LAYOUT = {F.FLOAT32: (F.UINT32, 23, 127), F.FLOAT64: (F.UINT64, 52, 1023)}


def _u(b: OpBuilder, value, like_value):
    return b.constant_like(value, like_value)


def _wide(b: OpBuilder, x):
    """``x`` as float32, or float64 when it is one (exact for every narrower float)."""
    if x.type.dtype in _LAYOUT:
        return x
    return b.convert(x, F.FLOAT32)


def round_float(b: OpBuilder, x, fmt: F.FloatFormat):
    """The nearest value of ``fmt`` to float ``x``, as a value of ``x``'s widened float type
    (float32, or float64 for float64 sources)."""
    x = _wide(b, x)
    if fmt.kind == "e8m0":
        return _round_e8m0(b, x)
    utype, mant_bits, _ = _LAYOUT[x.type.dtype]
    bits = b.bitcast(x, like(x, utype))
    sign_mask = _u(b, 1 << (8 * utype.itemsize - 1), bits)
    magnitude_bits = b.and_(bits, _u(b, (1 << (8 * utype.itemsize - 1)) - 1, bits))
    magnitude = b.bitcast(magnitude_bits, x.type)
    # Normal values of fmt: round the source mantissa to fmt's, to nearest even, on the bits
    # (a carry into the exponent is the next binade, as it should be).
    drop = mant_bits - fmt.mantissa
    lsb = b.and_(b.shift_right_logical(magnitude_bits, _u(b, drop, bits)), _u(b, 1, bits))
    biased = b.add(b.add(magnitude_bits, _u(b, (1 << (drop - 1)) - 1, bits)), lsb)
    normal = b.bitcast(b.and_(biased, _u(b, ~((1 << drop) - 1) & ((1 << 8 * utype.itemsize) - 1),
                                          bits)), x.type)
    # Subnormal values of fmt: adding K, whose ulp is fmt's subnormal spacing, rounds to it
    # (once, to nearest even); subtracting K again is exact.
    k = b.constant_like(2.0 ** (fmt.min_exponent - fmt.mantissa + mant_bits), x)
    subnormal = b.subtract(b.add(magnitude, k), k)
    tiny = b.compare(magnitude, b.constant_like(2.0 ** fmt.min_exponent, x), "LT")
    rounded = b.select(tiny, subnormal, normal)
    over = b.compare(rounded, b.constant_like(fmt.max, x), "GT")
    overflow = {"ieee": np.inf, "fn": np.nan, "fnuz": np.nan, "f4": fmt.max}[fmt.kind]
    rounded = b.select(over, b.constant_like(overflow, x), rounded)
    if fmt.kind == "f4":  # XLA's CPU backend converts NaN to float4 as -0.0
        rounded = b.select(b.compare(x, x, "NE"), b.constant_like(-0.0, x), rounded)
    else:
        rounded = b.select(b.compare(x, x, "NE"), b.constant_like(np.nan, x), rounded)
    signed = b.bitcast(b.or_(b.bitcast(rounded, bits.type), b.and_(bits, sign_mask)), x.type)
    if fmt.kind == "fnuz":  # no -0: a zero is +0
        zero = b.constant_like(0.0, x)
        signed = b.select(b.compare(rounded, zero, "EQ"), zero, signed)
    return signed


def _round_e8m0(b: OpBuilder, x):
    """float8_e8m0fnu: 2^k for k in [-127, 127], rounded half up in the exponent; zero,
    negatives, infinities, NaN and overflow give NaN. At the bottom of the range XLA's CPU
    backend (measured) gives 2^-127 for every float32 up to 2^-127 and 2^-126 above it, and
    NaN for float64 values below 2^-127."""
    utype, mant_bits, bias = _LAYOUT[x.type.dtype]
    bits = b.bitcast(x, like(x, utype))
    exponent = b.shift_right_logical(bits, _u(b, mant_bits, bits))
    mantissa = b.and_(bits, _u(b, (1 << mant_bits) - 1, bits))
    up = b.convert(b.compare(mantissa, _u(b, 1 << (mant_bits - 1), bits), "GE"), utype)
    # code = exponent - bias + 127 (+1 when rounding up), clamped below at 0
    code_plus = b.add(b.add(exponent, up), _u(b, 127, bits))
    below = b.compare(code_plus, _u(b, bias, bits), "LE")
    code = b.select(below, _u(b, 0, bits), b.subtract(code_plus, _u(b, bias, bits)))
    zero = b.constant_like(0.0, x)
    invalid = b.or_(b.compare(x, zero, "LE"), b.compare(x, x, "NE"))
    if x.type.dtype == F.FLOAT32:  # 2^-127 is the float32 subnormal of mantissa 0x400000
        bottom = b.compare(exponent, _u(b, 0, bits), "EQ")
        above = b.convert(b.compare(mantissa, _u(b, 1 << (mant_bits - 1), bits), "GT"), utype)
    else:
        bottom = b.compare(exponent, _u(b, bias - 127, bits), "EQ")
        above = b.convert(b.compare(mantissa, _u(b, 0, bits), "GT"), utype)
        invalid = b.or_(invalid, b.compare(exponent, _u(b, bias - 127, bits), "LT"))
    code = b.select(bottom, above, code)
    invalid = b.or_(invalid, b.compare(code, _u(b, 254, bits), "GT"))
    value = _e8m0_value(b, b.convert(code, F.UINT32))
    value = b.convert(value, x.type.dtype) if x.type.dtype != F.FLOAT32 else value
    return b.select(invalid, b.constant_like(np.nan, x), value)


def flush_denormals(b: OpBuilder, x):
    """``x`` (float32) with its denormals replaced by zeros of their sign: XLA's CPU backend
    computes float8_e8m0fnu in float32 with denormals flushed, in and out."""
    tiny = b.compare(b.abs(x), b.constant_like(D.float_limits(F.FLOAT32)[1], x), "LT")
    signed_zero = b.bitcast(b.and_(b.bitcast(x, like(x, F.UINT32)),
                                   b.constant(1 << 31, F.UINT32, x.type.shape)), x.type)
    return b.select(tiny, signed_zero, x)


def _e8m0_value(b: OpBuilder, code):
    """2^(code - 127) as float32 for a uint32 code in [0, 254] (code 0 is a subnormal)."""
    normal = b.shift_left(code, _u(b, 23, code))
    bits = b.select(b.compare(code, _u(b, 0, code), "EQ"), _u(b, 0x400000, code), normal)
    return b.bitcast(bits, like(code, F.FLOAT32))


def decode(b: OpBuilder, stored, fmt: F.FloatFormat):
    """The held value (in ``fmt.compute``) of a narrow float whose bytes are ``stored``
    (uint8)."""
    code = b.convert(stored, F.UINT32)
    code = b.and_(code, _u(b, (1 << fmt.bits) - 1, code))
    if fmt.kind == "e8m0":
        value = _e8m0_value(b, code)
        nan = b.compare(code, _u(b, 0xFF, code), "EQ")
        return b.select(nan, b.constant_like(np.nan, value), value)
    m, e = fmt.mantissa, fmt.exponent
    sign = b.and_(b.shift_right_logical(code, _u(b, fmt.bits - 1, code)), _u(b, 1, code))
    exponent = b.and_(b.shift_right_logical(code, _u(b, m, code)), _u(b, (1 << e) - 1, code))
    mantissa = b.and_(code, _u(b, (1 << m) - 1, code))
    normal_bits = b.or_(b.or_(b.shift_left(sign, _u(b, 31, code)),
                              b.shift_left(b.add(exponent, _u(b, 127 - fmt.bias, code)),
                                           _u(b, 23, code))),
                        b.shift_left(mantissa, _u(b, 23 - m, code)))
    normal = b.bitcast(normal_bits, like(code, F.FLOAT32))
    scaled = b.multiply(b.convert(mantissa, F.FLOAT32),
                        b.constant(2.0 ** (fmt.min_exponent - m), F.FLOAT32, code.type.shape))
    negative = b.compare(sign, _u(b, 1, code), "EQ")
    # the sign as a bit, not a negation: -0 stays -0 on backends whose negate is 0 - x
    subnormal = b.bitcast(b.or_(b.bitcast(scaled, like(code, F.UINT32)),
                                b.shift_left(sign, _u(b, 31, code))), scaled.type)
    value = b.select(b.compare(exponent, _u(b, 0, code), "EQ"), subnormal, normal)
    all_ones = (1 << e) - 1
    # NaN keeps its sign where the format has one (as XLA's conversion to float32 does)
    signed_nan = b.select(negative, b.constant_like(-np.nan, value),
                          b.constant_like(np.nan, value))
    if fmt.kind == "ieee":  # infinities, and NaN with its payload (the mantissa bits)
        special = b.compare(exponent, _u(b, all_ones, code), "EQ")
        special_bits = b.or_(b.or_(b.shift_left(sign, _u(b, 31, code)), _u(b, 0x7F800000, code)),
                             b.shift_left(mantissa, _u(b, 23 - m, code)))
        value = b.select(special, b.bitcast(special_bits, value.type), value)
    elif fmt.kind == "fn":
        nan = b.compare(b.and_(code, _u(b, (1 << (fmt.bits - 1)) - 1, code)),
                        _u(b, (1 << (fmt.bits - 1)) - 1, code), "EQ")
        value = b.select(nan, signed_nan, value)
    elif fmt.kind == "fnuz":
        nan = b.compare(code, _u(b, fmt.nan_code, code), "EQ")
        value = b.select(nan, b.constant_like(np.nan, value), value)
    return value if fmt.compute == F.FLOAT32 else b.convert(value, fmt.compute)


def encode(b: OpBuilder, held, fmt: F.FloatFormat):
    """The uint8 bytes of a held narrow float (exactly one of ``fmt``'s values)."""
    x = b.convert(held, F.FLOAT32) if held.type.dtype != F.FLOAT32 else held
    bits = b.bitcast(x, like(x, F.UINT32))
    if fmt.kind == "e8m0":
        exponent = b.shift_right_logical(bits, _u(b, 23, bits))
        code = b.select(b.compare(exponent, _u(b, 0, bits), "EQ"), _u(b, 0, bits), exponent)
        code = b.select(b.compare(x, x, "NE"), _u(b, 0xFF, bits), code)
        return b.convert(code, F.UINT8)
    m = fmt.mantissa
    sign = b.shift_right_logical(bits, _u(b, 31, bits))
    magnitude_bits = b.and_(bits, _u(b, 0x7FFFFFFF, bits))
    magnitude = b.bitcast(magnitude_bits, x.type)
    exponent = b.shift_right_logical(magnitude_bits, _u(b, 23, bits))
    mantissa = b.and_(magnitude_bits, _u(b, 0x7FFFFF, bits))
    normal = b.or_(b.shift_left(b.add(exponent, _u(b, fmt.bias - 127 + (1 << 16), bits)),
                                _u(b, m, bits)),
                   b.shift_right_logical(mantissa, _u(b, 23 - m, bits)))
    # (the 1 << 16 keeps the unsigned sum positive; it is shifted out of the byte below)
    normal = b.and_(normal, _u(b, (1 << (fmt.bits - 1)) - 1, bits))
    subnormal = b.convert(b.multiply(magnitude, b.constant_like(2.0 ** (m - fmt.min_exponent),
                                                                x)), F.UINT32)
    tiny = b.compare(magnitude, b.constant_like(2.0 ** fmt.min_exponent, x), "LT")
    code = b.select(tiny, subnormal, normal)
    if fmt.inf_code is not None:
        infinite = b.compare(magnitude, b.constant_like(np.inf, x), "EQ")
        code = b.select(infinite, _u(b, fmt.inf_code, bits), code)
    code = b.or_(code, b.shift_left(sign, _u(b, fmt.bits - 1, bits)))
    if fmt.kind == "fnuz":
        code = b.select(b.compare(magnitude, b.constant_like(0.0, x), "EQ"), _u(b, 0, bits),
                        code)
    nan_code = _u(b, fmt.nan_code, bits)
    if fmt.kind == "ieee":  # NaN keeps its payload (the top mantissa bits) where it has one
        mask = (1 << m) - 1
        payload = b.shift_right_logical(mantissa, _u(b, 23 - m, bits))
        payload = b.select(b.compare(payload, _u(b, 0, bits), "EQ"),
                           _u(b, fmt.nan_code & mask, bits), payload)
        nan_code = b.or_(_u(b, fmt.nan_code & ~mask, bits), payload)
    if fmt.kind in ("ieee", "fn"):  # NaN keeps its sign
        nan_code = b.or_(nan_code, b.shift_left(sign, _u(b, fmt.bits - 1, bits)))
    code = b.select(b.compare(x, x, "NE"), nan_code, code)
    return b.convert(code, F.UINT8)


def decode_int(b: OpBuilder, stored, dtype):
    """The int8/uint8 value of a narrow integer whose bytes are ``stored`` (uint8)."""
    width = F.int_bits(dtype)
    if F.compute_dtype(dtype) == F.UINT8:
        return b.and_(stored, _u(b, (1 << width) - 1, stored))
    return wrap_int(b, b.bitcast(stored, like(stored, F.INT8)), dtype)


def wrap_int(b: OpBuilder, value, dtype):
    """An int8/uint8 ``value`` wrapped to ``dtype``'s width (two's complement)."""
    width = F.int_bits(dtype)
    if value.type.dtype == F.UINT8:
        return b.and_(value, _u(b, (1 << width) - 1, value))
    shift = _u(b, 8 - width, value)
    return b.shift_right_arithmetic(b.shift_left(value, shift), shift)


def encode_int(b: OpBuilder, held, dtype):
    """The uint8 bytes of a held narrow integer (its low bits)."""
    width = F.int_bits(dtype)
    stored = held if held.type.dtype == F.UINT8 else b.bitcast(held, like(held, F.UINT8))
    return b.and_(stored, _u(b, (1 << width) - 1, stored))
