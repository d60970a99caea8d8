"""float32 transcendentals as straight-line arithmetic, so LLVM vectorizes the loops using them.

Numba lowers ``math.exp``/``np.tanh``... on scalars to one libm call per element, which keeps a
loop scalar (measured 5-60x slower than NumPy's SIMD loops). These functions use only
arithmetic, comparisons/selects and bit casts, so a fused loop calling them (Numba inlines
``@njit`` callees when it finalizes the module) becomes one vector loop.

Method (the classic one, as in Cephes or musl): reduce the argument exactly (Cody-Waite split
of ln 2, or the float's exponent bits), evaluate a polynomial on the small remaining interval,
scale back with integer exponent arithmetic. The polynomial coefficients were fitted for this
module by iteratively reweighted least squares toward minimax relative error, in float64 on
Chebyshev nodes, then rounded to float32. All arithmetic is float32 (every constant is a
float32 global: a Python float literal would promote the expression to float64).

Special values follow IEEE/C99, as XLA's CPU results do: NaN in, NaN out; ``exp`` overflows to
inf and underflows through the denormals to 0; ``log(0) = -inf``, ``log(x<0) = NaN``;
``tanh(+-inf) = +-1``; signed zeros are kept where C keeps them. One exception, XLA's: ``log``
reads denormal inputs as zero (XLA's CPU threads run with denormals-are-zero).

Measured maximum error against correctly rounded results (``tests/test_vecmath.py`` checks
bounds): see the ``MAX_ULP`` table.

Every function is a plain ``@njit`` function of one float32 scalar returning float32, usable
from any Numba code.

These are the loops' rendering of ``pjrtkit.semantics.float32_functions`` (the expressions the
NumPy rules and the elementwise VM compute): the same operations in the same order, so that a
program computes the same bits before and after its loop lands. Loops compiled with fastmath
"contract" (every fused and native loop) fuse the multiply-adds LLVM finds here; the expressions
write those as ``multiply_add``. A change here must be made there too
(``plugins/cpu/tests/test_vecmath.py`` compares them bit for bit).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# The error bounds the tests enforce, in float32 ulps of the correctly rounded result.
MAX_ULP = {"exp": 1, "log": 2, "log1p": 2, "expm1": 2, "tanh": 2, "logistic": 3}

_F = np.float32
_I = np.int32


# -- bit casts --------------------------------------------------------------------------------

@intrinsic
def bits_of_f32(typingctx, x):
    """The IEEE bits of a float32 as int32 (an LLVM bitcast, free in vector code)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def f32_of_bits(typingctx, b):
    """The float32 whose IEEE bits are the low 32 bits of the integer ``b`` (Numba widens
    int32 arithmetic to 64 bits; the truncation is free, LLVM narrows the arithmetic back)."""
    if not isinstance(b, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0]
        if b.bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        elif b.bitwidth < 32:
            value = (builder.sext if b.signed else builder.zext)(value, ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return types.float32(b), codegen


@intrinsic
def bits_of_f64(typingctx, x):
    """The IEEE bits of a float64 as int64."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def f64_of_bits(typingctx, b):
    """The float64 whose IEEE bits are the integer ``b`` (64 bits wide)."""
    if not isinstance(b, types.Integer) or b.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(b), codegen


@intrinsic
def select(typingctx, condition, if_true, if_false):
    """``if_true if condition else if_false`` as one LLVM ``select``: no branch, both sides
    already computed. A Python conditional expression becomes branches, and LLVM then sinks an
    expensive side (an inlined exp) into its branch, which stops the loop vectorizer."""
    if not isinstance(condition, types.Boolean) or if_true != if_false:
        return None

    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])

    return if_true(condition, if_true, if_false), codegen


# -- constants ----------------------------------------------------------------------------------

_ZERO, _HALF, _ONE, _TWO = _F(0), _F(0.5), _F(1), _F(2)
_INF = _F(np.inf)
_NAN = _F(np.nan)

# exp: n = round(x / ln2) by the 1.5 * 2**23 trick (the float add rounds to nearest even), then
# r = x - n * ln2 in two steps; ln2_hi has 9 significant bits so n * ln2_hi is exact.
_SHIFTER = _F(12582912.0)
_SHIFTER_BITS = _I(0x4B400000)
_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(-2.12194440e-4)
# Beyond these the result is inf / 0 anyway; clamping keeps n in int32 range and NaN harmless.
_EXP_CLAMP_HI = _F(89.0)
_EXP_CLAMP_LO = _F(-104.0)
# (exp(r) - 1 - r) / r**2 on |r| <= 0.35
_E0, _E1, _E2 = _F(0.5), _F(0.1666666567325592), _F(0.04166628047823906)
_E3, _E4, _E5 = _F(0.008333503268659115), _F(0.001394574181176722), _F(0.00019789293583016843)

# log: x = 2**e * m with m in [sqrt(1/2), sqrt(2)); f = m - 1 is exact.
_SQRT_HALF_BITS = _I(0x3F3504F3)
_ONE_BITS = _I(0x3F800000)
_MANTISSA = _I(0x007FFFFF)
_MIN_NORMAL = _F(1.1754943508222875e-38)
_TWO23 = _F(8388608.0)
# (log1p(f) - f + f**2/2) / f**3 on [sqrt(1/2) - 1, sqrt(2) - 1]
_L0, _L1, _L2 = _F(0.3333331346511841), _F(-0.25000008940696716), _F(0.2000211924314499)
_L3, _L4, _L5 = _F(-0.16667994856834412), _F(0.142195463180542), _F(-0.12405598163604736)
_L6, _L7, _L8 = _F(0.11888211965560913), _F(-0.11675615608692169), _F(0.0674649029970169)

# tanh: odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above (no cancellation there).
_TANH_SMALL = _F(0.625)
_TANH_CLAMP = _F(10.0)  # tanh(10) rounds to 1 in float32
# (tanh(x) - x) / x**3 as a polynomial in x**2 on [0, 0.625]
_T0, _T1, _T2 = _F(-0.3333328068256378), _F(0.13331441581249237), _F(-0.05373970419168472)
_T3, _T4 = _F(0.020639054477214813), _F(-0.005704952869564295)

# expm1: polynomial for |x| <= 0.5, exp(x) - 1 beyond (the subtraction loses < 1 bit there).
_EXPM1_SMALL = _F(0.5)
# (expm1(x) - x - x**2/2) / x**3 on [-0.5, 0.5]
_X0, _X1, _X2 = _F(0.1666666716337204), _F(0.0416666641831398), _F(0.008333149366080761)
_X3, _X4, _X5 = _F(0.001388914417475462), _F(0.00019971694564446807), _F(2.481612864357885e-05)


# -- the functions ----------------------------------------------------------------------------

@njit(nogil=True, error_model="numpy")
def exp_f32(x):
    xc = select(x < _EXP_CLAMP_HI, x, _EXP_CLAMP_HI)  # NaN takes the clamp; fixed at the end
    xc = select(xc > _EXP_CLAMP_LO, xc, _EXP_CLAMP_LO)
    k = xc * _LOG2E + _SHIFTER
    n_float = k - _SHIFTER
    r = xc - n_float * _LN2_HI
    r = r - n_float * _LN2_LO
    p = _E0 + r * (_E1 + r * (_E2 + r * (_E3 + r * (_E4 + r * _E5))))
    y = _ONE + (r + r * r * p)
    # 2**n as two factors, each a normal float, so denormal results round only once and
    # overflow comes out as inf.
    n = bits_of_f32(k) - _SHIFTER_BITS
    half = n >> _I(1)
    scale_a = f32_of_bits((half + _I(127)) << _I(23))
    scale_b = f32_of_bits((n - half + _I(127)) << _I(23))
    y = (y * scale_a) * scale_b
    return select(x != x, x, y)


@njit(nogil=True, error_model="numpy")
def _log_positive_f32(x):
    """log(x) for finite x > 0 (also denormals); other inputs give garbage."""
    tiny = x < _MIN_NORMAL
    xs = select(tiny, x * _TWO23, x)
    b = bits_of_f32(xs)
    # Shift so that mantissas >= sqrt(2) carry into the exponent: m in [sqrt(1/2), sqrt(2)).
    b = b + (_ONE_BITS - _SQRT_HALF_BITS)
    e = (b >> _I(23)) - _I(127)
    e = select(tiny, e - _I(23), e)
    m = f32_of_bits((b & _MANTISSA) + _SQRT_HALF_BITS)
    f = m - _ONE
    f2 = f * f
    p = _L0 + f * (_L1 + f * (_L2 + f * (_L3 + f * (_L4 + f * (_L5 + f * (_L6 + f * (
        _L7 + f * _L8)))))))
    ef = _F(e)
    return ef * _LN2_HI + ((f - _HALF * f2 + f2 * f * p) + ef * _LN2_LO)


@njit(nogil=True, error_model="numpy")
def log_f32(x):
    y = _log_positive_f32(x)
    # Denormal inputs count as zero (log = -inf), as on XLA's CPU backend, which runs with
    # denormals-are-zero.
    y = select(x >= _MIN_NORMAL, y, select(x > -_MIN_NORMAL, -_INF, _NAN))
    return select((x == _INF) | (x != x), x, y)


@njit(nogil=True, error_model="numpy")
def log1p_f32(x):
    u = x + _ONE
    # log(u) plus the rounding error of u, to first order: u = (1 + x)(1 - c/u) .
    correction = (x - (u - _ONE)) / u
    y = _log_positive_f32(u) + correction
    y = select(u == _ONE, x, y)  # |x| below half an ulp of 1: log1p(x) = x (keeps -0.0)
    y = select(u > _ZERO, y, select(u == _ZERO, -_INF, _NAN))
    return select((u == _INF) | (x != x), x, y)


@njit(nogil=True, error_model="numpy")
def expm1_f32(x):
    small = x * x * (_HALF + x * (_X0 + x * (_X1 + x * (_X2 + x * (_X3 + x * (_X4 + x * _X5))))))
    small = select(x == _ZERO, x, x + small)  # keeps -0.0
    big = exp_f32(x) - _ONE
    return select(abs(x) <= _EXPM1_SMALL, small, big)  # NaN: big is NaN


@njit(nogil=True, error_model="numpy")
def tanh_f32(x):
    a = abs(x)
    z = x * x
    small = x + x * z * (_T0 + z * (_T1 + z * (_T2 + z * (_T3 + z * _T4))))
    ac = select(a < _TANH_CLAMP, a, _TANH_CLAMP)
    big = _ONE - _TWO / (exp_f32(ac + ac) + _ONE)
    big = select(x < _ZERO, -big, big)
    y = select(a < _TANH_SMALL, small, big)
    return select((x != x) | (x == _ZERO), x, y)  # NaN, and keeps -0.0


@njit(nogil=True, error_model="numpy")
def logistic_f32(x):
    # exp(-x) overflows to inf for x < -88.7: 1 / inf = 0, as the exact result rounds to.
    return _ONE / (exp_f32(-x) + _ONE)


@njit(nogil=True, error_model="numpy")
def rsqrt_f32(x):
    return _ONE / np.sqrt(x)


# name of the StableHLO op (without "stablehlo.") -> its float32 function here
FLOAT32_FUNCTIONS = {
    "exponential": exp_f32,
    "log": log_f32,
    "log_plus_one": log1p_f32,
    "exponential_minus_one": expm1_f32,
    "tanh": tanh_f32,
    "logistic": logistic_f32,
}
