"""Complex numbers onto pairs of reals, for a backend whose primitive set has no complex type.

Every complex value becomes two values of its part type (complex64 -> float32, complex128 ->
float64): the real and the imaginary part, of the same shape. The entry function's complex
arguments arrive as the backend's buffers and are reinterpreted as ``float[..., 2]``
(``stablehlo.bitcast_convert``, which takes the two parts interleaved as they are stored) and
sliced; complex results are put back the same way. Every complex op JAX emits has a rule here
(``RULES``): arithmetic and the complex functions in real arithmetic (the formulas of XLA's CPU
backend, ``xla/service/elemental_ir_emitter.cc``, where one is needed for accuracy), ``dot_general``
and ``convolution`` as four real products, ``real``/``imag``/``complex``/``convert`` as picks of
parts, structural ops and control flow per part (``legalize``).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.expansions import legalize
from pjrtkit.expansions.formats import COMPLEX_PARTS
from pjrtkit.expansions.build import OpBuilder, like, region, tensor
from pjrtkit.expansions.legalize import Parts
from pjrtkit.stablehlo.ir import Op, TensorType, Value, fresh_value

PART = COMPLEX_PARTS


class ComplexLowering:
    description = "complex numbers onto pairs of reals"

    def __init__(self, dtypes):
        """``dtypes``: the complex dtypes to rewrite (those the backend lacks)."""
        self.dtypes = frozenset(np.dtype(d) for d in dtypes)

    def lowers(self, type) -> bool:
        return isinstance(type, TensorType) and type.dtype in self.dtypes

    def part_types(self, type):
        part = TensorType(type.shape, PART[type.dtype])
        return (part, part)

    def split(self, b: OpBuilder, value: Value) -> Parts:
        shape = value.type.shape
        pairs = b.bitcast(value, tensor((*shape, 2), PART[value.type.dtype]))
        rank = len(shape)
        return tuple(b.reshape(b.slice(pairs, (0,) * rank + (k,), (*shape, k + 1)), shape)
                     for k in (0, 1))

    def join(self, b: OpBuilder, parts: Parts, type) -> Value:
        shape = type.shape
        columns = [b.reshape(p, (*shape, 1)) for p in parts]
        return b.bitcast(b.concatenate(columns, len(shape)), type)

    def rule(self, op: Op):
        return RULES.get(op.name)


# -- helpers ------------------------------------------------------------------------------------

def _zero(b, x):
    return b.constant_like(0, x)


def _unary(name):
    def build(b, x):
        return b.elementwise(f"stablehlo.{name}", x)
    return build


_exp, _log, _sqrt, _sin, _cos = (_unary(n) for n in ("exponential", "log", "sqrt", "sine",
                                                      "cosine"))
_expm1, _log1p = _unary("exponential_minus_one"), _unary("log_plus_one")


def _atan2(b, y, x):
    return b.elementwise("stablehlo.atan2", y, x)


def _real_only(ctx, op, ins):
    """(re, im) of each operand; a real operand's imaginary part is None."""
    return [(p[0], p[1]) if len(p) == 2 else (p[0], None) for p in ins]


def _multiply(b, a, c):
    (ar, ai), (cr, ci) = a, c
    return (b.subtract(b.multiply(ar, cr), b.multiply(ai, ci)),
            b.add(b.multiply(ar, ci), b.multiply(ai, cr)))


def _divide(b, a, c):
    """Smith's algorithm: the larger part of the divisor scales the other, so no square of a
    part overflows where the quotient does not."""
    (ar, ai), (cr, ci) = a, c
    wide = b.compare(b.abs(cr), b.abs(ci), "GE")
    # |cr| >= |ci|: r = ci/cr, d = cr + ci r: ((ar + ai r)/d, (ai - ar r)/d)
    r1 = b.divide(ci, cr)
    d1 = b.add(cr, b.multiply(ci, r1))
    re1 = b.divide(b.add(ar, b.multiply(ai, r1)), d1)
    im1 = b.divide(b.subtract(ai, b.multiply(ar, r1)), d1)
    # else: r = cr/ci, d = ci + cr r: ((ar r + ai)/d, (ai r - ar)/d)
    r2 = b.divide(cr, ci)
    d2 = b.add(ci, b.multiply(cr, r2))
    re2 = b.divide(b.add(b.multiply(ar, r2), ai), d2)
    im2 = b.divide(b.subtract(b.multiply(ai, r2), ar), d2)
    re, im = b.select(wide, re1, re2), b.select(wide, im1, im2)
    # A zero divisor: XLA gives the quotient of the parts by zero (inf or NaN per part).
    zero = _zero(b, cr)
    both_zero = b.and_(b.compare(cr, zero, "EQ"), b.compare(ci, zero, "EQ"))
    return (b.select(both_zero, b.divide(ar, b.abs(cr)), re),
            b.select(both_zero, b.divide(ai, b.abs(cr)), im))


