"""Float sums in interpreted loop bodies, added in the native loop's order.

A native loop (``loops.ops.reduce``) sums from the init, element by element, the reduced
dimensions in row-major order. NumPy's reduce adds pairwise (eight partial sums from eight
elements on), so before this rule a loop body's sum of eight or more float32 elements gave
other bits while the loop ran interpreted than once its native loop had landed: one program,
other results from one call to the next (numpyro's NUTS sums eight and ten elements in its
tree building). ``control_flow`` marks the small float sums of the bodies it runs interpreted
(``mark_sequential_sums``); this rule adds those in the native loop's order and leaves every
other reduce to the reference rule.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrtkit.reference import reduce as reference
from pjrtkit.semantics import dtypes as D
from pjrtkit.stablehlo.ir import Block, Op, Region, TensorType

from pjrtkit_cpu.lowering.registry import RULES

SEQUENTIAL_SUM = "pjrtkit_cpu.sequential_sum"
# Up to this many elements per sum (one NumPy accumulate over them: a body whose native loop is
# declined runs it at every iteration).
SEQUENTIAL_SUM_MAX = 256
_BRANCHING = ("stablehlo.if", "stablehlo.case")


def _is_small_float_sum(op: Op) -> bool:
    if op.name != "stablehlo.reduce" or len(op.operands) != 2 or len(op.regions) != 1:
        return False
    x = op.operands[0].type
    if not isinstance(x, TensorType) or x.dtype not in (D.FLOAT32, D.FLOAT64):
        return False
    if reference.binary_body(op.regions[0]) != "stablehlo.add":
        return False
    length = int(np.prod([x.shape[d] for d in op.attributes["dimensions"]], dtype=np.int64))
    return 1 < length <= SEQUENTIAL_SUM_MAX


def mark_sequential_sums(block: Block) -> Block:
    """``block`` with its small float sums (and those of its if/case branches, which its
    native loop compiles too) marked ``SEQUENTIAL_SUM``; ``block`` itself when there is none.
    Inner while loops are marked by their own rule."""
    ops: list[Op] = []
    changed = False
    for op in block.ops:
        if _is_small_float_sum(op):
            op = dataclasses.replace(op, attributes={**op.attributes, SEQUENTIAL_SUM: True})
            changed = True
        elif op.name in _BRANCHING:
            blocks = [mark_sequential_sums(r.entry) if len(r.blocks) == 1 else None
                      for r in op.regions]
            if any(b is not None and b is not r.entry for b, r in zip(blocks, op.regions)):
                regions = tuple(r if b is None else Region([b])
                                for b, r in zip(blocks, op.regions))
                op = dataclasses.replace(op, regions=regions)
                changed = True
        ops.append(op)
    return Block(block.arguments, ops) if changed else block


@RULES.register("stablehlo.reduce")
def reduce_(op, ctx):
    if not op.attributes.get(SEQUENTIAL_SUM):
        return reference.reduce_rule(op, ctx)
    x_type, out_type = op.operands[0].type, op.results[0].type
    reduced = sorted(op.attributes["dimensions"])
    kept = [d for d in range(len(x_type.shape)) if d not in reduced]
    order = (*kept, *reduced)
    kept_shape = tuple(x_type.shape[d] for d in kept)
    length = int(np.prod([x_type.shape[d] for d in reduced], dtype=np.int64))
    dtype = np.dtype(out_type.dtype)

    def sequential_sum(x, init):
        # init, then each element in turn: accumulate adds left to right (reduce would pair)
        rows = np.asarray(x, dtype=dtype).transpose(order).reshape(*kept_shape, length)
        terms = np.concatenate([np.full((*kept_shape, 1), init, dtype=dtype), rows], axis=-1)
        total = np.add.accumulate(terms, axis=-1, dtype=dtype)[..., -1]
        return (total.reshape(out_type.shape),)

    return sequential_sum
