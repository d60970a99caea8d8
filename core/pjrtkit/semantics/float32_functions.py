"""float32 exp, log, log1p, expm1, tanh and logistic as scalar expressions of float32 and int32
arithmetic: one algorithm each, so that every renderer computes the same bits.

A jitted program's ops run on more than one code generator over its life: the NumPy renderer
and the elementwise VM at its first calls, a compiled loop once it lands. Each used to compute
these functions its own way (float64 libm rounded once; a vectorizable polynomial in the loop),
so the same program gave different bits at call 1 and at call 10 (up to half of the elements
of ``exp(-x*x/2) * log1p(|x|)`` on 10**5 normals), and a chaotic computation such as a NUTS
chain took a different path after its loops landed. Here each function is the one expression
every renderer renders. The compiled loops' version (``pjrtkit_cpu.vecmath``, Numba) is the
same operations in the same order; a test holds it to this module bit for bit.

Method (as in Cephes or musl): reduce the argument exactly (a Cody-Waite split of ln 2, or the
float's exponent bits), evaluate a polynomial on the small remaining interval, scale back with
integer exponent arithmetic. Coefficients were fitted toward minimax relative error in float64
and rounded to float32. Every operation is float32 (or int32 on the bits) and nothing may be
contracted into a fused multiply-add except where the expression says so (``fma``): the
compiled loops' LLVM contracts a multiply whose only use is an add or subtract (with FMA
hardware), and the expressions write exactly those as ``multiply_add``.

Accuracy against correctly rounded results: exp 1 ulp, log 2, log1p 2, expm1 2, tanh 2,
logistic 3 (``MAX_ULP``). Special values follow IEEE/C99 as XLA's CPU results do, with XLA's one
exception: ``log`` reads denormal inputs as zero (XLA's CPU threads run with
denormals-are-zero).
"""
from __future__ import annotations

import functools

import numpy as np

from pjrtkit.semantics import definitions as S, dtypes as D, ops
from pjrtkit.semantics.scalar import (Expr, apply, bitcast, cast, const, eq, ge, gt, is_nan, le,
                                     logical_or, lt, select)

F32 = D.FLOAT32
I32 = D.INT32

# The error bounds the tests enforce, in float32 ulps of the correctly rounded result.
MAX_ULP = {"exp": 1, "log": 2, "log1p": 2, "expm1": 2, "tanh": 2, "logistic": 3}


def _f(value: float) -> Expr:
    """A float32 constant (the value rounded to float32 first, as ``np.float32(value)``)."""
    return const(float(np.float32(value)), F32)


def _i(value: int) -> Expr:
    return const(value, I32)


# exp: n = round(x / ln2) by the 1.5 * 2**23 trick (the float add rounds to nearest even), then
# r = x - n * ln2 in two steps; ln2_hi has 9 significant bits so n * ln2_hi is exact.
SHIFTER = 12582912.0
SHIFTER_BITS = 0x4B400000
LOG2E = 1.4426950408889634
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
# Beyond these the result is inf / 0 anyway; clamping keeps n in int32 range and NaN harmless.
EXP_CLAMP_HI = 89.0
EXP_CLAMP_LO = -104.0
# (exp(r) - 1 - r) / r**2 on |r| <= 0.35
EXP_POLY = (0.5, 0.1666666567325592, 0.04166628047823906, 0.008333503268659115,
            0.001394574181176722, 0.00019789293583016843)

# log: x = 2**e * m with m in [sqrt(1/2), sqrt(2)); f = m - 1 is exact.
SQRT_HALF_BITS = 0x3F3504F3
ONE_BITS = 0x3F800000
MANTISSA = 0x007FFFFF
MIN_NORMAL = 1.1754943508222875e-38
TWO23 = 8388608.0
# (log1p(f) - f + f**2/2) / f**3 on [sqrt(1/2) - 1, sqrt(2) - 1]
LOG_POLY = (0.3333331346511841, -0.25000008940696716, 0.2000211924314499, -0.16667994856834412,
            0.142195463180542, -0.12405598163604736, 0.11888211965560913, -0.11675615608692169,
            0.0674649029970169)