def _abs(b, re, im):
    """|z| without overflow: max * sqrt(1 + (min/max)^2); NaN when a part is NaN, inf when a
    part is infinite and the other is not NaN."""
    x, y = b.abs(re), b.abs(im)
    big, small = b.maximum(x, y), b.minimum(x, y)
    ratio = b.divide(small, big)
    one = b.constant_like(1, re)
    magnitude = b.multiply(big, b.elementwise("stablehlo.sqrt",
                                              b.add(one, b.multiply(ratio, ratio))))
    zero = _zero(b, re)
    inf = b.constant_like(np.inf, re)
    magnitude = b.select(b.compare(big, zero, "EQ"), zero, magnitude)
    magnitude = b.select(b.compare(small, inf, "EQ"), inf, magnitude)
    return b.select(b.compare(big, inf, "EQ"), b.add(big, small), magnitude)


def _exp_parts(b, re, im):
    e = _exp(b, re)
    zero = _zero(b, im)
    imag = b.select(b.compare(im, zero, "EQ"), im, b.multiply(e, _sin(b, im)))
    return b.multiply(e, _cos(b, im)), imag


def _log_parts(b, re, im):
    return _log(b, _abs(b, re, im)), _atan2(b, im, re)


def _sqrt_parts(b, re, im):
    """sqrt(x + iy) = t + i y/(2t) for x >= 0 with t = sqrt((|x| + |z|)/2), and
    |y|/(2t) + i copysign(t, y) for x < 0; 0 stays 0 (with y's sign)."""
    half = b.constant_like(0.5, re)
    t = _sqrt(b, b.multiply(half, b.add(b.abs(re), _abs(b, re, im))))
    two_t = b.add(t, t)
    zero = _zero(b, re)
    other = b.divide(im, two_t)
    nonneg = b.compare(re, zero, "GE")
    real = b.select(nonneg, t, b.abs(other))
    sign_t = b.select(b.compare(im, zero, "LT"), b.negate(t), t)
    imag = b.select(nonneg, other, sign_t)
    is_zero = b.and_(b.compare(re, zero, "EQ"), b.compare(im, zero, "EQ"))
    inf = b.constant_like(np.inf, re)
    infinite_im = b.compare(b.abs(im), inf, "EQ")
    real = b.select(infinite_im, inf, b.select(is_zero, zero, real))
    imag = b.select(infinite_im, im, b.select(is_zero, im, imag))
    return real, imag


def _sinh_cosh(b, x):
    """(sinh x, cosh x), sinh from expm1 so that it keeps its precision near 0."""
    half = b.constant_like(0.5, x)
    em1 = _expm1(b, x)
    em1_neg = _expm1(b, b.negate(x))
    sinh = b.multiply(half, b.subtract(em1, em1_neg))
    cosh = b.multiply(half, b.add(_exp(b, x), _exp(b, b.negate(x))))
    return sinh, cosh


