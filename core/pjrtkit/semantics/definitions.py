"""What each StableHLO elementwise op computes, said once, as scalar expressions.

``elementwise(name, operand_dtypes, result_dtype, attributes)`` is the expression of one op
application; ``define(node)`` rewrites one operation into simpler ones (or None when it is
primitive for its dtype). A renderer (``scalar.schedule``) calls ``define`` for every operation
it does not spell. The rules, with XLA's CPU backend as the reference:

- narrow types: an op on a type XLA computes in a wider one (``dtypes.compute_dtype``) is the
  op on operands widened exactly, its result rounded (floats, to nearest even) or wrapped
  (integers) back; bfloat16 and float8_e8m0fnu flush denormal operands and results to zero
  unless the op's traits say XLA keeps them (``ops.OpTraits``). Bit operations on int2/int4/
  uint2/uint4 read the value's own bits.
- integers: arithmetic wraps; x / 0 is -1 (all bits set), x % 0 is x, INT_MIN / -1 wraps to
  INT_MIN and INT_MIN % -1 is 0; division truncates; power squares over only the exponent's
  low 6 bits, a negative exponent gives 0 except for bases 1 and -1; shift amounts are read
  as unsigned, and amounts >= the width give 0 (left, logical) or the sign fill (arithmetic,
  which shifts the bit pattern even of unsigned types).
- floats: maximum/minimum propagate NaN (the first NaN operand) and order -0.0 below +0.0;
  sign keeps -0.0 and NaN; remainder is C fmod (the sign of the dividend); rounding ops are C's
  rint (ties to even) and round (ties away); transcendentals are C's functions.
- conversions: float -> int truncates toward zero and saturates, NaN -> 0; anything -> bool is
  "!= 0" (NaN -> true); to and from bfloat16 and the float8 types go through float32.
- bool: add is or, multiply is and, maximum is or, minimum is and.
- complex numbers (``definitions_complex``): C99 Annex G functions, with XLA's own formulas where
  it differs (expm1, log1p, rsqrt and tan at infinity, abs and sign with NaN).

The primitive operations are listed in ``scalar.SCALAR_OPS``; those a renderer may lack have
definitions in ``recipes``.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pjrtkit.semantics import definitions_complex, dtypes as D, ops, recipes
from pjrtkit.semantics.scalar import (Expr, Undefined, apply, arg, bitcast, cast, const, eq,
                                      ge, gt, is_nan, le, logical_and, logical_or, lt, ne,
                                      select)

# StableHLO ops that are one primitive operation of the scalar vocabulary (for the kinds
# listed; ``direct_primitive``).
PRIMITIVE_OF = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "negate": "negate",
    "and": "and", "or": "or", "xor": "xor", "not": "not", "floor": "floor", "ceil": "ceil",
    "round_nearest_even": "rint", "round_nearest_afz": "round", "sqrt": "sqrt", "cbrt": "cbrt",
    "exponential": "exp", "exponential_minus_one": "expm1", "log": "log", "log_plus_one": "log1p",
    "sine": "sin", "cosine": "cos", "tan": "tan", "tanh": "tanh", "atan2": "atan2",
    "divide": "divide", "remainder": "fmod", "power": "pow", "popcnt": "popcount",
    "count_leading_zeros": "clz", "abs": "fabs",
}
# ... but not on these kinds (their definitions say more)
_NOT_PRIMITIVE_ON = {
    "add": {D.BOOL_KIND}, "multiply": {D.BOOL_KIND},
    "remainder": {D.SIGNED_KIND, D.UNSIGNED_KIND}, "power": {D.SIGNED_KIND, D.UNSIGNED_KIND},
    "divide": {D.SIGNED_KIND, D.UNSIGNED_KIND, D.COMPLEX_KIND},
    "abs": {D.SIGNED_KIND, D.UNSIGNED_KIND, D.COMPLEX_KIND},
    "tan": {D.COMPLEX_KIND}, "exponential_minus_one": {D.COMPLEX_KIND},
    "log_plus_one": {D.COMPLEX_KIND},
}


def direct_primitive(name: str, dtype) -> str | None:
    """The primitive operation StableHLO op ``name`` is on ``dtype`` when its definition is
    exactly one (``"exponential"`` on float32: ``"exp"``), else None."""
    primitive = PRIMITIVE_OF.get(name)
    if primitive is None or D.facts(dtype).kind in _NOT_PRIMITIVE_ON.get(name, ()):
        return None
    return primitive


def elementwise(name: str, operand_dtypes, result_dtype, attributes=None) -> Expr:
    """The expression of StableHLO op ``name`` (short name) applied to operands of
    ``operand_dtypes`` giving ``result_dtype``; ``Undefined`` when the op is not elementwise
    or not defined on those dtypes."""
    traits = ops.ELEMENTWISE.get(name)
    dtypes = [np.dtype(d) for d in operand_dtypes]
    if traits is None:
        raise Undefined(name, dtypes[0] if dtypes else result_dtype,
                        f"{name} is not an elementwise op of pjrtkit.semantics")
    if len(dtypes) != traits.arity:
        raise Undefined(name, dtypes[0], f"{name} takes {traits.arity} operands, "
                                         f"not {len(dtypes)}")
    typed = dtypes[traits.typed_operand]
    for d in (*dtypes, np.dtype(result_dtype)):
        if not D.is_known(d):
            raise Undefined(name, d, f"{name} on {d.name}: not an element type pjrtkit knows")
    if D.facts(typed).kind not in traits.kinds:
        raise Undefined(name, typed, f"{name} is not defined on {typed.name}")
    attr = attribute_key(name, attributes) or None
    if name == "reduce_precision" and (attr is None or None in attr
                                       or not (int(attr[0]) >= 1 and int(attr[1]) >= 0)):
        raise Undefined(name, typed, f"reduce_precision needs exponent_bits >= 1 and "
                                     f"mantissa_bits >= 0 (given: {attr})")
    return Expr(name, tuple(arg(i, d) for i, d in enumerate(dtypes)), np.dtype(result_dtype),
                attr)


def attribute_key(name: str, attributes) -> tuple:
    """The values of the attributes op ``name``'s meaning depends on (``OpTraits.attributes``),
    in order, with their defaults: a hashable key for renderers' caches."""
    traits = ops.ELEMENTWISE[name]
    attributes = attributes or {}
    defaults = {"compare_type": "NOTYPE"}
    return tuple(attributes.get(n, defaults.get(n)) for n in traits.attributes)


