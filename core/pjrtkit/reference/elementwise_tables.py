"""NumPy implementations of StableHLO elementwise ops with XLA CPU semantics, as tables.

Each table maps a StableHLO op name (without the ``stablehlo.`` prefix) to a function of NumPy
arrays. ``elementwise.py`` picks the table by the operand's dtype kind at compile time and
registers one rule per op. Where NumPy's semantics differ from XLA's, a small function here says
how (integer division by zero, integer power, signed zeros in max/min, sign of -0.0, ...).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.reference.dtypes import BFLOAT16, FLOAT16, FLOAT32, is_float

__all__ = ["BFLOAT16", "FLOAT16", "FLOAT32", "is_float"]  # with every table below


def unsigned_of(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype of the same width (to read bit patterns)."""
    return np.dtype(f"u{dtype.itemsize}")


def signed_of(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"i{dtype.itemsize}")


def float_bit_layout(dtype: np.dtype) -> tuple[int, int]:
    """(exponent bits, explicit mantissa bits) of a float dtype."""
    info = ml_dtypes.finfo(dtype)
    return int(info.nexp), int(info.nmant)


# -- floats -------------------------------------------------------------------------------------

def float_sign(x):
    # XLA keeps the sign of -0.0 and of NaN; np.sign maps -0.0 to +0.0.
    r = np.sign(x)
    return np.copysign(r, x, out=r) if isinstance(r, np.ndarray) else np.copysign(r, x)


def round_half_away(x):
    # x - trunc(x) is exact, so this never double-rounds (unlike floor(x + 0.5)).
    t = np.trunc(x)
    away = np.abs(x - t) >= 0.5
    return np.where(away, t + np.sign(x), t).astype(x.dtype, copy=False)


def rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def logistic(x):
    return np.reciprocal(np.exp(np.negative(x)) + x.dtype.type(1))


def _splat_value(a, b):
    """The value s when exactly one of ``a``, ``b`` has a single value throughout (a stride-0
    broadcast such as ReLU's ``broadcast(0)``) and the dtype is one of NumPy's own floats;
    else None."""
    if a.dtype.kind != "f":  # ml_dtypes' bfloat16 and friends take the general path
        return None
    a_splat = isinstance(a, np.ndarray) and a.size and not any(a.strides)
    b_splat = isinstance(b, np.ndarray) and b.size and not any(b.strides)
    if a_splat == b_splat:
        return None
    x = a if a_splat else b
    return x[(0,) * x.ndim]


def float_maximum(a, b):
    # XLA propagates NaN (the first NaN operand) and orders -0.0 below +0.0; np.maximum may
    # return either zero for equal zeros (its SIMD loops do not keep the first operand).
    s = _splat_value(a, b)
    if s is not None and (s != 0 or not np.signbit(s)):
        # Against a splat, only a zero s can tie. Nonzero s: no tie, np.maximum is exact. +0.0
        # (ReLU): every tie must give +0.0, and adding +0.0 turns -0.0 into +0.0 while leaving
        # every other value, NaN included, as it is. Two passes instead of the general fix-up
        # (the convnet's ReLU: about 0.5 ms instead of 4 ms).
        r = np.maximum(a, b)
        if s == 0:
            np.add(r, r.dtype.type(0), out=r)
        return r
    return _signed_zero_ties(np.maximum(a, b), a, b, np.bitwise_and)


def float_minimum(a, b):
    s = _splat_value(a, b)
    if s is not None and s != 0:  # no tie possible (see float_maximum)
        return np.minimum(a, b)
    return _signed_zero_ties(np.minimum(a, b), a, b, np.bitwise_or)


def _signed_zero_ties(r, a, b, combine_bits):
    """``r`` with each tie of +0.0 and -0.0 settled by XLA's rule: the sign bits of ``a`` and
    ``b`` combined (``bitwise_and``: maximum prefers +0.0; ``bitwise_or``: minimum, -0.0)."""
    zero = r == 0
    if zero.any():
        zero &= a == b
        bits = unsigned_of(r.dtype)
        fixed = combine_bits(np.asarray(a).view(bits), np.asarray(b).view(bits)).view(r.dtype)
        r = np.where(zero, fixed, r)
    return r


def total_order_key(x):
    """Signed integers ordered like ``x`` under IEEE totalOrder (-NaN < -inf < -0 < +0 < NaN)."""
    signed = np.asarray(x).view(signed_of(x.dtype))
    # Negative floats have their magnitude bits reversed relative to signed-integer order.
    flip = np.right_shift(signed, 8 * x.dtype.itemsize - 1) & np.iinfo(signed.dtype).max
    return signed ^ flip


# For f16/bf16 inputs these are computed in float32 and rounded once, as XLA does.
FLOAT_UNARY = {
    "abs": np.abs,
    "negate": np.negative,
    "sign": float_sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round_nearest_even": np.rint,
    "round_nearest_afz": round_half_away,
    "sqrt": np.sqrt,
    "rsqrt": rsqrt,
    "cbrt": np.cbrt,
    "exponential": np.exp,
    "exponential_minus_one": np.expm1,
    "log": np.log,
    "log_plus_one": np.log1p,
    "logistic": logistic,
    "tanh": np.tanh,
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
}