def _tanh_parts(b, re, im):
    """tanh(x + iy) = (sinh x cosh x + i sin y cos y) / (sinh^2 x + cos^2 y); past |x| = 20
    the real part is sign(x) and the imaginary part underflows to 0."""
    s, c = _sinh_cosh(b, re)
    sy, cy = _sin(b, im), _cos(b, im)
    d = b.add(b.multiply(s, s), b.multiply(cy, cy))
    real = b.divide(b.multiply(s, c), d)
    imag = b.divide(b.multiply(sy, cy), d)
    large = b.compare(b.abs(re), b.constant_like(20, re), "GT")
    one = b.constant_like(1, re)
    sign = b.select(b.compare(re, _zero(b, re), "LT"), b.negate(one), one)
    four = b.constant_like(4, re)
    product = b.multiply(sy, cy)
    tiny = b.multiply(b.multiply(four, product),
                      _exp(b, b.multiply(b.constant_like(-2, re), b.abs(re))))
    # at |x| = inf the imaginary part is a zero signed as sin(2y) (C99's ctanh), and zero
    # where that is NaN (y infinite: tan(-inf + inf j) = j, as XLA gives it)
    signed_zero = b.select(b.compare(product, product, "NE"), _zero(b, re),
                           b.multiply(_zero(b, re), product))
    infinite = b.compare(b.abs(re), b.constant_like(float("inf"), re), "EQ")
    tiny = b.select(infinite, signed_zero, tiny)
    imag = b.select(large, tiny, imag)
    # a zero imaginary part stays (tanh(x + 0j) = tanh(x) + 0j, also for NaN x)
    # past |x| = 20 the real part is sign(x), unless y is NaN or infinite and x finite (NaN,
    # as C99 and XLA)
    undefined_y = b.compare(b.abs(im), b.constant_like(float("inf"), im), "GE")  # inf
    undefined_y = b.or_(undefined_y, b.compare(im, im, "NE"))                    # or NaN
    sign = b.select(b.and_(undefined_y, b.not_(infinite)), b.constant_like(float("nan"), re),
                    sign)
    # a zero imaginary part gives +0 (tanh(x + 0j) = tanh(x) + 0j, also for NaN x, as XLA)
    return b.select(large, sign, real), b.select(b.compare(im, _zero(b, im), "EQ"),
                                                 _zero(b, im), imag)


def _sin_parts(b, re, im):
    s, c = _sinh_cosh(b, im)
    return b.multiply(_sin(b, re), c), b.multiply(_cos(b, re), s)


def _cos_parts(b, re, im):
    s, c = _sinh_cosh(b, im)
    return b.multiply(_cos(b, re), c), b.negate(b.multiply(_sin(b, re), s))


def _tan_parts(b, re, im):
    """tan z = -i tanh(i z); an infinite real part with a finite imaginary part is NaN + NaN j,
    as XLA gives it (``semantics.definitions_complex.complex_tan``)."""
    tr, ti = _tanh_parts(b, b.negate(im), re)
    inf = b.constant_like(float("inf"), re)
    undefined = b.and_(b.compare(b.abs(re), inf, "EQ"), b.compare(b.abs(im), inf, "LT"))
    nan = b.constant_like(float("nan"), re)
    return b.select(undefined, nan, ti), b.select(undefined, nan, b.negate(tr))


def _expm1_parts(b, re, im):
    """expm1(x + iy) = (expm1(x) cos y - 2 sin^2(y/2)) + i exp(x) sin y (XLA's)."""
    half_sine = _sin(b, b.multiply(im, b.constant_like(0.5, im)))
    two = b.constant_like(2, re)
    real = b.subtract(b.multiply(_expm1(b, re), _cos(b, im)),
                      b.multiply(two, b.multiply(half_sine, half_sine)))
    imag = b.select(b.compare(im, _zero(b, im), "EQ"), im,
                    b.multiply(_exp(b, re), _sin(b, im)))
    return real, imag


def _log1p_parts(b, re, im):
    """log1p(x + iy) = 0.5 log1p(x (2 + x) + y^2) + i atan2(y, 1 + x) near 0 (XLA's), else
    log|1 + z|."""
    one = b.constant_like(1, re)
    two = b.constant_like(2, re)
    x1 = b.add(re, one)
    near = _log1p(b, b.add(b.multiply(re, b.add(two, re)), b.multiply(im, im)))
    near = b.multiply(b.constant_like(0.5, re), near)
    far = _log(b, _abs(b, x1, im))
    is_far = b.compare(b.add(b.abs(re), b.abs(im)), b.constant_like(1e-2, re), "GT")
    return b.select(is_far, far, near), _atan2(b, im, x1)


def _reciprocal(b, re, im):
    one, zero = b.constant_like(1, re), _zero(b, re)
    return _divide(b, (one, zero), (re, im))