def define(node: Expr, widen: bool = True) -> Expr | None:
    """``node`` in simpler operations, or None when it is primitive on its dtype.

    ``widen=False``: an exact op (``OpTraits.exact``) on a narrow float is defined on that
    type itself rather than through its compute type (the same values; for renderers with
    arithmetic on the narrow type)."""
    traits = ops.ELEMENTWISE.get(node.op)
    if node.op == "compare" and node.attr[1] != "NOTYPE":
        return _compare(node)  # read the bits as the compare type says, in the operand's type
    if traits is not None and node.op not in ("select", "convert") and node.args:
        typed = node.args[traits.typed_operand].dtype
        if typed in D.NARROW_INTS and node.op in _WIDTH_AWARE:
            return _WIDTH_AWARE[node.op](node, typed)
        if node.op in _OWN_TYPES:
            return _OWN_TYPES[node.op](node)
        if D.compute_dtype(typed) != typed and (widen or not traits.exact
                                                or typed in D.FLUSHES_DENORMALS):
            return _widened(node, traits, typed)
    definition = DEFINITIONS.get(node.op)
    return None if definition is None else definition(node)


# -- narrow types -------------------------------------------------------------------------------

def _widened(node: Expr, traits: ops.OpTraits, typed: np.dtype) -> Expr:
    """``node`` computed in its type's compute dtype, the result rounded or wrapped back."""
    compute = D.compute_dtype(typed)
    flush = typed in D.FLUSHES_DENORMALS and not (
        typed == D.FLOAT8_E8M0FNU and traits.e8m0_keeps_denormals)
    args = []
    for i, a in enumerate(node.args):
        if a.dtype == typed:
            a = cast(a, compute)
            if flush and i not in traits.keeps_denormal_operands:
                a = apply("flush_denormals", a)
        args.append(a)
    result_dtype = compute if node.dtype == typed else node.dtype
    inner = Expr(node.op, tuple(args), result_dtype, node.attr)
    if result_dtype != compute:
        return inner  # a predicate: nothing to round
    if flush and not traits.keeps_denormal_result:
        inner = apply("flush_denormals", inner)
    return cast(inner, node.dtype)


