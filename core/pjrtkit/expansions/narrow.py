"""float8, float4_e2m1fn and int2/int4/uint2/uint4 onto wider types, for a backend whose
primitive set lacks them.

Each narrow value is held in its compute type (``formats.compute_dtype``: float16, float32 for
float8_e8m0fnu, int8/uint8), where it is always exactly one of the narrow type's values: as on
XLA's CPU backend, every op computes in the compute type and its result is rounded back to the
narrow type (floats: to nearest even, with the format's overflow rule; integers: wrapped).
Conversions into a narrow float round once from the source's own bits. Arguments and results
of the entry function are the backend's buffers of the narrow type, reinterpreted as uint8
(``stablehlo.bitcast_convert``) and decoded or encoded with integer ops
(``narrow_codec``).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.expansions import formats as F
from pjrtkit.expansions import legalize
from pjrtkit.expansions import narrow_codec as codec
from pjrtkit.expansions.build import OpBuilder, like
from pjrtkit.expansions.legalize import Parts, Walk
from pjrtkit.semantics import dtypes as D
from pjrtkit.stablehlo.ir import Op, TensorType, Value


class NarrowLowering:
    description = "narrow types onto their compute types"

    def __init__(self, dtypes):
        """``dtypes``: the narrow dtypes to rewrite (those the backend lacks)."""
        self.dtypes = frozenset(np.dtype(d) for d in dtypes)

    def lowers(self, type) -> bool:
        return isinstance(type, TensorType) and type.dtype in self.dtypes

    def part_types(self, type):
        return (TensorType(type.shape, F.compute_dtype(type.dtype)),)

    def split(self, b: OpBuilder, value: Value) -> Parts:
        stored = b.bitcast(value, like(value, F.UINT8))
        dtype = value.type.dtype
        if F.is_narrow_int(dtype):
            return (codec.decode_int(b, stored, dtype),)
        return (codec.decode(b, stored, F.float_format(dtype)),)

    def join(self, b: OpBuilder, parts: Parts, type) -> Value:
        dtype = type.dtype
        stored = (codec.encode_int(b, parts[0], dtype) if F.is_narrow_int(dtype)
                  else codec.encode(b, parts[0], F.float_format(dtype)))
        return b.bitcast(stored, type)

    def rule(self, op: Op):
        return RULES.get(op.name)


def narrow_to(b: OpBuilder, value: Value, dtype) -> Value:
    """A value of ``value``'s kind (held or ordinary) as the held value of narrow ``dtype``."""
    dtype = np.dtype(dtype)
    compute = F.compute_dtype(dtype)
    source = value.type.dtype
    if F.is_narrow_int(dtype):
        if source.kind == "f" or source in F.FLOAT8_AND_FLOAT4 or source == D.BFLOAT16:
            low, high = D.int_range(dtype)  # floats saturate to the range (NaN -> 0)
            wide = value if source.kind == "f" else b.convert(value, F.FLOAT32)
            clamped = b.minimum(b.maximum(wide, b.constant_like(low, wide)),
                                b.constant_like(high, wide))
            return b.convert(clamped, compute)
        container = value if source == compute else b.convert(value, compute)
        return codec.wrap_int(b, container, dtype)
    fmt = F.float_format(dtype)
    if source.kind in "iub":
        value = b.convert(value, F.FLOAT64 if source.itemsize >= 2 else F.FLOAT32)
    rounded = codec.round_float(b, value, fmt)
    return rounded if rounded.type.dtype == compute else b.convert(rounded, compute)


def _narrowed(b: OpBuilder, value: Value, result: Value) -> Value:
    """A result computed in the compute type, rounded (wrapped) to the narrow type."""
    dtype = result.type.dtype
    if F.is_narrow_int(dtype):
        return codec.wrap_int(b, value, dtype)
    return narrow_to(b, value, dtype)


def computed(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    """The op on the held values in the compute type, each narrow result rounded back."""
    operands = [parts[0] for parts in ins]
    flushes = [_flushes(v) for v in op.operands]
    operands = [codec.flush_denormals(b, v) if f else v for v, f in zip(operands, flushes)]
    if op.name in _INT_BITS_FIRST and F.is_narrow_int(op.operands[0].type.dtype):
        operands = [_masked(b, v, op.operands[0].type.dtype) for v in operands]
    types = [ctx.part_types(r)[0] for r in op.results]
    regions = tuple(ctx.lower_region(r) for r in op.regions)
    results = b.emit(op.name, operands, types, op.attributes, regions)
    outs = []
    for result, value in zip(op.results, results):
        if op.name == "stablehlo.count_leading_zeros" and F.is_narrow_int(result.type.dtype):
            value = b.subtract(value, b.constant_like(8 - F.int_bits(result.type.dtype), value))
        if _flushes(result):
            value = codec.flush_denormals(b, value)
        outs.append((_narrowed(b, value, result),) if ctx.touches(result) else (value,))
    return outs


def _flushes(value: Value) -> bool:
    return F.is_narrow_float(value.type.dtype) and F.float_format(value.type.dtype).kind == "e8m0"


def _masked(b: OpBuilder, value: Value, dtype) -> Value:
    """A held signed narrow integer with the bits above its width cleared (so that logical
    shifts, popcnt and clz see only its own bits)."""
    if value.type.dtype == F.UINT8:
        return value
    stored = b.bitcast(value, like(value, F.UINT8))
    bits = b.and_(stored, b.constant_like((1 << F.int_bits(dtype)) - 1, stored))
    return b.bitcast(bits, like(value, F.INT8))


_INT_BITS_FIRST = frozenset({"stablehlo.shift_right_logical", "stablehlo.popcnt",
                             "stablehlo.count_leading_zeros"})


def _convert(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    value, result = ins[0][0], op.results[0]
    if ctx.touches(result):
        return [(narrow_to(b, value, result.type.dtype),)]
    target = result.type.dtype
    converted = value if value.type.dtype == target else b.convert(value, target)
    if F.is_narrow_float(op.operands[0].type.dtype) and target.kind == "f":
        # XLA's conversion gives a quiet NaN of the sign, not the payload held
        converted = b.select(b.compare(value, value, "NE"), _quiet_nan(b, value, converted),
                             converted)
    return [(converted,)]


def _quiet_nan(b: OpBuilder, held: Value, like_value: Value) -> Value:
    negative = b.compare(b.bitcast(b.convert(held, F.FLOAT32), like(held, F.UINT32)),
                         b.constant(1 << 31, F.UINT32, held.type.shape), "GE")
    return b.select(negative, b.constant_like(-np.nan, like_value),
                    b.constant_like(np.nan, like_value))


def _constant(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    t = op.results[0].type
    compute = F.compute_dtype(t.dtype)
    value = np.asarray(op.attributes["value"]).astype(compute)
    return [(b.constant(value, compute, t.shape),)]


_COMPUTED = (
    "add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "maximum",
    "minimum", "negate", "abs", "sign", "exponential", "exponential_minus_one", "log",
    "log_plus_one", "logistic", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "tanh",
    "floor", "ceil", "round_nearest_afz", "round_nearest_even", "and", "or", "xor", "not",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "popcnt",
    "count_leading_zeros", "dot_general", "convolution", "iota", "clamp", "reduce_precision")

RULES = {
    **legalize.GENERIC_RULES,
    **{f"stablehlo.{name}": computed for name in _COMPUTED},
    "stablehlo.compare": legalize.per_part,
    "stablehlo.is_finite": legalize.per_part,
    "stablehlo.convert": _convert,
    "stablehlo.constant": _constant,
}