def _rsqrt_parts(b, re, im):
    return _reciprocal(b, *_sqrt_parts(b, re, im))


def _logistic_parts(b, re, im):
    er, ei = _exp_parts(b, b.negate(re), b.negate(im))
    one, zero = b.constant_like(1, re), _zero(b, re)
    return _divide(b, (one, zero), (b.add(one, er), ei))


def _sign_parts(b, re, im):
    magnitude = _abs(b, re, im)
    zero = _zero(b, re)
    is_zero = b.compare(magnitude, zero, "EQ")
    return (b.select(is_zero, re, b.divide(re, magnitude)),
            b.select(is_zero, im, b.divide(im, magnitude)))


def _power_parts(b, base, exponent):
    """a^c = exp(c log a); 0^c is 1 for c = 0, 0 for a positive real c, else NaN + NaN j
    (XLA's cases)."""
    lr, li = _log_parts(b, *base)
    pr, pi = _multiply(b, exponent, (lr, li))
    rr, ri = _exp_parts(b, pr, pi)
    ar, ai = base
    cr, ci = exponent
    zero, one = _zero(b, ar), b.constant_like(1, ar)
    nan = b.constant_like(np.nan, ar)
    base_zero = b.and_(b.compare(ar, zero, "EQ"), b.compare(ai, zero, "EQ"))
    exp_zero = b.and_(b.compare(cr, zero, "EQ"), b.compare(ci, zero, "EQ"))
    positive = b.and_(b.compare(cr, zero, "GT"), b.compare(ci, zero, "EQ"))
    zr = b.select(exp_zero, one, b.select(positive, zero, nan))
    zi = b.select(exp_zero, zero, b.select(positive, zero, nan))
    return b.select(base_zero, zr, rr), b.select(base_zero, zi, ri)


# -- rules --------------------------------------------------------------------------------------

def _complex_unary(formula):
    def rule(op, b, ins, ctx):
        return [formula(b, *ins[0])]
    return rule


def _negate(op, b, ins, ctx):
    re, im = ins[0]
    return [(b.negate(re), b.negate(im))]


def _add_sub(op, b, ins, ctx):
    (ar, ai), (cr, ci) = ins
    return [(b.elementwise(op.name, ar, cr), b.elementwise(op.name, ai, ci))]


def _binary(formula):
    def rule(op, b, ins, ctx):
        return [formula(b, ins[0], ins[1])]
    return rule


def _abs_rule(op, b, ins, ctx):
    return [(_abs(b, *ins[0]),)]


def _compare(op, b, ins, ctx):
    direction = op.attributes.get("comparison_direction")
    if direction not in ("EQ", "NE"):
        raise ctx.unimplemented(op, f"{direction} on complex numbers (they have no order)")
    (ar, ai), (cr, ci) = ins
    kind = "FLOAT"
    same_re = b.compare(ar, cr, direction, kind)
    same_im = b.compare(ai, ci, direction, kind)
    return [((b.and_ if direction == "EQ" else b.or_)(same_re, same_im),)]


def _real(op, b, ins, ctx):
    parts = ins[0]
    if len(parts) == 1:  # real of a real value: itself
        return [parts]
    return [(parts[0],)]


def _imag(op, b, ins, ctx):
    parts = ins[0]
    if len(parts) == 1:
        return [(_zero(b, parts[0]),)]
    return [(parts[1],)]


def _complex(op, b, ins, ctx):
    return [(ins[0][0], ins[1][0])]


def _convert(op, b, ins, ctx):
    source, result = op.operands[0], op.results[0]
    parts = ins[0]
    target = result.type.dtype
    if ctx.touches(result):
        part = PART[target]
        if len(parts) == 2:
            re, im = parts
            return [(_to(b, re, part), _to(b, im, part))]
        re = _to(b, parts[0], part)
        return [(re, _zero(b, re))]
    re, im = parts
    if target == np.bool_:
        zero = _zero(b, re)
        return [(b.or_(b.compare(re, zero, "NE"), b.compare(im, zero, "NE")),)]
    del source
    return [(_to(b, re, target),)]


def _to(b, value, dtype):
    return value if value.type.dtype == dtype else b.convert(value, dtype)