# tanh: odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above (no cancellation there).
TANH_SMALL = 0.625
TANH_CLAMP = 10.0  # tanh(10) rounds to 1 in float32
# (tanh(x) - x) / x**3 as a polynomial in x**2 on [0, 0.625]
TANH_POLY = (-0.3333328068256378, 0.13331441581249237, -0.05373970419168472,
             0.020639054477214813, -0.005704952869564295)

# expm1: polynomial for |x| <= 0.5, exp(x) - 1 beyond (the subtraction loses < 1 bit there).
EXPM1_SMALL = 0.5
# (expm1(x) - x - x**2/2) / x**3 on [-0.5, 0.5]
EXPM1_POLY = (0.1666666716337204, 0.0416666641831398, 0.008333149366080761,
              0.001388914417475462, 0.00019971694564446807, 2.481612864357885e-05)


@functools.lru_cache(maxsize=None)
def contracted() -> bool:
    """Whether the compiled loops' multiply-adds are fused on this host: LLVM contracts them
    where the CPU has FMA instructions (NumPy's CPU feature table reads the same CPUID)."""
    features = getattr(np, "_core", getattr(np, "core", None))
    table = getattr(getattr(features, "_multiarray_umath", None), "__cpu_features__", {})
    return bool(table.get("FMA3", False))


def fma(a: Expr, b, c) -> Expr:
    """``a * b + c`` where the compiled loops compute it: rounded once where LLVM contracts it
    (a multiply whose only use is the add or subtract: ``contracted()``), else twice."""
    b, c = (v if isinstance(v, Expr) else _f(v) for v in (b, c))
    return Expr("multiply_add", (a, b, c), F32) if contracted() else a * b + c