def _narrow_bits(x: Expr, typed: np.dtype) -> tuple[Expr, int]:
    """The ``bits``-bit pattern of a narrow integer ``x`` in an unsigned byte, and ``bits``."""
    width = D.bit_width(typed)
    return bitcast(cast(x, D.compute_dtype(typed)), D.UINT8) & ((1 << width) - 1), width


def _narrow_popcount(node: Expr, typed: np.dtype) -> Expr:
    container = D.compute_dtype(typed)
    if typed == D.INT4:
        # Measured on every value: XLA counts the bits of int4's sign-extended int8 container
        # (it widens int4, not int2, to 8 bits first), so popcnt(-1) is 8, wrapped to -8.
        bits = bitcast(cast(node.args[0], container), D.UINT8)
    else:
        bits, _ = _narrow_bits(node.args[0], typed)
    return cast(bitcast(apply("popcount", bits), container), typed)


def _narrow_clz(node: Expr, typed: np.dtype) -> Expr:
    bits, width = _narrow_bits(node.args[0], typed)
    count = apply("clz", bits) - (8 - width)
    return cast(bitcast(count, D.compute_dtype(typed)), typed)


def _narrow_shift(node: Expr, typed: np.dtype) -> Expr:
    container = D.compute_dtype(typed)
    a, width = _narrow_bits(node.args[0], typed)
    amount, _ = _narrow_bits(node.args[1], typed)
    out_of_range = ge(amount, width)
    safe = select(out_of_range, 0, amount)
    if node.op == "shift_left":
        result = select(out_of_range, 0, apply("shl", a, safe))
    elif node.op == "shift_right_logical":
        result = select(out_of_range, 0, apply("lshr", a, safe))
    else:  # the value's sign bit extended over the byte, shifted by at most width - 1
        spare = 8 - width
        signed = apply("ashr", bitcast(apply("shl", a, spare), D.INT8), spare)
        amount = bitcast(select(out_of_range, width - 1, amount), D.INT8)
        result = bitcast(apply("ashr", signed, amount), D.UINT8)
    return cast(bitcast(result, container), typed)


_WIDTH_AWARE = {"popcnt": _narrow_popcount, "count_leading_zeros": _narrow_clz,
                "shift_left": _narrow_shift, "shift_right_logical": _narrow_shift,
                "shift_right_arithmetic": _narrow_shift}


# -- the ops --------------------------------------------------------------------------------------

DEFINITIONS: dict[str, Callable[[Expr], Expr | None]] = {}


def _defines(names: str):
    def register(function):
        for name in names.split():
            DEFINITIONS[name] = function
        return function
    return register


def _kind(node: Expr, operand: int = 0) -> str:
    return D.facts(node.args[operand].dtype).kind


@_defines("add multiply maximum minimum")
def _bool_or_extremum(node):
    a, b = node.args
    kind = _kind(node)
    if kind == D.BOOL_KIND:  # i1 arithmetic as XLA does it: add saturates to "or"
        return logical_or(a, b) if node.op in ("add", "maximum") else logical_and(a, b)
    if node.op in ("add", "multiply"):
        return None
    if kind == D.FLOAT_KIND:
        return float_extremum(a, b, node.op == "maximum")
    return select((gt if node.op == "maximum" else lt)(a, b), a, b)


def float_extremum(a: Expr, b: Expr, maximum: bool) -> Expr:
    """XLA's float maximum/minimum: the first NaN operand, else the larger/smaller value, a
    tie of zeros settled by sign (maximum prefers +0.0, minimum -0.0)."""
    bigger, smaller = (a, b) if maximum else (b, a)
    # Equal values: only zeros can differ (in sign). For zeros a + b is +0 unless both are
    # -0, and -(-a - b) is -0 unless both are +0.
    tie = select(eq(a, 0), a + b if maximum else -(-a - b), a)
    return select(is_nan(a), a, select(is_nan(b), b, select(gt(a, b), bigger,
                                                           select(gt(b, a), smaller, tie))))


