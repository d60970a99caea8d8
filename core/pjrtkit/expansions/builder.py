"""``Builder``: the core's ``OpBuilder`` (``pjrtkit.expansions.build``) with what the fft and
linear-algebra expansions add: iota, the complex parts, transposes and dynamic slices,
``dot_general``, reductions, while loops, and ``finish``, which makes an expansion's last ops
produce the replaced op's own result values. Shape ops that would not change their operand
(a reshape to its own shape, an identity transpose) return the operand itself.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from pjrtkit.expansions.build import OpBuilder
from pjrtkit.stablehlo.attributes import DotDimensionNumbers
from pjrtkit.semantics import dtypes as D
from pjrtkit.stablehlo.ir import Block, Op, Region, TensorType, Value, fresh_value

# Expansions compute in full precision: a backend may read DEFAULT as "reduced" (TF32, bf16).
HIGHEST = ("HIGHEST", "HIGHEST")
_REAL_OF = {D.COMPLEX64: D.FLOAT32, D.COMPLEX128: D.FLOAT64}


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


class Builder(OpBuilder):
    """Ops built at one location (``ops``), as ``OpBuilder`` with the methods below."""

    def _op(self, name, operands, shape, dtype, **attributes) -> Value:
        return self.one(name, operands, TensorType(tuple(shape), np.dtype(dtype)), **attributes)

    def iota(self, shape, dtype, dimension: int) -> Value:
        return self._op("stablehlo.iota", (), shape, dtype, iota_dimension=dimension)

    # -- elementwise the base has not -----------------------------------------------------
    def sqrt(self, x):
        return self.elementwise("stablehlo.sqrt", x)

    def real(self, x):
        return self.elementwise("stablehlo.real", x, dtype=real_dtype(x.type.dtype))

    def imag(self, x):
        return self.elementwise("stablehlo.imag", x, dtype=real_dtype(x.type.dtype))

    def complex(self, re, im):
        return self.elementwise("stablehlo.complex", re, im, dtype=complex_dtype(re.type.dtype))

    def convert(self, x, dtype):
        return x if np.dtype(dtype) == x.type.dtype else super().convert(x, dtype)

    # -- shapes -----------------------------------------------------------------------------
    def reshape(self, x, shape) -> Value:
        return x if tuple(shape) == x.type.shape else super().reshape(x, tuple(shape))

    def transpose(self, x, permutation) -> Value:
        permutation = tuple(permutation)
        if permutation == tuple(range(x.type.rank)):
            return x
        return self._op("stablehlo.transpose", (x,), [x.type.shape[p] for p in permutation],
                        x.type.dtype, permutation=permutation)

    def broadcast(self, x, shape, dimensions=None) -> Value:
        """``broadcast_in_dim``: operand dimension i becomes ``dimensions[i]``."""
        if tuple(shape) == x.type.shape and (dimensions is None
                                              or tuple(dimensions) == tuple(range(len(shape)))):
            return x
        return super().broadcast(x, tuple(shape), dimensions)

    def slice_along(self, x, dimension: int, start: int, limit: int, stride: int = 1) -> Value:
        """``x[..., start:limit:stride, ...]`` along ``dimension``."""
        if (start, limit, stride) == (0, x.type.shape[dimension], 1):
            return x
        starts, limits, strides = [0] * x.type.rank, list(x.type.shape), [1] * x.type.rank
        starts[dimension], limits[dimension], strides[dimension] = start, limit, stride
        return self.slice(x, starts, limits, strides)

    def concatenate(self, values, dimension: int) -> Value:
        values = list(values)
        return values[0] if len(values) == 1 else super().concatenate(values, dimension)

    def dynamic_slice(self, x, starts: Sequence[Value], sizes) -> Value:
        return self._op("stablehlo.dynamic_slice", (x, *starts), sizes, x.type.dtype,
                        slice_sizes=tuple(sizes))

    def dynamic_update_slice(self, x, update, starts: Sequence[Value]) -> Value:
        return self.one("stablehlo.dynamic_update_slice", (x, update, *starts), x.type)

    # -- contractions and reductions --------------------------------------------------------
    def dot(self, x, y, *, contract, batch=((), ()), dtype=None) -> Value:
        """``dot_general``: result dimensions are batch, then x's free, then y's free."""
        numbers = DotDimensionNumbers(tuple(batch[0]), tuple(batch[1]), tuple(contract[0]),
                                      tuple(contract[1]))
        x_free, y_free = numbers.free_dimensions(x.type.rank, y.type.rank)
        shape = ([x.type.shape[d] for d in batch[0]] + [x.type.shape[d] for d in x_free]
                 + [y.type.shape[d] for d in y_free])
        return self._op("stablehlo.dot_general", (x, y), shape, dtype or x.type.dtype,
                        dot_dimension_numbers=numbers, precision_config=HIGHEST)

    def sum(self, x, dimensions) -> Value:
        """``x`` summed over ``dimensions`` (a reduce with an add body)."""
        scalar = TensorType((), x.type.dtype)
        lhs, rhs, out = fresh_value(scalar), fresh_value(scalar), fresh_value(scalar)
        body = Region([Block((lhs, rhs), [
            Op("stablehlo.add", (lhs, rhs), (out,), {}, (), self.location),
            Op("stablehlo.return", (out,), (), {}, (), self.location)])])
        shape = tuple(s for d, s in enumerate(x.type.shape) if d not in dimensions)
        return self.emit("stablehlo.reduce", (x, self.constant(0, x.type.dtype)),
                         (TensorType(shape, x.type.dtype),), {"dimensions": tuple(dimensions)},
                         (body,))[0]

    # -- control flow -----------------------------------------------------------------------
    def while_loop(self, carried: Sequence[Value],
                   cond: Callable[["Builder", list[Value]], Value],
                   body: Callable[["Builder", list[Value]], Sequence[Value]]) -> list[Value]:
        """``stablehlo.while`` over ``carried``: ``cond(b, values)`` returns the i1 predicate,
        ``body(b, values)`` the next values, each built with a builder of its own (regions
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

        def cond(b, values):
            return b.compare(values[0], b.constant(count, index_type), "LT")

        def step(b, values):
            i, rest = values[0], values[1:]
            return [b.add(i, b.constant(1, index_type)), *body(b, i, rest)]

        return self.while_loop([self.constant(0, index_type), *carried], cond, step)[1:]

    # -- ending an expansion ----------------------------------------------------------------
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
                self.emit_into("stablehlo.reshape", (value,), (target,))
        return [_renamed(op, renamed) for op in self.ops] if renamed else list(self.ops)


def _renamed(op: Op, renamed: dict[int, Value]) -> Op:
    return dataclasses.replace(
        op, operands=tuple(renamed.get(v.id, v) for v in op.operands),
        results=tuple(renamed.get(v.id, v) for v in op.results),
        regions=tuple(Region([Block(block.arguments, [_renamed(inner, renamed)
                                                       for inner in block.ops])
                              for block in region.blocks]) for region in op.regions))
