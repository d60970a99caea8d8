"""A dot of booleans in integer arithmetic, for a backend whose matmul has no boolean form.

XLA's dot on ``pred`` is the OR over the contraction of ANDs. As integers: each operand
converted to int32 (or to the result's type when the result is not boolean), the same
``dot_general``, and for a boolean result ``!= 0``. A backend's dot rule hands such a dot to
``bool_dot_as_integers`` (``expansions.lower_by_expansion``); it has no EXPANSIONS entry, since
a backend that declares bool and dot_general implements the op by the set's rules.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.expansions.build import BOOL, like
from pjrtkit.expansions.builder import Builder
from pjrtkit.stablehlo.ir import Op, Program

INT32 = np.dtype(np.int32)


def bool_dot_as_integers(op: Op, program: Program | None = None) -> list[Op]:
    b = Builder(op.location)
    result = op.results[0]
    compute = INT32 if result.type.dtype == BOOL else result.type.dtype
    lhs, rhs = (b.convert(v, compute) if v.type.dtype == BOOL else v for v in op.operands[:2])
    product = b.one(op.name, (lhs, rhs), like(result, compute), **op.attributes)
    if result.type.dtype == BOOL:
        product = b.compare(product, b.constant(0, compute, result.type.shape), "NE")
    return b.finish([product], [result])
