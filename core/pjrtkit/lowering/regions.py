"""A scalar region (a reduce body, a sort comparator) compiled to act on whole arrays.

A backend rule that applies such a region to arrays at once (a vectorized merge sort, a
reduction that combines rows) compiles a copy whose rank-0 values have the arrays' shape, so
every kernel sees exactly the types it is declared with (``PJRTKIT_CHECK_KERNELS=1`` checks it).
Core service: the reference rules and any plugin's rules use it alike.
"""
from __future__ import annotations

from pjrtkit.errors import Unimplemented
from pjrtkit.stablehlo.inline import inline_calls
from pjrtkit.stablehlo.ir import Block, Op, Region, TensorType, fresh_value


def _shaped(value_type, shape):
    if isinstance(value_type, TensorType) and value_type.shape == ():
        return TensorType(tuple(shape), value_type.dtype)
    return value_type


def vectorized_region(ctx, region, shape):
    """Compile ``region`` (scalar block arguments) to act elementwise on arrays of ``shape``.

    The region's ops are elementwise on scalars, so a copy of the region whose rank-0 values all
    have type ``shape`` computes the same function on every element at once; it is compiled by
    the ordinary rules, so their kernels see exactly the shapes they are declared with.
    Captured outer values keep their own types and broadcast. ``func.call`` ops (JAX calls
    ``@_where`` for every ``jnp.where`` in a body) are inlined first: a callee is planned for
    its declared scalar types and cannot take arrays.
    """
    block = inline_calls(region.entry, ctx.program)
    mapping = {}

    def new_value(old):
        value = fresh_value(_shaped(old.type, shape))
        mapping[old.id] = value
        return value

    args = tuple(new_value(v) for v in block.arguments)
    ops = []
    for op in block.ops:
        if op.regions or op.name == "func.call" or any(
                isinstance(v.type, TensorType) and v.type.shape != ()
                for v in (*op.operands, *op.results)):
            raise Unimplemented(f"{ctx.backend}: region op {op.describe()} is not elementwise on "
                                f"scalars, so the region can't be applied to whole arrays")
        operands = tuple(mapping.get(v.id, v) for v in op.operands)
        results = tuple(new_value(v) for v in op.results)
        ops.append(Op(op.name, operands, results, op.attributes, (), op.location))
    return ctx.compile_region(Region([Block(args, ops)]))