@_defines("divide remainder")
def _division(node):
    a, b = node.args
    kind = _kind(node)
    if kind == D.COMPLEX_KIND:
        return definitions_complex.complex_divide(a, b)
    if kind not in (D.SIGNED_KIND, D.UNSIGNED_KIND):
        return apply("fmod", a, b) if node.op == "remainder" else None
    zero = eq(b, 0)
    if kind == D.UNSIGNED_KIND:
        safe = select(zero, 1, b)
        if node.op == "divide":
            return select(zero, -1, apply("div_trunc", a, safe))
        return select(zero, a, apply("rem_trunc", a, safe))
    low, _ = D.int_range(a.dtype)
    overflow = logical_and(eq(a, low), eq(b, -1))
    safe = select(logical_or(zero, overflow), 1, b)
    if node.op == "divide":
        return select(zero, -1, select(overflow, low, apply("div_trunc", a, safe)))
    return select(zero, a, select(overflow, 0, apply("rem_trunc", a, safe)))


@_defines("power")
def _power(node):
    a, b = node.args
    if _kind(node) not in (D.SIGNED_KIND, D.UNSIGNED_KIND):
        return apply("pow", a, b)
    # Squaring over the exponent's low 6 bits (a larger one overflows every base but 0, 1, -1).
    low = b & 63
    result, base = const(1, a.dtype), a
    for bit in range(6):
        result = select(ne(low & (1 << bit), 0), result * base, result)
        if bit < 5:
            base = base * base
    negative = lt(bitcast(b, D.signed_of(b.dtype)), 0)  # even for unsigned exponents
    result = select(negative, 0, result)
    all_ones = const(-1, a.dtype)
    result = select(eq(a, all_ones), select(ne(b & 1, 0), all_ones, 1), result)
    return select(eq(a, 1), 1, result)


@_defines("shift_left shift_right_logical shift_right_arithmetic")
def _shift(node):
    a, b = node.args
    width = 8 * a.dtype.itemsize
    unsigned = D.unsigned_of(a.dtype)
    amount = bitcast(b, unsigned)  # read as unsigned: a negative amount is out of range
    out_of_range = ge(amount, width)
    if node.op == "shift_right_arithmetic":  # amounts >= width fill with the sign bit
        signed = D.signed_of(a.dtype)
        amount = bitcast(select(out_of_range, width - 1, amount), signed)
        return bitcast(apply("ashr", bitcast(a, signed), amount), a.dtype)
    safe = amount & (width - 1)  # keeps the unselected shift defined (masking: vectorizes)
    shifted = apply("shl" if node.op == "shift_left" else "lshr", bitcast(a, unsigned), safe)
    return bitcast(select(out_of_range, 0, shifted), a.dtype)


@_defines("abs")
def _abs(node):
    (a,) = node.args
    kind = _kind(node)
    if kind == D.FLOAT_KIND:
        return apply("fabs", a)
    if kind == D.UNSIGNED_KIND:
        return a
    if kind == D.SIGNED_KIND:
        return select(lt(a, 0), -a, a)  # INT_MIN stays INT_MIN (two's complement wrap)
    return definitions_complex.complex_abs(a)


@_defines("sign")
def _sign(node):
    (a,) = node.args
    kind = _kind(node)
    if kind == D.FLOAT_KIND:  # keeps -0.0 and NaN
        return select(logical_or(eq(a, 0), is_nan(a)), a, select(gt(a, 0), 1, -1, a.dtype))
    if kind == D.SIGNED_KIND:
        return select(gt(a, 0), 1, select(lt(a, 0), -1, 0, a.dtype))
    if kind == D.UNSIGNED_KIND:
        return select(gt(a, 0), 1, 0, a.dtype)
    return definitions_complex.complex_sign(a)


@_defines("rsqrt")
def _rsqrt(node):
    (a,) = node.args
    if _kind(node) == D.COMPLEX_KIND:
        return definitions_complex.complex_rsqrt(a)
    return 1 / apply("sqrt", a)