def horner(x: Expr, coefficients) -> Expr:
    """c0 + x * (c1 + x * (... + x * cn)), evaluated from the innermost product outward."""
    p = _f(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        p = fma(x, p, c)
    return p


def exp(x: Expr) -> Expr:
    xc = select(lt(x, EXP_CLAMP_HI), x, _f(EXP_CLAMP_HI))  # NaN takes the clamp; fixed last
    xc = select(gt(xc, EXP_CLAMP_LO), xc, _f(EXP_CLAMP_LO))
    k = fma(xc, LOG2E, SHIFTER)
    n_float = k - _f(SHIFTER)
    r = fma(-n_float, LN2_HI, xc)
    r = fma(-n_float, LN2_LO, r)
    y = _f(1.0) + fma(r * r, horner(r, EXP_POLY), r)
    # 2**n as two factors, each a normal float, so denormal results round only once and
    # overflow comes out as inf.
    n = bitcast(k, I32) - _i(SHIFTER_BITS)
    half = n >> _i(1)
    scale_a = bitcast((half + _i(127)) << _i(23), F32)
    scale_b = bitcast((n - half + _i(127)) << _i(23), F32)
    return select(is_nan(x), x, (y * scale_a) * scale_b)


def _log_positive(x: Expr) -> Expr:
    """log(x) for finite x > 0 (also denormals); other inputs give garbage."""
    tiny = lt(x, MIN_NORMAL)
    b = bitcast(select(tiny, x * _f(TWO23), x), I32)
    # Shift so that mantissas >= sqrt(2) carry into the exponent: m in [sqrt(1/2), sqrt(2)).
    b = b + _i(ONE_BITS - SQRT_HALF_BITS)
    e = (b >> _i(23)) - _i(127)
    e = select(tiny, e - _i(23), e)
    m = bitcast((b & _i(MANTISSA)) + _i(SQRT_HALF_BITS), F32)
    f = m - _f(1.0)
    f2 = f * f
    ef = cast(e, F32)
    tail = fma(f2 * f, horner(f, LOG_POLY), fma(-f2, 0.5, f))
    return fma(ef, LN2_HI, fma(ef, LN2_LO, tail))


def log(x: Expr) -> Expr:
    y = _log_positive(x)
    # Denormal inputs count as zero (log = -inf), as on XLA's CPU backend.
    y = select(ge(x, MIN_NORMAL), y,
               select(gt(x, -MIN_NORMAL), _f(-np.inf), _f(np.nan)))
    return select(logical_or(eq(x, np.inf), is_nan(x)), x, y)


def log1p(x: Expr) -> Expr:
    u = x + _f(1.0)
    # log(u) plus the rounding error of u, to first order: u = (1 + x)(1 - c/u).
    correction = (x - (u - _f(1.0))) / u
    y = _log_positive(u) + correction
    y = select(eq(u, 1.0), x, y)  # |x| below half an ulp of 1: log1p(x) = x (keeps -0.0)
    y = select(gt(u, 0.0), y, select(eq(u, 0.0), _f(-np.inf), _f(np.nan)))
    return select(logical_or(eq(u, np.inf), is_nan(x)), x, y)


def expm1(x: Expr) -> Expr:
    small = fma(x * x, fma(x, horner(x, EXPM1_POLY), 0.5), x)
    small = select(eq(x, 0.0), x, small)  # keeps -0.0
    big = exp(x) - _f(1.0)
    return select(le(apply("fabs", x), EXPM1_SMALL), small, big)  # NaN: big is NaN


def tanh(x: Expr) -> Expr:
    a = apply("fabs", x)
    z = x * x
    small = fma(x * z, horner(z, TANH_POLY), x)
    ac = select(lt(a, TANH_CLAMP), a, _f(TANH_CLAMP))
    big = _f(1.0) - _f(2.0) / (exp(ac + ac) + _f(1.0))
    big = select(lt(x, 0.0), -big, big)
    y = select(lt(a, TANH_SMALL), small, big)
    return select(logical_or(is_nan(x), eq(x, 0.0)), x, y)  # NaN, and keeps -0.0


def logistic(x: Expr) -> Expr:
    # exp(-x) overflows to inf for x < -88.7: 1 / inf = 0, as the exact result rounds to.
    return _f(1.0) / (exp(-x) + _f(1.0))


# StableHLO op (short name) -> its float32 expression
FUNCTIONS = {
    "exponential": exp,
    "log": log,
    "log_plus_one": log1p,
    "exponential_minus_one": expm1,
    "tanh": tanh,
    "logistic": logistic,
}


def expression(name: str, operand: Expr) -> Expr:
    """StableHLO op ``name`` on the float32 expression ``operand``."""
    return FUNCTIONS[name](operand)


# StableHLO ops whose float32 kernels the renderers compute in float64 and round once (NumPy's
# float32 loops are up to 2.9 ulp off, more than XLA's CPU backend; float64's are within 0.5
# ulp after the rounding, docs/accuracy.md). The functions above are not among them.
FLOAT32_VIA_FLOAT64 = frozenset(t.name for t in ops.ELEMENTWISE.values()
                                if t.transcendental and not t.correctly_rounded
                                and t.name not in FUNCTIONS)


def _all_float32(operand_dtypes, result_dtype) -> bool:
    return np.dtype(result_dtype) == F32 and all(np.dtype(d) == F32 for d in operand_dtypes)


def is_float32_function(name: str, operand_dtypes, result_dtype) -> bool:
    """Whether StableHLO op ``name`` on these dtypes is one of the shared float32 functions."""
    return name in FUNCTIONS and _all_float32(operand_dtypes, result_dtype)


def renderer_root(name: str, operand_dtypes, result_dtype, attributes=None) -> Expr:
    """The expression a host renderer (the NumPy rules, the elementwise VM) computes for
    StableHLO op ``name``: the semantics' own, except float32 transcendentals: the shared
    expressions above where they have one, else the op in float64 rounded once."""
    root = S.elementwise(name, operand_dtypes, result_dtype, attributes)
    if is_float32_function(name, operand_dtypes, result_dtype):
        return expression(name, root.args[0])
    if name in FLOAT32_VIA_FLOAT64 and _all_float32(operand_dtypes, result_dtype):
        wide = tuple(cast(a, D.FLOAT64) for a in root.args)
        root = cast(Expr(name, wide, D.FLOAT64, root.attr), F32)
    return root
