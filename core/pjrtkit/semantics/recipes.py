"""Primitive operations in terms of simpler ones, for renderers that lack them.

Each recipe computes its operation (``scalar.SCALAR_OPS``) on real types from arithmetic,
comparisons, selects, bit operations and the functions every renderer has (floor, ceil, fabs,
sqrt, exp, log, sin, cos, fmod): exactly where the operation is exact (rounding, bit counts,
copysign), and within the dtype's tolerance (``pjrtkit.testing.tolerances``) for the
transcendentals. float32 and narrower transcendentals are computed in float64 and rounded once.
A renderer that spells an operation itself never uses its recipe.
"""
from __future__ import annotations

import math

from pjrtkit.semantics import dtypes as D
from pjrtkit.semantics.scalar import (Expr, apply, bitcast, cast, const, eq, ge, gt, logical_and,
                                      logical_or, lt, ne, select)


def _in_float64(function):
    """``function`` (float64 -> float64 expressions) for floats of any width: narrower ones
    are widened exactly, computed in float64 and rounded once."""
    def recipe(node: Expr) -> Expr | None:
        if not D.is_float(node.dtype):
            return None
        if node.dtype == D.FLOAT64:
            return function(*node.args)
        wide = [cast(a, D.FLOAT64) for a in node.args]
        return cast(Expr(node.op, tuple(wide), D.FLOAT64), node.dtype)
    return recipe


def _float_only(function):
    def recipe(node: Expr) -> Expr | None:
        return function(*node.args) if D.is_float(node.dtype) else None
    return recipe


def _int_only(function):
    def recipe(node: Expr) -> Expr | None:
        return function(*node.args) if D.is_int(node.dtype) else None
    return recipe


def is_inf(x: Expr) -> Expr:
    return eq(apply("fabs", x), math.inf)


def is_finite(x: Expr) -> Expr:
    return eq(x - x, 0)


def sign_bit(x: Expr) -> Expr:
    return lt(bitcast(x, D.signed_of(x.dtype)), 0)


def copysign(magnitude: Expr, sign: Expr) -> Expr:
    unsigned = D.unsigned_of(magnitude.dtype)
    top = 1 << (8 * magnitude.dtype.itemsize - 1)
    bits = (bitcast(magnitude, unsigned) & (top - 1)) | (bitcast(sign, unsigned) & top)
    return bitcast(bits, magnitude.dtype)


def trunc(x: Expr) -> Expr:
    return select(lt(x, 0), apply("ceil", x), apply("floor", x))


def _rounded(x: Expr, ties_to_even: bool) -> Expr:
    t = apply("trunc", x)
    d = apply("fabs", x - t)  # exact
    if ties_to_even:
        up = logical_or(gt(d, 0.5), logical_and(eq(d, 0.5), ne(apply("fmod", t, 2), 0)))
    else:
        up = ge(d, 0.5)
    # t + copysign(1, x) keeps -0.0 for a negative x that rounds to zero
    return select(up, t + apply("copysign", const(1, x.dtype), x), t)


def expm1(x: Expr) -> Expr:
    # Kahan: exp(x) - 1 rescaled by x / log(exp(x)), exact where exp(x) rounds to 1.
    u = apply("exp", x)
    return select(eq(u, 1), x, select(eq(u - 1, -1), -1, select(
        eq(u, math.inf), u, (u - 1) * (x / apply("log", u)))))


def log1p(x: Expr) -> Expr:
    u = 1 + x
    return select(eq(u, 1), x, select(eq(u, math.inf), u,
                                      apply("log", u) * (x / (u - 1))))


def tanh(x: Expr) -> Expr:
    # -expm1(-2|x|) / (2 + expm1(-2|x|)): accurate near 0 and saturating at 1.
    m = apply("expm1", -2 * apply("fabs", x))
    return apply("copysign", -m / (2 + m), x)


def tan(x: Expr) -> Expr:
    return apply("sin", x) / apply("cos", x)


def cbrt(x: Expr) -> Expr:
    y = apply("copysign", apply("exp", apply("log", apply("fabs", x)) / 3), x)
    y = y + (x / (y * y) - y) / 3  # one Newton step from exp/log's few ulps
    return select(logical_or(eq(x, 0), ne(x - x, 0)), x, y)


# Cephes' atan (S. Moshier): range reduction by tan(3 pi / 8) and tan(pi / 8), then a
# rational approximation; about 1 ulp in float64.
_ATAN_P = (-8.750608600031904122785E-1, -1.615753718733365076637E1, -7.500855792314704667340E1,
           -1.228866684490136173410E2, -6.485021904942025371773E1)
