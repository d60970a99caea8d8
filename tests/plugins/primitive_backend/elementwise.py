"""Elementwise ops: one NumPy function per op, with XLA's semantics.

Arithmetic and bitwise tables per kind (floats, integers, booleans) with XLA's integer
division, remainder, shift and power rules; float16 and bfloat16 computed in float32 and
rounded. Then compare (with IEEE totalOrder), select, clamp, convert (saturating float to
integer, bfloat16 through float32) and bitcast_convert, which only reinterprets stored bytes:
the expansions read complex and narrow buffers through it.
"""
from __future__ import annotations

import numpy as np

from .payloads import BF16, F16, F32, FLOATS, RULES, kernel, result_type


def _int_divide(a, b):
    """Truncating division; x / 0 is -1 (all ones), INT_MIN / -1 is INT_MIN."""
    zero = b == 0
    safe = np.where(zero, 1, b)
    if a.dtype.kind == "i":
        safe = np.where((a == np.iinfo(a.dtype).min) & (safe == -1), 1, safe)
    q = a // safe
    q = q + ((a % safe != 0) & ((a < 0) != (safe < 0)))
    q = np.where((safe != b) & ~zero, a, q)  # INT_MIN / -1
    return np.where(zero, np.array(-1).astype(a.dtype), q)


def _int_remainder(a, b):
    zero = b == 0
    safe = np.where(zero | ((b == -1) if a.dtype.kind == "i" else False), 1, b)
    return np.where(zero, a, np.fmod(a, safe))


def _shift(kind):
    def shift(a, b):
        bits = a.dtype.itemsize * 8
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        n = b.view(unsigned) if b.dtype.kind == "i" else b
        over = n >= bits
        n = np.where(over, 0, n).astype(unsigned)
        if kind == "left":
            return np.where(over, 0, np.left_shift(a.view(unsigned), n).view(a.dtype))
        if kind == "logical":
            return np.where(over, 0, np.right_shift(a.view(unsigned), n).view(a.dtype))
        return np.right_shift(a, np.where(over, bits - 1, n).astype(a.dtype))
    return shift


def _clz(a):
    bits = a.dtype.itemsize * 8
    x = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    out = np.full(a.shape, bits, a.dtype)
    for i in range(bits):
        out = np.where((x >> np.array(i, x.dtype)) != 0, bits - 1 - i, out)
    return out.astype(a.dtype)


def _round_afz(x):
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def _int_power(a, b):
    out = np.ones_like(a)
    base, e = a.copy(), b.copy()
    for _ in range(a.dtype.itemsize * 8):
        out = np.where(e & 1 == 1, out * base, out)
        base, e = base * base, e >> 1
    negative = b < 0
    return np.where(negative, np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1),
                                                           0)), out).astype(a.dtype)


FLOAT_OPS = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "remainder": np.fmod, "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "atan2": np.arctan2, "negate": np.negative, "abs": np.abs, "sign": np.sign,
    "exponential": np.exp, "exponential_minus_one": np.expm1, "log": np.log,
    "log_plus_one": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt, "sine": np.sin, "cosine": np.cos, "tan": np.tan, "tanh": np.tanh,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "floor": np.floor, "ceil": np.ceil,
    "round_nearest_even": np.rint, "round_nearest_afz": _round_afz,
}
INT_OPS = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _int_divide,
    "remainder": _int_remainder, "maximum": np.maximum, "minimum": np.minimum,
    "power": _int_power, "negate": np.negative, "abs": np.abs, "sign": np.sign,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "not": np.invert,
    "shift_left": _shift("left"), "shift_right_logical": _shift("logical"),
    "shift_right_arithmetic": _shift("arithmetic"),
    "popcnt": lambda x: np.bitwise_count(x.view(np.dtype(f"u{x.dtype.itemsize}"))),
    "count_leading_zeros": _clz,
}
BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
            "not": np.logical_not, "maximum": np.logical_or, "minimum": np.logical_and}


@RULES.register(*{f"stablehlo.{n}" for n in (*FLOAT_OPS, *INT_OPS)})
def elementwise(op, ctx):
    dtype, out = op.operands[0].type.dtype, result_type(op)
    name = op.name.removeprefix("stablehlo.")
    table = FLOAT_OPS if dtype in FLOATS else BOOL_OPS if dtype.kind == "b" else INT_OPS
    fn = table.get(name)
    if fn is None:
        raise ctx.unimplemented(op, f"{name} on {dtype.name}")
    wide = F32 if dtype in (F16, BF16) else dtype  # narrow floats: computed in float32, rounded
    if name == "popcnt":
        return kernel(lambda x: (fn(x).astype(out.dtype),))
    return kernel(lambda *xs: (np.asarray(fn(*(x.astype(wide) for x in xs))).astype(out.dtype),))


@RULES.register("stablehlo.is_finite")
def is_finite(op, ctx):
    return kernel(lambda x: (np.isfinite(x.astype(np.float64)),))


def _total_order_key(x):
    """A signed integer ordering floats as IEEE totalOrder does (-NaN < -inf < ... < NaN)."""
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}"))
    return np.where(signed < 0, signed ^ np.iinfo(signed.dtype).max, signed)


COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal}


@RULES.register("stablehlo.compare")
def compare(op, ctx):
    fn = COMPARE[op.attributes["comparison_direction"]]
    if op.attributes.get("compare_type") == "TOTALORDER":
        return kernel(lambda a, b: (fn(_total_order_key(a), _total_order_key(b)),))
    return kernel(lambda a, b: (fn(a, b),))


@RULES.register("stablehlo.select")
def select(op, ctx):
    return kernel(lambda p, a, b: (np.where(p, a, b),))


@RULES.register("stablehlo.clamp")
def clamp(op, ctx):
    return kernel(lambda lo, x, hi: (np.minimum(np.maximum(x, lo), hi),))


@RULES.register("stablehlo.convert")
def convert(op, ctx):
    source, target = op.operands[0].type.dtype, result_type(op).dtype
    if target == np.bool_:
        return kernel(lambda x: (x != 0,))
    if source.kind == "f" and target.kind in "iu":  # saturating, NaN -> 0
        info = np.iinfo(target)

        def to_int(x):
            x = x.astype(np.float64)
            inside = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
            out = np.trunc(inside).astype(target)
            out = np.where(x >= float(info.max), info.max, out)
            return (np.where(x <= float(info.min), info.min, out).astype(target),)
        return kernel(to_int)
    if target == BF16 or source == BF16:  # XLA converts bfloat16 only through float32
        return kernel(lambda x: (x.astype(F32).astype(target),))
    return kernel(lambda x: (x.astype(target),))


@RULES.register("stablehlo.bitcast_convert")
def bitcast_convert(op, ctx):
    t = result_type(op)  # the stored bytes read as another type
    return kernel(lambda x: (np.ascontiguousarray(x).view(t.dtype).reshape(t.shape),))

