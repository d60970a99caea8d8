"""Ops of XLA's HLO that StableHLO spells otherwise: a partitioned program comes back from
XLA's HLO (``pjrtkit.stablehlo.partition``), and the converter writes these as ``mhlo.*``.

``mhlo.copy`` (around parameters and results), ``mhlo.erf`` (where JAX's program had the
``chlo.erf`` composite) and ``mhlo.topk`` (``chlo.top_k``) are what it emits for JAX's
programs; anything else ``mhlo.*`` has no rule and is UNIMPLEMENTED naming it. The custom call
``LayoutConstraint``, which the partitioner keeps, is the value unchanged.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.errors import InvalidArgument
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.reference.registry import REFERENCE
from pjrtkit.reference.sort import total_order_key

# erf element by element in double precision (math.erf is correctly rounded to about 1 ulp of
# a double), then rounded once to the result type: within an ulp of XLA's own approximation
# for float32 and below. Per element in Python: slow, but only partitioned programs meet it.
_erf = np.frompyfunc(math.erf, 1, 1)


@REFERENCE.register("mhlo.copy")
def copy(op, ctx):
    def copy_kernel(operand):
        return (np.array(operand, copy=True),)

    return copy_kernel


@REFERENCE.register(custom_call_rule("LayoutConstraint"))
def layout_constraint(op, ctx):
    """``with_layout_constraint`` (or a ``Format`` in ``with_sharding_constraint``) in a
    program XLA partitioned: the value unchanged (its layout is the order of the elements in
    memory; on one device ``stablehlo.one_device`` already forwarded it)."""
    if len(op.operands) != 1 or op.operands[0].type != op.results[0].type:
        raise InvalidArgument(f"{op.describe()}: a LayoutConstraint takes one value and "
                              f"returns it with its type")

    def layout_constraint_kernel(operand):
        return (operand,)

    return layout_constraint_kernel


@REFERENCE.register("mhlo.erf")
def erf(op, ctx):
    dtype = op.results[0].type.dtype

    def erf_kernel(x):
        wide = np.asarray(x, dtype=np.float64)
        return (np.asarray(_erf(wide), dtype=np.float64).astype(dtype).reshape(wide.shape),)

    return erf_kernel


@REFERENCE.register("mhlo.topk")
def topk(op, ctx):
    """The k largest along the last dimension, in descending order (IEEE total order, so NaN
    first), ties to the lower index; values and int32 indices (``largest = false``: the k
    smallest, ascending)."""
    k = int(op.attributes["k"])
    largest = bool(op.attributes.get("largest", True))
    index_dtype = op.results[1].type.dtype

    def topk_kernel(x):
        key = total_order_key(x, "TOTALORDER")
        order = np.argsort(~key if largest else key, axis=-1, kind="stable")[..., :k]
        return (np.take_along_axis(x, order, axis=-1), order.astype(index_dtype))

    return topk_kernel
