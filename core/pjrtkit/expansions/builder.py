"""A small builder of StableHLO ops in the plain IR, for expansions.

An expansion replaces one op by standard ops that compute the same results
(``pjrtkit.expansions``). Writing those ops as ``Op(...)`` records by hand hides the algorithm
behind result types and attribute spellings, so expansions write ``b.add(x, y)``,
``b.dot(x, m, contract=((1,), (0,)))`` or ``b.while_loop(...)`` instead: each method appends
one op (attributes spelled as the loader decodes them, ``pjrtkit.stablehlo.attributes``) and
returns its result. ``b.finish(values, op.results)`` makes the last ops produce the replaced
op's own result values, so nothing after it needs renaming.

Only the ops every backend's primitive set has are here: elementwise arithmetic, compare and
select, constants and iota, shapes (reshape, transpose, broadcast_in_dim, slice, concatenate,
dynamic_slice, dynamic_update_slice), dot_general, reduce and while.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from pjrtkit.stablehlo.attributes import DotDimensionNumbers
from pjrtkit.stablehlo.ir import Block, Op, Region, TensorType, Value, fresh_value

# Expansions compute in full precision: a backend may read DEFAULT as "reduced" (TF32, bf16).
HIGHEST = ("HIGHEST", "HIGHEST")
_COMPARE_TYPES = {"f": "FLOAT", "c": "FLOAT", "i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}
_REAL_OF = {np.dtype(np.complex64): np.dtype(np.float32),
            np.dtype(np.complex128): np.dtype(np.float64)}


def real_dtype(dtype) -> np.dtype:
    """float32 for complex64, float64 for complex128, the dtype itself otherwise."""
    dtype = np.dtype(dtype)
    return _REAL_OF.get(dtype, dtype)


def complex_dtype(dtype) -> np.dtype:
    """complex64 for float32, complex128 for float64 (and for complex ones, themselves)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return dtype
    return np.dtype(np.complex128 if dtype == np.float64 else np.complex64)