@_defines("logistic")
def _logistic(node):
    (a,) = node.args
    return 1 / (1 + apply("exp", -a)) if _kind(node) == D.COMPLEX_KIND \
        else 1 / (apply("exp", -a) + 1)


@_defines("is_finite")
def _is_finite(node):
    (a,) = node.args
    return eq(a - a, 0)  # inf - inf and NaN - NaN are NaN


@_defines("round_nearest_even round_nearest_afz floor ceil sqrt cbrt exponential "
          "exponential_minus_one log log_plus_one sine cosine tan tanh atan2 popcnt "
          "count_leading_zeros")
def _one_primitive(node):
    primitive = direct_primitive(node.op, node.args[0].dtype)
    if primitive is None:  # complex tan, expm1, log1p
        return definitions_complex.DEFINITIONS[node.op](*node.args)
    if primitive == node.op:  # sqrt, floor, ceil, tan, tanh, cbrt, atan2: primitive by name
        recipe = recipes.RECIPES.get(primitive)
        return None if recipe is None else recipe(node)
    return Expr(primitive, node.args, node.dtype)


@_defines("compare")
def _compare(node):
    direction, compare_type = node.attr
    a, b = node.args
    dtype = a.dtype
    kind = D.facts(dtype).kind
    if direction not in ("EQ", "NE", "LT", "LE", "GT", "GE"):
        raise Undefined("compare", dtype, f"comparison_direction {direction}")
    if kind == D.COMPLEX_KIND and direction not in ("EQ", "NE"):
        raise Undefined("compare", dtype, f"{direction} compare on {dtype.name} (complex "
                                          f"numbers are only equal or not)")
    natural = {"NOTYPE", {D.FLOAT_KIND: "FLOAT", D.COMPLEX_KIND: "FLOAT",
                          D.SIGNED_KIND: "SIGNED", D.UNSIGNED_KIND: "UNSIGNED"}.get(kind)}
    if kind == D.BOOL_KIND:
        natural |= {"SIGNED", "UNSIGNED"}
    if compare_type in natural:
        return None if compare_type == "NOTYPE" else Expr("compare", node.args, node.dtype,
                                                          (direction, "NOTYPE"))
    if compare_type == "TOTALORDER" and kind == D.FLOAT_KIND:
        return Expr("compare", (total_order_key(a), total_order_key(b)), node.dtype,
                    (direction, "NOTYPE"))
    if compare_type in ("SIGNED", "UNSIGNED") and kind in (D.SIGNED_KIND, D.UNSIGNED_KIND) \
            and dtype not in D.NARROW_INTS:
        # The compare type, not the element type, says how the bits are read.
        view = D.signed_of(dtype) if compare_type == "SIGNED" else D.unsigned_of(dtype)
        return Expr("compare", (bitcast(a, view), bitcast(b, view)), node.dtype,
                    (direction, "NOTYPE"))
    raise Undefined("compare", dtype, f"{compare_type} compare on {dtype.name}")


def total_order_key(x: Expr) -> Expr:
    """A signed integer ordered like float ``x`` under IEEE totalOrder (-NaN < -inf < -0 < +0
    < NaN): its bits, with the magnitude bits flipped when negative. Narrow floats are
    widened exactly first (the float8 encodings, without -0 or inf, differ)."""
    if D.compute_dtype(x.dtype) != x.dtype and x.dtype not in (D.FLOAT16, D.BFLOAT16):
        x = cast(x, D.compute_dtype(x.dtype))
    signed = D.signed_of(x.dtype)
    bits = bitcast(x, signed)
    return bits ^ ((bits >> (8 * x.dtype.itemsize - 1)) & D.int_range(signed)[1])


@_defines("clamp")
def _clamp(node):
    low, x, high = node.args  # min(max(x, low), high), with maximum's and minimum's rules
    return Expr("minimum", (Expr("maximum", (x, low), x.dtype), high), x.dtype)