_ATAN_Q = (2.485846490142306297962E1, 1.650270098316988542046E2, 4.328810604912902668951E2,
           4.853903996359136964868E2, 1.945506571482613964425E2)
_TAN_3PI_8 = 2.41421356237309504880
_MORE_BITS = 6.123233995736765886130E-17  # pi/2 - float64(pi/2)


def atan(x: Expr) -> Expr:
    a = apply("fabs", x)
    big, middle = gt(a, _TAN_3PI_8), gt(a, 0.66)
    reduced = select(big, -1 / a, select(middle, (a - 1) / (a + 1), a))
    base = select(big, math.pi / 2, select(middle, const(math.pi / 4, x.dtype), 0))
    extra = select(big, _MORE_BITS, select(middle, const(0.5 * _MORE_BITS, x.dtype), 0))
    z = reduced * reduced
    p = const(_ATAN_P[0], x.dtype)
    for c in _ATAN_P[1:]:
        p = p * z + c
    q = z + _ATAN_Q[0]
    for c in _ATAN_Q[1:]:
        q = q * z + c
    angle = base + ((reduced * (z * p / q) + reduced) + extra)
    return apply("copysign", angle, x)


def atan2(y: Expr, x: Expr) -> Expr:
    ax, ay = apply("fabs", x), apply("fabs", y)
    angle = apply("atan", ay / ax)  # in [0, pi/2]; NaN for 0/0, inf/inf and NaN operands
    angle = select(logical_and(eq(ax, 0), eq(ay, 0)), 0, angle)
    angle = select(logical_and(is_inf(ax), is_inf(ay)), math.pi / 4, angle)
    angle = select(sign_bit(x), math.pi - angle, angle)  # -0.0 counts as negative, as in C
    return apply("copysign", angle, y)


def power(x: Expr, y: Expr) -> Expr:
    """C pow: exp(y log|x|) with the sign of an odd integer power, and C99's special cases."""
    ax = apply("fabs", x)
    magnitude = apply("exp", y * apply("log", ax))
    integral = eq(apply("floor", y), y)
    odd = logical_and(integral, ne(apply("floor", y * 0.5), y * 0.5))
    result = select(logical_and(sign_bit(x), odd), -magnitude, magnitude)
    not_real = logical_and(logical_and(lt(x, 0), is_finite(x)),
                           logical_and(is_finite(y), ~integral))
    result = select(not_real, math.nan, result)
    result = select(logical_and(eq(ax, 1), is_inf(y)), 1, result)  # pow(-1, +-inf) = 1
    return select(logical_or(eq(x, 1), eq(y, 0)), 1, result)  # even for a NaN other operand


def popcount(x: Expr) -> Expr:
    """Set bits counted in parallel: pairs, nibbles, bytes, then the bytes summed by one
    multiply whose top byte collects them."""
    width = 8 * x.dtype.itemsize
    unsigned = D.unsigned_of(x.dtype)
    repeated = sum(1 << (8 * i) for i in range(width // 8))  # 0x0101...01
    u = bitcast(x, unsigned)
    u = u - ((u >> 1) & (0x55 * repeated))
    u = (u & (0x33 * repeated)) + ((u >> 2) & (0x33 * repeated))
    u = (u + (u >> 4)) & (0x0F * repeated)
    if width > 8:
        u = (u * repeated) >> (width - 8)
    return bitcast(u, x.dtype)


def count_leading_zeros(x: Expr) -> Expr:
    width = 8 * x.dtype.itemsize
    unsigned = D.unsigned_of(x.dtype)
    u = bitcast(x, unsigned)
    shift = 1
    while shift < width:  # smear the highest set bit rightwards
        u = u | (u >> shift)
        shift *= 2
    return bitcast(const(width, unsigned) - apply("popcount", u), x.dtype)


def flush_denormals(x: Expr) -> Expr:
    """``x`` with denormals replaced by zeros of their sign."""
    tiny = D.float_limits(x.dtype)[1]
    return select(lt(apply("fabs", x), tiny), apply("copysign", const(0, x.dtype), x), x)


RECIPES = {
    "copysign": _float_only(copysign),
    "trunc": _float_only(trunc),
    "rint": _float_only(lambda x: _rounded(x, ties_to_even=True)),
    "round": _float_only(lambda x: _rounded(x, ties_to_even=False)),
    "expm1": _float_only(expm1),
    "log1p": _float_only(log1p),
    "tanh": _float_only(tanh),
    "tan": _in_float64(tan),
    "cbrt": _in_float64(cbrt),
    "atan": _in_float64(atan),
    "atan2": _in_float64(atan2),
    "pow": _in_float64(power),
    "popcount": _int_only(popcount),
    "clz": _int_only(count_leading_zeros),
    "flush_denormals": _float_only(flush_denormals),
}