FLOAT_BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "remainder": np.fmod,  # C fmod: the sign of the dividend, like XLA's frem
    "power": np.power,
    "maximum": float_maximum,
    "minimum": float_minimum,
    "atan2": np.arctan2,
}
# float32 transcendentals computed in float64 and rounded once: NumPy's float32 versions are
# up to 2.9 ulp off (exp 2.2, log 2.9 over their domains), more than XLA's CPU backend, while
# float64's are within 0.5 ulp after the rounding (docs/accuracy.md).
FLOAT32_VIA_FLOAT64 = frozenset({
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh", "sine",
    "cosine", "tan", "cbrt", "rsqrt", "power", "atan2"})
# Exact in any precision: run on the input type directly, no f32 round trip.
FLOAT_EXACT = frozenset({"abs", "negate", "sign", "floor", "ceil", "round_nearest_even",
                         "round_nearest_afz", "maximum", "minimum"})


# -- integers -----------------------------------------------------------------------------------

def _fix_signed_division(a, b):
    """Operands for floor division that cannot trap: x/0 and INT_MIN/-1 are patched later."""
    zero = b == 0
    minus_one = b == -1
    safe_b = np.where(zero | minus_one, np.ones_like(b), b)
    return zero, minus_one, safe_b


def integer_divide(a, b):
    """Truncating division; x/0 is -1 (all bits set) and INT_MIN/-1 wraps, as on XLA."""
    if a.dtype.kind == "u":
        zero = b == 0
        q = np.floor_divide(a, np.where(zero, np.ones_like(b), b))
        return np.where(zero, np.array(-1).astype(a.dtype), q)
    zero, minus_one, safe_b = _fix_signed_division(a, b)
    q, r = np.divmod(a, safe_b)
    # Floor and truncation differ by one when the division is inexact and the signs differ.
    q += (r != 0) & ((a ^ safe_b) < 0)
    q = np.where(minus_one, np.negative(a), q)
    return np.where(zero, np.array(-1, a.dtype), q)


def integer_remainder(a, b):
    """Remainder with the sign of the dividend; x%0 is x and INT_MIN%-1 is 0, as on XLA."""
    if a.dtype.kind == "u":
        zero = b == 0
        return np.where(zero, a, np.remainder(a, np.where(zero, np.ones_like(b), b)))
    zero, minus_one, safe_b = _fix_signed_division(a, b)
    return np.where(zero, a, np.fmod(a, safe_b))  # fmod(x, 1) == 0 covers b == -1


def integer_power(a, b):
    """XLA's integer power: squaring over only the low 6 exponent bits, negative exponents
    (as signed values, even for unsigned types) give 0 except for bases 1 and -1."""
    bits = unsigned_of(b.dtype)
    low = np.bitwise_and(np.asarray(b).view(bits), bits.type(63)).astype(a.dtype)
    r = np.power(a, low)
    negative = np.asarray(b).view(signed_of(b.dtype)) < 0
    r = np.where(negative, np.zeros_like(r), r)
    one = np.ones_like(a)
    all_ones = np.array(-1).astype(a.dtype)
    odd = np.bitwise_and(b, b.dtype.type(1)).astype(bool)
    r = np.where(a == all_ones, np.where(odd, all_ones, one), r)
    return np.where(a == one, one, r)


def popcount(x):
    return np.bitwise_count(np.asarray(x).view(unsigned_of(x.dtype))).astype(x.dtype)


def count_leading_zeros(x):
    u = np.array(x, copy=True).view(unsigned_of(x.dtype))
    shift = 1
    # Smear the highest set bit rightwards; the zeros above it are what is left unset.
    while shift < 8 * x.dtype.itemsize:
        u |= u >> u.dtype.type(shift)
        shift *= 2
    width = 8 * x.dtype.itemsize
    return (width - np.bitwise_count(u).astype(np.int64)).astype(x.dtype)


def shift_right_logical(a, b):
    bits = unsigned_of(a.dtype)
    return np.right_shift(np.asarray(a).view(bits), np.asarray(b).view(bits)).view(a.dtype)


def shift_left(a, b):
    # NumPy yields 0 for amounts >= the bit width (and negative amounts, read as unsigned),
    # like XLA; read the amount as unsigned so that holds for every NumPy version.
    bits = unsigned_of(a.dtype)
    return np.left_shift(np.asarray(a).view(bits), np.asarray(b).view(bits)).view(a.dtype)


def shift_right_arithmetic(a, b):
    # XLA shifts the bit pattern arithmetically even for unsigned types (the top bit fills).
    signed = signed_of(a.dtype)
    width = 8 * a.dtype.itemsize
    # Amounts >= width (or negative) fill with the sign bit, i.e. shift by width - 1.
    amount = np.minimum(np.asarray(b).view(unsigned_of(b.dtype)),
                        unsigned_of(b.dtype).type(width - 1)).astype(signed)
    return np.right_shift(np.asarray(a).view(signed), amount).view(a.dtype)


