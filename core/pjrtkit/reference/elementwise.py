"""Lowering rules for StableHLO elementwise ops: XLA's semantics in NumPy.

Unary and binary arithmetic families come from the tables in ``elementwise_tables`` and are
registered in a loop; compare, select, clamp, convert, bitcast_convert, reduce_precision and
real/imag have one rule each. Every rule picks its kernel at compile time from the operand
dtype; kernels are plain NumPy calls.

Conventions shared by all kernels here:
- float16/bfloat16 arithmetic runs in float32 and rounds once per op, as XLA's CPU backend does;
- float kernels run with NumPy floating-point warnings silenced, since inf/NaN results are
  ordinary values in XLA programs;
- a rank-0 result is returned as a 0-d array, never a NumPy scalar.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pjrtkit.reference import elementwise_tables as T
from pjrtkit.reference.registry import REFERENCE

OP_PREFIX = "stablehlo."


# -- kernel construction ------------------------------------------------------------------------

# Kernels run under np.errstate(all="ignore"), entered once per execution by a backend's
# pjrtkit_execute (the cpu plugin's; the test harnesses): XLA's semantics define overflow, NaN and
# division by zero, so NumPy's floating-point warnings are noise. No per-kernel errstate.


def _via_float32(fn: Callable, dtype: np.dtype) -> Callable:
    f32 = T.FLOAT32

    def run(*args):
        return fn(*(np.asarray(a).astype(f32) for a in args)).astype(dtype)

    return run


def _make_kernel(fn: Callable, result_shape: tuple[int, ...], *,
                 scalar_safe: bool = False) -> Callable:
    """Wrap ``fn`` (arrays -> array) as a kernel returning a 1-tuple of the declared shape.

    ``scalar_safe``: ``fn`` maps a 0-d array to a 0-d array of the result dtype (e.g. a plain
    ``astype``), so rank-0 results need no detour through 1-element arrays."""
    if result_shape != () or scalar_safe:
        return lambda *args: (fn(*args),)
    if isinstance(fn, np.ufunc):
        return lambda *args: (np.asarray(fn(*args)),)
    # Multi-step functions run on 1-element arrays so that no step sees NumPy scalars (whose
    # arithmetic warns on integer wrap-around and cannot be updated in place).
    return lambda *args: (fn(*(np.reshape(a, (1,)) for a in args)).reshape(()),)


def _float_fn(op_name: str, fn: Callable, dtype: np.dtype) -> Callable:
    # NumPy's own float16 ufunc loops already compute in f32 and round once (and are much
    # faster than a round trip); bfloat16 loops and our composite functions are not/do not.
    needs_f32 = dtype == T.BFLOAT16 or (dtype == T.FLOAT16 and not isinstance(fn, np.ufunc))
    if needs_f32 and op_name not in T.FLOAT_EXACT:
        fn = _via_float32(fn, dtype)
    return fn


def _elementwise_rule(op_name: str, float_table, int_table, bool_table):
    def rule(op, ctx):
        dtype = op.operands[0].type.dtype
        if T.is_float(dtype):
            fn = float_table.get(op_name)
            if fn is not None:
                fn = _float_fn(op_name, fn, dtype)
        elif dtype == np.bool_:
            fn = bool_table.get(op_name)
        else:
            fn = int_table.get(op_name)
        if fn is None:
            raise ctx.unimplemented(op, f"no {op_name} kernel for dtype {dtype.name}")
        return _make_kernel(fn, op.results[0].type.shape)

    rule.__name__ = f"lower_{op_name}"
    return rule


_UNARY_NAMES = {*T.FLOAT_UNARY, *T.INT_UNARY, *T.BOOL_UNARY}
_BINARY_NAMES = {*T.FLOAT_BINARY, *T.INT_BINARY, *T.BOOL_BINARY}

for _name in sorted(_UNARY_NAMES):
    REFERENCE.register(OP_PREFIX + _name)(_elementwise_rule(
        _name, T.FLOAT_UNARY, T.INT_UNARY, T.BOOL_UNARY))
for _name in sorted(_BINARY_NAMES):
    REFERENCE.register(OP_PREFIX + _name)(_elementwise_rule(
        _name, T.FLOAT_BINARY, T.INT_BINARY, T.BOOL_BINARY))


# -- predicates ---------------------------------------------------------------------------------

@REFERENCE.register("stablehlo.is_finite")
def lower_is_finite(op, ctx):
    if not T.is_float(op.operands[0].type.dtype):
        raise ctx.unimplemented(op, "is_finite needs a float operand")
    return _make_kernel(np.isfinite, op.results[0].type.shape)


@REFERENCE.register("stablehlo.compare")
def lower_compare(op, ctx):
    dtype = op.operands[0].type.dtype
    direction = op.attributes["comparison_direction"]
    compare_type = op.attributes.get("compare_type", "NOTYPE")
    try:
        compare = T.COMPARISONS[direction]
    except KeyError:
        raise ctx.unimplemented(op, f"comparison_direction {direction}") from None
    shape = op.results[0].type.shape
    if compare_type == "TOTALORDER":
        if not T.is_float(dtype):
            raise ctx.unimplemented(op, f"TOTALORDER compare on {dtype.name}")
        key = T.total_order_key
        return _make_kernel(lambda a, b: compare(key(a), key(b)), shape)
    if compare_type in ("SIGNED", "UNSIGNED") and not T.is_float(dtype) and dtype != np.bool_:
        # The compare type, not the element type, says how the bits are read.
        view = T.signed_of(dtype) if compare_type == "SIGNED" else T.unsigned_of(dtype)
        if view != dtype:
            return _make_kernel(
                lambda a, b: compare(np.asarray(a).view(view), np.asarray(b).view(view)), shape)
        return _make_kernel(compare, shape)
    if compare_type == "FLOAT" and not T.is_float(dtype):
        raise ctx.unimplemented(op, f"FLOAT compare on {dtype.name}")
    if compare_type in ("SIGNED", "UNSIGNED") and T.is_float(dtype):
        raise ctx.unimplemented(op, f"{compare_type} compare on {dtype.name}")
    if compare_type not in ("FLOAT", "SIGNED", "UNSIGNED", "NOTYPE"):
        raise ctx.unimplemented(op, f"compare_type {compare_type}")
    return _make_kernel(compare, shape)


# -- selection ----------------------------------------------------------------------------------

@REFERENCE.register("stablehlo.select")
def lower_select(op, ctx):
    # A rank-0 predicate selects whole operands; np.where broadcasts it.
    return _make_kernel(np.where, op.results[0].type.shape)


@REFERENCE.register("stablehlo.clamp")
def lower_clamp(op, ctx):
    dtype = op.operands[1].type.dtype
    if T.is_float(dtype):
        maximum, minimum = T.float_maximum, T.float_minimum
    elif dtype == np.bool_:
        maximum, minimum = np.logical_or, np.logical_and
    else:
        maximum, minimum = np.maximum, np.minimum
    shape = op.results[0].type.shape

    def clamp(low, x, high):
        # min(max(x, low), high), with XLA's NaN and signed-zero rules; low/high may be rank 0.
        return minimum(maximum(x, low), high)

    # ml_dtypes' bfloat16 loops warn on NaN comparisons.
    return _make_kernel(clamp, shape)


# -- conversions --------------------------------------------------------------------------------

def _float_to_int(dtype: np.dtype, wide: np.dtype) -> Callable:
    """XLA's float->int: truncate toward zero, saturate at the type's range, NaN -> 0."""
    info = np.iinfo(dtype)
    # Powers of two are exact in every float type, so these thresholds need no rounding.
    low = wide.type(-(2.0 ** (8 * dtype.itemsize - 1)) if dtype.kind == "i" else 0.0)
    high = wide.type(2.0 ** (8 * dtype.itemsize - (1 if dtype.kind == "i" else 0)))
    lowest, highest = dtype.type(info.min), dtype.type(info.max)

    def convert(x):
        x = np.asarray(x).astype(wide, copy=False)
        under = x <= low
        over = x >= high
        out_of_range = under | over | np.isnan(x)
        y = np.where(out_of_range, wide.type(0), x).astype(dtype)
        y[under] = lowest
        y[over] = highest
        return y

    return convert


def _convert_fn(source: np.dtype, target: np.dtype) -> tuple[Callable, bool]:
    """(function, scalar_safe) for a conversion."""
    if source == target:
        return (lambda x: np.array(x, copy=True)), True
    if target == np.bool_:
        return (lambda x: np.not_equal(x, source.type(0))), False  # NaN -> True, like XLA
    if source == np.bool_ or not T.is_float(source) and not T.is_float(target):
        return (lambda x: np.asarray(x).astype(target)), True  # integers wrap (two's complement)
    if T.is_float(target):
        if source == T.BFLOAT16 or target == T.BFLOAT16:
            # XLA converts to and from bf16 only through f32 (so f64/int64 round twice).
            return (lambda x: np.asarray(x).astype(T.FLOAT32).astype(target)), True
        return (lambda x: np.asarray(x).astype(target)), True
    wide = np.dtype(np.float64) if source == np.float64 else T.FLOAT32
    return _float_to_int(target, wide), False


@REFERENCE.register("stablehlo.convert")
def lower_convert(op, ctx):
    source, target = op.operands[0].type.dtype, op.results[0].type.dtype
    fn, scalar_safe = _convert_fn(source, target)
    shape = op.results[0].type.shape
    # Out-of-range int->f16 and f64->f32 conversions overflow to inf (NumPy would warn).
    return _make_kernel(fn, shape, scalar_safe=scalar_safe)


@REFERENCE.register("stablehlo.bitcast_convert")
def lower_bitcast_convert(op, ctx):
    source, target = op.operands[0].type.dtype, op.results[0].type.dtype
    shape = op.results[0].type.shape
    if (source == np.bool_) != (target == np.bool_):
        raise ctx.unimplemented(op, f"bitcast between {source.name} and {target.name}")

    # Different widths add or drop a minor dimension holding the narrower pieces; in memory
    # (little endian, like XLA's CPU) that is exactly a NumPy view of the flat buffer.
    def bitcast(x):
        flat = np.ascontiguousarray(x).reshape(-1)
        view = flat.view(target).reshape(shape)
        view.flags.writeable = False  # shares the operand's buffer
        return view

    return lambda x: (bitcast(x),)


@REFERENCE.register("stablehlo.reduce_precision")
def lower_reduce_precision(op, ctx):
    dtype = op.operands[0].type.dtype
    exponent_bits = int(op.attributes["exponent_bits"])
    mantissa_bits = int(op.attributes["mantissa_bits"])
    if not T.is_float(dtype):
        raise ctx.unimplemented(op, f"reduce_precision on {dtype.name}")
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ctx.unimplemented(op, f"exponent_bits={exponent_bits}, "
                                    f"mantissa_bits={mantissa_bits} (need >= 1 and >= 0)")
    fn = T.reduce_precision_kernel(dtype, exponent_bits, mantissa_bits)
    return _make_kernel(fn, op.results[0].type.shape)


# -- complex parts of real operands -------------------------------------------------------------

@REFERENCE.register("stablehlo.real")
def lower_real(op, ctx):
    if not T.is_float(op.operands[0].type.dtype):
        raise ctx.unimplemented(op, "only real (float) operands are supported")
    return lambda x: (np.array(x, copy=True),)


@REFERENCE.register("stablehlo.imag")
def lower_imag(op, ctx):
    if not T.is_float(op.operands[0].type.dtype):
        raise ctx.unimplemented(op, "only real (float) operands are supported")
    result = op.results[0].type
    return lambda x: (np.zeros(result.shape, result.dtype),)