def _constant(op, b, ins, ctx):
    value = np.asarray(op.attributes["value"])
    part = PART[op.results[0].type.dtype]
    shape = op.results[0].type.shape
    return [tuple(b.constant(np.ascontiguousarray(p, dtype=part), part, shape)
                  for p in (value.real, value.imag))]


def _iota(op, b, ins, ctx):
    t = op.results[0].type
    re = b.one("stablehlo.iota", (), TensorType(t.shape, PART[t.dtype]), **op.attributes)
    return [(re, _zero(b, re))]


def _dot_like(op, b, ins, ctx):
    """A complex product of two operands (dot_general, convolution) as real products:
    (ar + i ai)(cr + i ci) = (ar cr - ai ci) + i (ar ci + ai cr)."""
    (ar, ai), (cr, ci) = _real_only(ctx, op, ins)
    part_type = ctx.part_types(op.results[0])[0] if ctx.touches(op.results[0]) \
        else op.results[0].type

    def product(x, y):
        return b.one(op.name, (x, y), part_type, **op.attributes)

    real = product(ar, cr)
    if ai is not None and ci is not None:
        real = b.subtract(real, product(ai, ci))
    terms = [product(x, y) for x, y in ((ar, ci), (ai, cr)) if x is not None and y is not None]
    if not terms:
        return [(real, _zero(b, real))]
    imag = terms[0] if len(terms) == 1 else b.add(*terms)
    return [(real, imag)]


def _single_add_body(op) -> bool:
    """Whether a reduce/reduce_window's body is one add of its two arguments: then each part
    is reduced on its own (one real reduction each) instead of as a variadic pair."""
    if len(op.operands) != 2 or len(op.regions) != 1:
        return False
    block = op.regions[0].entry
    if len(block.ops) != 2 or block.ops[0].name != "stablehlo.add":
        return False
    add, ret = block.ops
    return (set(v.id for v in add.operands) == {a.id for a in block.arguments}
            and ret.operands == add.results)


def _reduction(op, b, ins, ctx):
    if not _single_add_body(op):
        return legalize.flattened(op, b, ins, ctx)
    (xr, xi), (ir, ii) = ins
    outs = []
    for x, init in ((xr, ir), (xi, ii)):
        scalar = TensorType((), x.type.dtype)
        lhs, rhs = fresh_value(scalar), fresh_value(scalar)
        inner = OpBuilder(op.location)
        total = inner.add(lhs, rhs)
        body = region((lhs, rhs), inner.ops, (total,), op.location)
        result_type = like(x, shape=op.results[0].type.shape)
        outs.append(b.emit(op.name, (x, init), (result_type,), op.attributes, (body,))[0])
    return [tuple(outs)]


_UNARY = {
    "stablehlo.exponential": _exp_parts, "stablehlo.log": _log_parts,
    "stablehlo.sqrt": _sqrt_parts, "stablehlo.rsqrt": _rsqrt_parts,
    "stablehlo.tanh": _tanh_parts, "stablehlo.sine": _sin_parts,
    "stablehlo.cosine": _cos_parts, "stablehlo.tan": _tan_parts,
    "stablehlo.exponential_minus_one": _expm1_parts, "stablehlo.log_plus_one": _log1p_parts,
    "stablehlo.logistic": _logistic_parts, "stablehlo.sign": _sign_parts,
}

RULES = {
    **legalize.GENERIC_RULES,
    **{name: _complex_unary(formula) for name, formula in _UNARY.items()},
    "stablehlo.negate": _negate,
    "stablehlo.add": _add_sub,
    "stablehlo.subtract": _add_sub,
    "stablehlo.multiply": _binary(_multiply),
    "stablehlo.divide": _binary(_divide),
    "stablehlo.power": _binary(_power_parts),
    "stablehlo.abs": _abs_rule,
    "stablehlo.compare": _compare,
    "stablehlo.real": _real,
    "stablehlo.imag": _imag,
    "stablehlo.complex": _complex,
    "stablehlo.convert": _convert,
    "stablehlo.constant": _constant,
    "stablehlo.iota": _iota,
    "stablehlo.dot_general": _dot_like,
    "stablehlo.convolution": _dot_like,
    "stablehlo.reduce": _reduction,
    "stablehlo.reduce_window": _reduction,
}
