"""Building StableHLO ops in the plain-Python IR: what every expansion writes its rewrite with.

``OpBuilder`` appends ops to ``builder.ops`` and returns their result values, so a rewrite
reads like the arithmetic it stands for::

    b = OpBuilder(op.location)
    re = b.subtract(b.multiply(ar, br), b.multiply(ai, bi))

Each method makes one standard StableHLO op whose attributes are spelled as the loader decodes
them (``pjrtkit.stablehlo.attributes``), so the ops it builds are indistinguishable from ops
JAX wrote. Result types follow the operands (elementwise ops keep the first operand's type,
comparisons give ``bool``), or are given.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pjrtkit.stablehlo.ir import Block, Op, Region, TensorType, Value, fresh_value

BOOL = np.dtype(np.bool_)


def tensor(shape: Sequence[int], dtype) -> TensorType:
    return TensorType(tuple(int(d) for d in shape), np.dtype(dtype))


def like(value: Value, dtype=None, shape: Sequence[int] | None = None) -> TensorType:
    """``value``'s type with another dtype and/or shape."""
    t = value.type
    return tensor(t.shape if shape is None else shape, t.dtype if dtype is None else dtype)


class OpBuilder:
    """Ops built at one source location, in order (``ops``)."""

    def __init__(self, location: str = ""):
        self.location = location
        self.ops: list[Op] = []

    # -- the general form ------------------------------------------------------------------
    def emit(self, name: str, operands: Sequence[Value], result_types: Sequence[Any],
             attributes: dict[str, Any] | None = None,
             regions: Sequence[Region] = ()) -> tuple[Value, ...]:
        results = tuple(fresh_value(t) for t in result_types)
        self.ops.append(Op(name, tuple(operands), results, dict(attributes or {}),
                           tuple(regions), self.location))
        return results

    def emit_into(self, name: str, operands: Sequence[Value], results: Sequence[Value],
                  attributes: dict[str, Any] | None = None,
                  regions: Sequence[Region] = ()) -> None:
        """An op defining the given result values (an expansion's last op computes exactly
        the results of the op it replaces)."""
        self.ops.append(Op(name, tuple(operands), tuple(results), dict(attributes or {}),
                           tuple(regions), self.location))

    def one(self, name: str, operands: Sequence[Value], result_type: Any,
            **attributes) -> Value:
        return self.emit(name, operands, (result_type,), attributes)[0]

    def elementwise(self, name: str, *operands: Value, dtype=None) -> Value:
        """An elementwise op whose result has the first operand's shape (and dtype unless
        given)."""
        return self.one(name, operands, like(operands[0], dtype))

    # -- constants -------------------------------------------------------------------------
    def constant(self, value, dtype, shape: Sequence[int] = ()) -> Value:
        """A scalar ``value`` of ``dtype`` broadcast to ``shape``, or an array constant when
        ``value`` already has ``shape``."""
        dtype = np.dtype(dtype)
        array = np.asarray(value, dtype=dtype)
        shape = tuple(shape)
        if array.shape == shape:
            return self.one("stablehlo.constant", (), tensor(shape, dtype), value=array)
        if array.size == 1:  # a splat, however the attribute spelled it
            array = array.reshape(())
        else:
            raise ValueError(f"constant of shape {array.shape} for {shape}")
        scalar = self.one("stablehlo.constant", (), tensor((), dtype), value=array)
        if not shape:
            return scalar
        return self.broadcast(scalar, shape)

    def constant_like(self, value, like_value: Value) -> Value:
        return self.constant(value, like_value.type.dtype, like_value.type.shape)

    # -- arithmetic ------------------------------------------------------------------------
    def add(self, a, b):
        return self.elementwise("stablehlo.add", a, b)

    def subtract(self, a, b):
        return self.elementwise("stablehlo.subtract", a, b)

    def multiply(self, a, b):
        return self.elementwise("stablehlo.multiply", a, b)

    def divide(self, a, b):
        return self.elementwise("stablehlo.divide", a, b)

    def maximum(self, a, b):
        return self.elementwise("stablehlo.maximum", a, b)

    def minimum(self, a, b):
        return self.elementwise("stablehlo.minimum", a, b)

    def negate(self, a):
        return self.elementwise("stablehlo.negate", a)

    def abs(self, a):
        return self.elementwise("stablehlo.abs", a)

    def and_(self, a, b):
        return self.elementwise("stablehlo.and", a, b)

    def or_(self, a, b):
        return self.elementwise("stablehlo.or", a, b)

    def xor(self, a, b):
        return self.elementwise("stablehlo.xor", a, b)

    def not_(self, a):
        return self.elementwise("stablehlo.not", a)

    def shift_left(self, a, b):
        return self.elementwise("stablehlo.shift_left", a, b)

    def shift_right_logical(self, a, b):
        return self.elementwise("stablehlo.shift_right_logical", a, b)

    def shift_right_arithmetic(self, a, b):
        return self.elementwise("stablehlo.shift_right_arithmetic", a, b)

    def select(self, predicate, on_true, on_false):
        return self.one("stablehlo.select", (predicate, on_true, on_false),
                        on_true.type)

    def compare(self, a, b, direction: str, compare_type: str | None = None) -> Value:
        """``direction``: EQ, NE, LT, LE, GT, GE; ``compare_type`` from the operands' dtype
        unless given (FLOAT, SIGNED, UNSIGNED, TOTALORDER)."""
        if compare_type is None:
            kind = a.type.dtype.kind
            compare_type = {"f": "FLOAT", "V": "FLOAT", "i": "SIGNED", "u": "UNSIGNED",
                            "b": "UNSIGNED"}[kind]
        return self.one("stablehlo.compare", (a, b), like(a, BOOL),
                        comparison_direction=direction, compare_type=compare_type)

    def convert(self, a, dtype):
        return self.elementwise("stablehlo.convert", a, dtype=dtype)

    def bitcast(self, a, result_type: TensorType):
        return self.one("stablehlo.bitcast_convert", (a,), result_type)

    # -- shapes ----------------------------------------------------------------------------
    def reshape(self, a, shape):
        return self.one("stablehlo.reshape", (a,), like(a, shape=shape))

    def broadcast(self, a, shape, dimensions: Sequence[int] | None = None):
        """``a`` broadcast to ``shape``; its dimensions map to the trailing ones unless
        ``dimensions`` says where."""
        if dimensions is None:
            dimensions = tuple(range(len(shape) - a.type.rank, len(shape)))
        return self.one("stablehlo.broadcast_in_dim", (a,), like(a, shape=shape),
                        broadcast_dimensions=tuple(dimensions))

    def slice(self, a, start, limit, strides=None):
        strides = tuple(strides or (1,) * len(start))
        shape = tuple(-(-(hi - lo) // s) for lo, hi, s in zip(start, limit, strides))
        return self.one("stablehlo.slice", (a,), like(a, shape=shape),
                        start_indices=tuple(start), limit_indices=tuple(limit),
                        strides=strides)

    def concatenate(self, values, dimension: int):
        shape = list(values[0].type.shape)
        shape[dimension] = sum(v.type.shape[dimension] for v in values)
        return self.one("stablehlo.concatenate", tuple(values), like(values[0], shape=shape),
                        dimension=dimension)


def region(arguments: Sequence[Value], ops: list[Op], results: Sequence[Value],
           location: str = "") -> Region:
    """A one-block region: ``ops`` then ``stablehlo.return results``."""
    return Region([Block(tuple(arguments), [*ops, Op("stablehlo.return", tuple(results), (), {},
                                                     (), location)])])
