"""What the elementwise ops compute on complex64/complex128, where it is more than one C99
Annex G function.

The primitive complex operations (add ... divide, sqrt, exp, log, sin, cos, tan, tanh, pow)
are C99's (NumPy's complex ufuncs; branch cuts on the negative real axis for sqrt, log and
pow, continuous from above, as C99 and XLA). Where XLA computes more than one function, the
formulas are XLA's own (``xla/service/elemental_ir_emitter.cc``): expm1 and log1p keep the
accuracy near zero that ``exp(z) - 1`` and ``log(1 + z)`` lose; abs, sign, rsqrt and tan say
what happens at NaN and infinity.
"""
from __future__ import annotations

from pjrtkit.semantics import dtypes as D
from pjrtkit.semantics.scalar import (Expr, apply, const, eq, gt, is_nan, logical_and,
                                      logical_or, lt, select)


def _parts(z: Expr) -> tuple[Expr, Expr]:
    part = D.real_part_of(z.dtype)
    return Expr("real", (z,), part), Expr("imag", (z,), part)


def _complex(real: Expr, imag: Expr) -> Expr:
    return Expr("make_complex", (real, imag), D.complex_of(real.dtype))


def _is_inf(x: Expr) -> Expr:
    return eq(apply("fabs", x), float("inf"))


def _is_finite(x: Expr) -> Expr:
    return eq(x - x, 0)


def complex_abs(z: Expr) -> Expr:
    """|z|, NaN when either part is NaN (XLA's; C's cabs makes |inf + NaN j| infinite)."""
    x, y = _parts(z)
    return select(logical_or(is_nan(x), is_nan(y)), float("nan"), apply("hypot", x, y))


def complex_sign(z: Expr) -> Expr:
    """z / |z|, and z itself where |z| is 0 (NaN stays NaN)."""
    x, y = _parts(z)
    magnitude = apply("hypot", x, y)
    return select(eq(magnitude, 0), z, z / _complex(magnitude, const(0, x.dtype)))


def complex_rsqrt(z: Expr) -> Expr:
    """1 / sqrt(z); an infinite z gives a zero signed as XLA signs it (conj of z's signs),
    where 1 / (inf + inf j) would be NaN."""
    x, y = _parts(z)
    zero = const(0, x.dtype)
    signed_zero = _complex(select(lt(x, 0), -zero, zero), apply("copysign", zero, -y))
    return select(logical_or(_is_inf(x), _is_inf(y)), signed_zero, 1 / apply("sqrt", z))


def complex_expm1(z: Expr) -> Expr:
    """expm1(x + iy) = (expm1(x) cos(y) - 2 sin^2(y/2)) + i exp(x) sin(y)."""
    x, y = _parts(z)
    half_sine = apply("sin", y / 2)
    real = apply("expm1", x) * apply("cos", y) - 2 * half_sine * half_sine
    # A real z keeps a zero imaginary part where exp(x) overflows (inf * 0 would be NaN).
    imag = select(eq(y, 0), y, apply("exp", x) * apply("sin", y))
    return _complex(real, imag)


def complex_log1p(z: Expr) -> Expr:
    """log1p(x + iy) = log(|1 + z|) + i atan2(y, 1 + x), the real part as
    0.5 log1p(x (2 + x) + y^2) so that it keeps its precision near 0."""
    x, y = _parts(z)
    near = 0.5 * apply("log1p", x * (2 + x) + y * y)
    # Far from 0 the squared form overflows; |1 + z| is accurate there.
    far = gt(apply("fabs", x) + apply("fabs", y), 1e-2)
    real = select(far, apply("log", apply("hypot", x + 1, y)), near)
    return _complex(real, apply("atan2", y, x + 1))


def complex_tan(z: Expr) -> Expr:
    """tan(z); an infinite real part with a finite imaginary part is NaN + NaN j, as XLA gives
    (C99's ctan keeps a zero imaginary part there)."""
    x, y = _parts(z)
    nan = const(complex(float("nan"), float("nan")), z.dtype)
    return select(logical_and(_is_inf(x), _is_finite(y)), nan, apply("tan", z))


def complex_divide(p: Expr, q: Expr) -> Expr:
    """p / q: ``cdiv`` (exact for finite operands), where that is NaN + NaN j recovered as
    C99 Annex G (G.5.1) recovers it: a nonzero over a zero is infinite, an infinite over a
    finite is infinite, a finite over an infinite is zero, each with the signs it says."""
    a, b = _parts(p)
    c, d = _parts(q)
    quotient = Expr("cdiv", (p, q), p.dtype)
    x, y = _parts(quotient)
    part = x.dtype
    inf, zero = const(float("inf"), part), const(0, part)

    def unit(v):  # copysign(isinf(v) ? 1 : 0, v)
        return apply("copysign", select(_is_inf(v), 1, zero), v)

    over_zero = logical_and(logical_and(eq(c, 0), eq(d, 0)),
                            ~logical_and(is_nan(a), is_nan(b)))
    s = apply("copysign", inf, c)
    by_zero = _complex(s * a, s * b)
    infinite_p = logical_and(logical_or(_is_inf(a), _is_inf(b)),
                             logical_and(_is_finite(c), _is_finite(d)))
    ua, ub = unit(a), unit(b)
    infinite = _complex(inf * (ua * c + ub * d), inf * (ub * c - ua * d))
    infinite_q = logical_and(logical_or(_is_inf(c), _is_inf(d)),
                             logical_and(_is_finite(a), _is_finite(b)))
    uc, ud = unit(c), unit(d)
    vanishing = _complex(zero * (a * uc + b * ud), zero * (b * uc - a * ud))
    recovered = select(over_zero, by_zero, select(infinite_p, infinite,
                                                  select(infinite_q, vanishing, quotient)))
    return select(logical_and(is_nan(x), is_nan(y)), recovered, quotient)


DEFINITIONS = {"exponential_minus_one": complex_expm1, "log_plus_one": complex_log1p,
               "tan": complex_tan}