@_defines("convert")
def _convert(node):
    (x,) = node.args
    source, target = x.dtype, node.dtype
    if source == target:
        return x
    if target == D.BOOL:
        return ne(x, 0)  # NaN -> true, like XLA
    if source == D.BOOL:
        return cast(x, target)
    if D.is_complex(source) and D.is_complex(target):
        return cast(x, target)
    if D.is_complex(source):  # XLA converts a complex to a real type through its real part
        part = Expr("real", (x,), D.real_part_of(source))
        return part if part.dtype == target else Expr("convert", (part,), target)
    if source in D.NARROW_INTS or source in D.FLOAT8_AND_NARROWER:
        # widened exactly first (int4 -> int8, float8 -> float16 or float32)
        return Expr("convert", (cast(x, D.compute_dtype(source)),), target)
    if D.is_int(source) and D.is_int(target):
        return cast(x, target)  # integers wrap (two's complement)
    if D.is_float(target) or D.is_complex(target):
        if source in D.ML_FLOATS or target in D.ML_FLOATS:
            # XLA converts to and from bfloat16 and the float8 types only through float32
            # (so float64 and int64 round twice).
            return cast(cast(x, D.FLOAT32), target)
        return cast(x, target)
    return _float_to_int(x, target)


def _float_to_int(x: Expr, target: np.dtype) -> Expr:
    """XLA's float -> int: truncate toward zero, saturate at the type's range, NaN -> 0."""
    x = cast(x, D.FLOAT64 if x.dtype == D.FLOAT64 else D.FLOAT32)
    width = D.bit_width(target)
    container = D.compute_dtype(target)  # int8/uint8 for int2/int4/uint2/uint4
    lowest, highest = D.int_range(target)
    signed = lowest < 0
    # Powers of two are exact in every float type, so these thresholds need no rounding.
    low = -(2.0 ** (width - 1)) if signed else 0.0
    high = 2.0 ** (width - (1 if signed else 0))
    under, over, nan = le(x, low), ge(x, high), is_nan(x)
    out_of_range = logical_or(logical_or(under, over), nan)
    in_range = cast(select(out_of_range, 0, x), container)
    result = select(nan, 0, select(under, lowest, select(over, highest, in_range)))
    return cast(result, target)


def reduce_precision(node: Expr) -> Expr:
    """x rounded to a float of ``exponent_bits`` and ``mantissa_bits``, bit for bit as XLA's
    EmitReducePrecisionIR: the mantissa rounded to nearest even, then too large an exponent
    to inf and too small (denormals included) to zero, NaN kept as it is, also with no
    mantissa bits. float8/float4 values are rounded on the bits of their compute type
    (float16, or float32 for e8m0: measured, float8_e5m2fnuz's values below float16's
    normals are float16 denormals, rounded, not flushed), other floats on their own bits."""
    (x,) = node.args
    exponent_bits, mantissa_bits = (int(a) for a in node.attr)
    if x.dtype in D.FLOAT8_AND_NARROWER:  # on the bits of the type XLA computes it in
        return _widened(node, ops.ELEMENTWISE["reduce_precision"], x.dtype)
    source_exponent, source_mantissa = D.float_layout(x.dtype)
    width = 8 * x.dtype.itemsize
    unsigned = D.unsigned_of(x.dtype)
    bits = bitcast(x, unsigned)
    out = bits
    if mantissa_bits < source_mantissa:
        shift = source_mantissa - mantissa_bits
        last_bit = 1 << shift
        bias = ((out & last_bit) >> shift) + ((last_bit >> 1) - 1)
        out = (out + bias) & (~(last_bit - 1) & ((1 << width) - 1))
    if exponent_bits < source_exponent:
        exponent_mask = ((1 << source_exponent) - 1) << source_mantissa
        source_bias = (1 << (source_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = out & exponent_mask
        signed_zero = out & (1 << (width - 1))
        out = select(gt(exponent, (source_bias + reduced_bias) << source_mantissa),
                     signed_zero | exponent_mask, out)
        out = select(le(exponent, (source_bias - reduced_bias) << source_mantissa),
                     signed_zero, out)
    return select(is_nan(x), x, bitcast(out, x.dtype))


# ops that say themselves which type they compute in (not their type's compute type)
_OWN_TYPES = {"reduce_precision": reduce_precision}

# the primitives' recipes (those named like a StableHLO op are reached through its definition)
DEFINITIONS.update({name: recipe for name, recipe in recipes.RECIPES.items()
                    if name not in DEFINITIONS})