class Builder:
    """Appends ops to ``self.ops``; ``location`` is given to every op (error messages)."""

    def __init__(self, location: str = ""):
        self.ops: list[Op] = []
        self.location = location

    # -- the one primitive ----------------------------------------------------------------
    def emit(self, name: str, operands: Sequence[Value], result_types: Sequence[TensorType],
             attributes: dict | None = None, regions: Sequence[Region] = ()) -> tuple[Value, ...]:
        results = tuple(fresh_value(t) for t in result_types)
        self.ops.append(Op(name, tuple(operands), results, dict(attributes or {}),
                           tuple(regions), self.location))
        return results

    def _one(self, name, operands, shape, dtype, attributes=None) -> Value:
        return self.emit(name, operands, (TensorType(tuple(shape), np.dtype(dtype)),),
                         attributes)[0]

    # -- constants ------------------------------------------------------------------------
    def constant(self, value, dtype=None) -> Value:
        array = np.asarray(value, dtype=dtype)
        return self._one("stablehlo.constant", (), array.shape, array.dtype, {"value": array})

    def scalar(self, value, dtype) -> Value:
        return self.constant(np.asarray(value, dtype=dtype))

    def full(self, value, shape, dtype) -> Value:
        """A constant of ``shape`` filled with ``value``: a scalar broadcast (no large
        constant in the program)."""
        return self.broadcast(self.scalar(value, dtype), shape, ())

    def iota(self, shape, dtype, dimension: int) -> Value:
        return self._one("stablehlo.iota", (), shape, dtype, {"iota_dimension": dimension})

    # -- elementwise ----------------------------------------------------------------------
    def _binary(self, name, x: Value, y: Value) -> Value:
        return self._one(name, (x, y), x.type.shape, x.type.dtype)

    def add(self, x, y):
        return self._binary("stablehlo.add", x, y)

    def sub(self, x, y):
        return self._binary("stablehlo.subtract", x, y)

    def mul(self, x, y):
        return self._binary("stablehlo.multiply", x, y)

    def div(self, x, y):
        return self._binary("stablehlo.divide", x, y)

    def max(self, x, y):
        return self._binary("stablehlo.maximum", x, y)

    def min(self, x, y):
        return self._binary("stablehlo.minimum", x, y)

    def and_(self, x, y):
        return self._binary("stablehlo.and", x, y)

    def or_(self, x, y):
        return self._binary("stablehlo.or", x, y)

    def _unary(self, name, x: Value, dtype=None) -> Value:
        return self._one(name, (x,), x.type.shape, dtype or x.type.dtype)

    def neg(self, x):
        return self._unary("stablehlo.negate", x)

    def sqrt(self, x):
        return self._unary("stablehlo.sqrt", x)

    def rsqrt(self, x):
        return self._unary("stablehlo.rsqrt", x)

    def not_(self, x):
        return self._unary("stablehlo.not", x)

    def abs(self, x):
        return self._unary("stablehlo.abs", x, real_dtype(x.type.dtype))

    def is_finite(self, x):
        return self._unary("stablehlo.is_finite", x, np.bool_)

    def real(self, x):
        return self._unary("stablehlo.real", x, real_dtype(x.type.dtype))

    def imag(self, x):
        return self._unary("stablehlo.imag", x, real_dtype(x.type.dtype))

    def complex(self, re, im):
        return self._one("stablehlo.complex", (re, im), re.type.shape,
                         complex_dtype(re.type.dtype))

    def convert(self, x, dtype):
        if np.dtype(dtype) == x.type.dtype:
            return x
        return self._unary("stablehlo.convert", x, np.dtype(dtype))

    def compare(self, x, y, direction: str) -> Value:
        kind = x.type.dtype.kind
        return self._one("stablehlo.compare", (x, y), x.type.shape, np.bool_,
                         {"comparison_direction": direction,
                          "compare_type": _COMPARE_TYPES.get(kind, "FLOAT")})

    def select(self, predicate, on_true, on_false):
        return self._one("stablehlo.select", (predicate, on_true, on_false), on_true.type.shape,
                         on_true.type.dtype)

    # -- shapes ---------------------------------------------------------------------------
    def reshape(self, x, shape) -> Value:
        shape = tuple(shape)
        if shape == x.type.shape:
            return x
        return self._one("stablehlo.reshape", (x,), shape, x.type.dtype)

    def transpose(self, x, permutation) -> Value:
        permutation = tuple(permutation)
        if permutation == tuple(range(x.type.rank)):
            return x
        shape = tuple(x.type.shape[p] for p in permutation)
        return self._one("stablehlo.transpose", (x,), shape, x.type.dtype,
                         {"permutation": permutation})

    def broadcast(self, x, shape, dimensions) -> Value:
        """``broadcast_in_dim``: operand dimension i becomes result dimension dimensions[i]."""
        shape, dimensions = tuple(shape), tuple(dimensions)
        if shape == x.type.shape and dimensions == tuple(range(len(shape))):
            return x
        return self._one("stablehlo.broadcast_in_dim", (x,), shape, x.type.dtype,
                         {"broadcast_dimensions": dimensions})

    def slice(self, x, start, limit, strides=None) -> Value:
        start, limit = tuple(start), tuple(limit)
        strides = tuple(strides) if strides is not None else (1,) * len(start)
        if start == (0,) * len(start) and limit == x.type.shape and set(strides) <= {1}:
            return x
        shape = tuple(-(-(hi - lo) // s) for lo, hi, s in zip(start, limit, strides))
        return self._one("stablehlo.slice", (x,), shape, x.type.dtype,
                         {"start_indices": start, "limit_indices": limit, "strides": strides})

    def slice_along(self, x, dimension: int, start: int, limit: int, stride: int = 1) -> Value:
        """``x[..., start:limit:stride, ...]`` along ``dimension``."""
        rank = x.type.rank
        starts = [0] * rank
        limits = list(x.type.shape)
        strides = [1] * rank
        starts[dimension], limits[dimension], strides[dimension] = start, limit, stride
        return self.slice(x, starts, limits, strides)

    def concatenate(self, values: Sequence[Value], dimension: int) -> Value:
        values = list(values)
        if len(values) == 1:
            return values[0]
        shape = list(values[0].type.shape)
        shape[dimension] = sum(v.type.shape[dimension] for v in values)
        return self._one("stablehlo.concatenate", values, shape, values[0].type.dtype,
                         {"dimension": dimension})

    def dynamic_slice(self, x, starts: Sequence[Value], sizes) -> Value:
        return self._one("stablehlo.dynamic_slice", (x, *starts), sizes, x.type.dtype,
                         {"slice_sizes": tuple(sizes)})

    def dynamic_update_slice(self, x, update, starts: Sequence[Value]) -> Value:
        return self._one("stablehlo.dynamic_update_slice", (x, update, *starts), x.type.shape,
                         x.type.dtype)

    # -- contractions and reductions ------------------------------------------------------
    def dot(self, x, y, *, contract, batch=((), ()), dtype=None) -> Value:
        """``dot_general``: result dimensions are batch, then x's free, then y's free."""
        numbers = DotDimensionNumbers(tuple(batch[0]), tuple(batch[1]), tuple(contract[0]),
                                      tuple(contract[1]))
        x_free, y_free = numbers.free_dimensions(x.type.rank, y.type.rank)
        shape = ([x.type.shape[d] for d in batch[0]] + [x.type.shape[d] for d in x_free]
                 + [y.type.shape[d] for d in y_free])
        return self._one("stablehlo.dot_general", (x, y), shape, dtype or x.type.dtype,
                         {"dot_dimension_numbers": numbers, "precision_config": HIGHEST})

    def reduce(self, x, init, dimensions, combine: str = "stablehlo.add") -> Value:
        """Reduce ``x`` over ``dimensions`` with the binary op named ``combine``."""
        scalar = TensorType((), x.type.dtype)
        lhs, rhs = fresh_value(scalar), fresh_value(scalar)
        out = fresh_value(scalar)
        body = Region([Block((lhs, rhs), [
            Op(combine, (lhs, rhs), (out,), {}, (), self.location),
            Op("stablehlo.return", (out,), (), {}, (), self.location)])])
        shape = tuple(s for d, s in enumerate(x.type.shape) if d not in dimensions)
        return self.emit("stablehlo.reduce", (x, init), (TensorType(shape, x.type.dtype),),
                         {"dimensions": tuple(dimensions)}, (body,))[0]

    def sum(self, x, dimensions) -> Value:
        return self.reduce(x, self.scalar(0, x.type.dtype), dimensions)

    # -- control flow ---------------------------------------------------------------------
    def while_loop(self, carried: Sequence[Value],
                   cond: Callable[["Builder", list[Value]], Value],
                   body: Callable[["Builder", list[Value]], Sequence[Value]]) -> list[Value]:
        """``stablehlo.while`` over ``carried``: ``cond(b, values)`` returns the i1 predicate,
        ``body(b, values)`` the next values, each built with its own builder ``b`` (regions
        may read values of the enclosing block)."""
        regions = []
        for build in (cond, body):
            arguments = [fresh_value(v) for v in carried]
            inner = Builder(self.location)
            returned = build(inner, arguments)
            returned = [returned] if isinstance(returned, Value) else list(returned)
            inner.ops.append(Op("stablehlo.return", tuple(returned), (), {}, (), self.location))
            regions.append(Region([Block(tuple(arguments), inner.ops)]))
        return list(self.emit("stablehlo.while", tuple(carried), [v.type for v in carried], {},
                              regions))

    def counted_loop(self, count: int, carried: Sequence[Value],
                     body: Callable[["Builder", Value, list[Value]], Sequence[Value]]
                     ) -> list[Value]:
        """``for i in range(count)``: ``body(b, i, values)`` with ``i`` an int32 scalar."""
        index_type = np.int32
        start = self.scalar(0, index_type)

        def cond(b, values):
            return b.compare(values[0], b.scalar(count, index_type), "LT")

        def step(b, values):
            i, rest = values[0], values[1:]
            return [b.add(i, b.scalar(1, index_type)), *body(b, i, rest)]

        return self.while_loop([start, *carried], cond, step)[1:]

    # -- ending an expansion --------------------------------------------------------------
    def finish(self, values: Sequence[Value], targets: Sequence[Value]) -> list[Op]:
        """The ops, with ``values`` renamed to ``targets`` (the replaced op's results, same
        types), so the ops compute exactly those Values. A value that no op here produced
        (an operand passed through) is copied with a reshape to its own shape."""
        produced = {r.id for op in self.ops for r in op.results}
        renamed: dict[int, Value] = {}
        for value, target in zip(values, targets):
            if value.type != target.type:
                raise TypeError(f"expansion result {value} does not match {target}")
            if value.id in produced and value.id not in renamed:
                renamed[value.id] = target
            else:
                self.ops.append(Op("stablehlo.reshape", (value,), (target,), {}, (),
                                   self.location))
        return [_renamed(op, renamed) for op in self.ops] if renamed else list(self.ops)


def _renamed(op: Op, renamed: dict[int, Value]) -> Op:
    return dataclasses.replace(
        op, operands=tuple(renamed.get(v.id, v) for v in op.operands),
        results=tuple(renamed.get(v.id, v) for v in op.results),
        regions=tuple(Region([Block(block.arguments, [_renamed(inner, renamed)
                                                       for inner in block.ops])
                              for block in region.blocks]) for region in op.regions))