INT_UNARY = {
    "abs": np.abs,  # INT_MIN stays INT_MIN (two's complement wrap), as on XLA
    "negate": np.negative,
    "sign": np.sign,
    "not": np.invert,
    "popcnt": popcount,
    "count_leading_zeros": count_leading_zeros,
}

INT_BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": integer_divide,
    "remainder": integer_remainder,
    "power": integer_power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shift_left": shift_left,
    "shift_right_arithmetic": shift_right_arithmetic,
    "shift_right_logical": shift_right_logical,
}

# -- integers narrower than a byte (int2, int4, uint2, uint4) ------------------------------------
# Most ops run in int8/uint8 and wrap back to the width (``elementwise.py``); these read the
# value's bit pattern of ``width`` bits instead, so they have their own versions. Each gets
# the operands already widened to int8/uint8 and the width.

def _narrow_bits(x, width):
    return np.bitwise_and(np.asarray(x).astype(np.uint8), np.uint8((1 << width) - 1))


def narrow_popcount(x, width):
    return np.bitwise_count(_narrow_bits(x, width)).astype(x.dtype)


def narrow_count_leading_zeros(x, width):
    bits = _narrow_bits(x, width)
    length = np.zeros(bits.shape, np.int8)
    for i in range(width):
        length = np.where(bits >> np.uint8(i) != 0, np.int8(i + 1), length)
    return (width - length).astype(x.dtype)


def narrow_shift_right_logical(a, b, width):
    amount = _narrow_bits(b, width)
    shifted = np.right_shift(_narrow_bits(a, width), np.minimum(amount, np.uint8(7)))
    return np.where(amount >= width, np.uint8(0), shifted).astype(a.dtype)


def narrow_shift_right_arithmetic(a, b, width):
    bits = _narrow_bits(a, width).astype(np.int8)
    signed = np.where(bits >= (1 << (width - 1)), bits - np.int8(1 << width), bits)
    amount = np.minimum(_narrow_bits(b, width), np.uint8(width - 1)).astype(np.int8)
    return np.right_shift(signed, amount).astype(a.dtype)


def narrow_shift_left(a, b, width):
    amount = _narrow_bits(b, width)
    shifted = np.left_shift(_narrow_bits(a, width), np.minimum(amount, np.uint8(7)))
    return np.where(amount >= width, np.uint8(0), shifted).astype(a.dtype)


NARROW_INT_BIT_OPS = {
    "popcnt": narrow_popcount,
    "count_leading_zeros": narrow_count_leading_zeros,
    "shift_right_logical": narrow_shift_right_logical,
    "shift_right_arithmetic": narrow_shift_right_arithmetic,
    "shift_left": narrow_shift_left,
}


# i1 arithmetic as XLA does it: add saturates to "or", multiply is "and".
BOOL_UNARY = {"not": np.logical_not}
BOOL_BINARY = {
    "add": np.logical_or,
    "multiply": np.logical_and,
    "maximum": np.logical_or,
    "minimum": np.logical_and,
    "and": np.logical_and,
    "or": np.logical_or,
    "xor": np.logical_xor,
}


# -- comparisons --------------------------------------------------------------------------------

COMPARISONS = {
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
}


# -- reduce_precision ---------------------------------------------------------------------------

def reduce_precision_kernel(dtype: np.dtype, exponent_bits: int, mantissa_bits: int):
    """A function rounding ``dtype`` values to the given format, bit for bit as XLA's
    EmitReducePrecisionIR (ties to even, overflow to inf, underflow and denormals to zero,
    NaN kept as it is — also with no mantissa bits, as the XLA in jaxlib does)."""
    src_exp, src_mant = float_bit_layout(dtype)
    bits = unsigned_of(dtype)
    u = bits.type
    width = 8 * dtype.itemsize
    sign_mask = u(1 << (width - 1))
    exp_mask = u(((1 << src_exp) - 1) << src_mant)
    round_mantissa = mantissa_bits < src_mant
    if round_mantissa:
        shift = src_mant - mantissa_bits
        last_bit = 1 << shift
        base_bias = u((last_bit >> 1) - 1)
        truncation = u(~(last_bit - 1) & ((1 << width) - 1))
        last_bit, shift = u(last_bit), u(shift)
    reduce_exponent = exponent_bits < src_exp
    if reduce_exponent:
        bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = u((bias + reduced_bias) << src_mant)
        min_exp = u((bias - reduced_bias) << src_mant)

    def reduce(x):
        xi = np.asarray(x).view(bits)
        out = xi
        if round_mantissa:
            out = out + (((out & last_bit) >> shift) + base_bias)
            out &= truncation
        if reduce_exponent:
            exponent = out & exp_mask
            signed_zero = out & sign_mask
            out = np.where(exponent > max_exp, signed_zero | exp_mask, out)
            out = np.where(exponent <= min_exp, signed_zero, out)
        is_nan = (xi & ~sign_mask) > exp_mask
        result = np.asarray(out, dtype=bits).view(dtype)
        return np.where(is_nan, x, result)

    return reduce
