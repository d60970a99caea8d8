"""Lowering rules for StableHLO elementwise ops: XLA's semantics (``pjrtkit.semantics``)
rendered as NumPy.

Every op of ``pjrtkit.semantics.ops.ELEMENTWISE`` (arithmetic, bit operations, compare, select,
clamp, convert, ...) has one rule: it asks the NumPy renderer (``elementwise_numpy``) for the
kernel of its operand and result dtypes at compile time, and an op or dtype the semantics do
not define is UNIMPLEMENTED naming both. bitcast_convert and real/imag/complex (moving bits,
not computing values) have rules of their own here.

Conventions shared by all kernels here:
- float kernels run with NumPy floating-point warnings silenced, since inf/NaN results are
  ordinary values in XLA programs;
- a rank-0 result is returned as a 0-d array, never a NumPy scalar.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pjrtkit.reference.elementwise_numpy import numpy_kernel
from pjrtkit.reference.registry import REFERENCE
from pjrtkit.semantics import dtypes as D, ops
from pjrtkit.semantics.scalar import Undefined

OP_PREFIX = "stablehlo."


# -- kernel construction ------------------------------------------------------------------------

# Kernels run under np.errstate(all="ignore"), entered once per execution by a backend's
# pjrtkit_execute (the cpu plugin's; the test harnesses): XLA's semantics define overflow, NaN and
# division by zero, so NumPy's floating-point warnings are noise. No per-kernel errstate.


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


def _elementwise_rule(op_name: str):
    def rule(op, ctx):
        operands = [v.type.dtype for v in op.operands]
        result = op.results[0].type.dtype
        try:
            fn = numpy_kernel(op_name, operands, result, op.attributes)
        except Undefined as exc:
            raise ctx.unimplemented(op, str(exc)) from None
        scalar_safe = op_name == "convert" and fn is not None and len(operands) == 1
        return _make_kernel(fn, op.results[0].type.shape, scalar_safe=scalar_safe)

    rule.__name__ = f"lower_{op_name}"
    return rule


for _name in sorted(ops.ELEMENTWISE):
    REFERENCE.register(OP_PREFIX + _name)(_elementwise_rule(_name))


def _packed_width(dtype: np.dtype) -> bool:
    """Whether a dtype's values are narrower than its one-byte NumPy storage."""
    return dtype != D.BOOL and D.bit_width(dtype) < 8


def _packed_bitcast(source: np.dtype, target: np.dtype, shape) -> Callable:
    """A bitcast where one side is narrower than a byte: XLA packs the narrower elements along
    a new minor dimension, the first in the lowest bits. ml_dtypes keeps a narrow value's bits
    in the low bits of its byte."""
    source_bits, target_bits = D.bit_width(source), D.bit_width(target)
    narrow = min(source_bits, target_bits)
    shifts = np.arange(max(source_bits, target_bits) // narrow, dtype=np.uint64) \
        * np.uint64(narrow)
    source_mask = np.uint64((1 << source_bits) - 1)
    narrow_mask = np.uint64((1 << narrow) - 1)
    source_storage = np.dtype(f"uint{source.itemsize * 8}")
    target_storage = np.dtype(f"uint{target.itemsize * 8}")
    packs = source_bits < target_bits  # (..., count) pieces -> one element, else the reverse

    def bitcast(x):
        bits = np.ascontiguousarray(x).view(source_storage).astype(np.uint64) & source_mask
        if packs:
            bits = np.bitwise_or.reduce(bits << shifts, axis=-1)
        else:
            bits = (bits[..., None] >> shifts) & narrow_mask
        return (bits.astype(target_storage).view(target).reshape(shape),)

    return bitcast


@REFERENCE.register("stablehlo.bitcast_convert")
def lower_bitcast_convert(op, ctx):
    source, target = op.operands[0].type.dtype, op.results[0].type.dtype
    shape = op.results[0].type.shape
    if (source == np.bool_) != (target == np.bool_):
        raise ctx.unimplemented(op, f"bitcast between {source.name} and {target.name}")
    if (_packed_width(source) or _packed_width(target)) and source != target:
        return _packed_bitcast(source, target, shape)

    # Different widths add or drop a minor dimension holding the narrower pieces; in memory
    # (little endian, like XLA's CPU) that is exactly a NumPy view of the flat buffer.
    def bitcast(x):
        flat = np.ascontiguousarray(x).reshape(-1)
        view = flat.view(target).reshape(shape)
        view.flags.writeable = False  # shares the operand's buffer
        return view

    return lambda x: (bitcast(x),)


# -- complex numbers and their parts ------------------------------------------------------------

@REFERENCE.register("stablehlo.real")
def lower_real(op, ctx):
    dtype = op.operands[0].type.dtype
    if D.is_complex(dtype):
        return lambda x: (np.real(x).copy(),)
    if not D.is_float(dtype):
        raise ctx.unimplemented(op, f"real of {dtype.name}")
    return lambda x: (np.array(x, copy=True),)


@REFERENCE.register("stablehlo.imag")
def lower_imag(op, ctx):
    dtype = op.operands[0].type.dtype
    if D.is_complex(dtype):
        return lambda x: (np.imag(x).copy(),)
    if not D.is_float(dtype):
        raise ctx.unimplemented(op, f"imag of {dtype.name}")
    result = op.results[0].type
    return lambda x: (np.zeros(result.shape, result.dtype),)


@REFERENCE.register("stablehlo.complex")
def lower_complex(op, ctx):
    result = op.results[0].type
    if not D.is_complex(result.dtype):
        raise ctx.unimplemented(op, f"complex of {result.dtype.name}")

    def make_complex(real, imag):
        out = np.empty(result.shape, result.dtype)
        out.real = real
        out.imag = imag
        return out

    return lambda real, imag: (make_complex(real, imag),)
