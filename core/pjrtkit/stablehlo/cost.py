"""A static cost model: flops and bytes touched by one execution of a program.

Used for PJRT_Executable_GetCostAnalysis and for the core's inline-or-worker choice. Loops
have unknown trip counts, so a program with a while loop is priced as expensive.
"""
from __future__ import annotations

import math

from pjrtkit.stablehlo.ir import Function, Op, Program, TensorType
from pjrtkit.types import CostEstimate

# Price of a loop body execution count we cannot know statically.
ASSUMED_LOOP_TRIPS = 1000

# Its own list, not pjrtkit.semantics.ops.TRANSCENDENTAL: this module loads without NumPy and
# ml_dtypes (tests/test_lowering_without_numpy.py), which the semantics' dtype facts need.
_TRANSCENDENTAL = {"stablehlo.exponential", "stablehlo.log", "stablehlo.tanh",
                   "stablehlo.logistic", "stablehlo.sine", "stablehlo.cosine",
                   "stablehlo.power", "stablehlo.exponential_minus_one",
                   "stablehlo.log_plus_one", "stablehlo.rsqrt", "stablehlo.sqrt"}


def _elements(value) -> int:
    return value.type.size if isinstance(value.type, TensorType) else 0


def _bytes(value) -> int:
    t = value.type
    return t.size * t.dtype.itemsize if isinstance(t, TensorType) else 0


def _op_cost(op: Op, program: Program, seen: set[str]) -> tuple[float, float, float]:
    out_elems = sum(_elements(v) for v in op.results)
    nbytes = float(sum(_bytes(v) for v in (*op.operands, *op.results)))
    flops = float(out_elems)
    trans = float(out_elems) if op.name in _TRANSCENDENTAL else 0.0
    if op.name == "stablehlo.dot_general":
        dims = op.attributes["dot_dimension_numbers"]
        lhs = op.operands[0].type.shape
        contract = math.prod(lhs[d] for d in dims.lhs_contracting_dimensions)
        flops = 2.0 * out_elems * contract
    elif op.name == "stablehlo.dot":
        # The legacy dot XLA's partitioner hands back: contracts lhs's last dimension.
        flops = 2.0 * out_elems * op.operands[0].type.shape[-1]
    elif op.name == "stablehlo.convolution":
        kernel = op.operands[1].type
        dims = op.attributes["dimension_numbers"]
        per_output = kernel.size / max(1, kernel.shape[dims.kernel_output_feature_dimension])
        flops = 2.0 * out_elems * per_output
    elif op.name in ("stablehlo.reduce", "stablehlo.reduce_window"):
        flops = float(sum(_elements(v) for v in op.operands))
    for region in op.regions:
        f, b, t = _block_cost(region.entry.ops, program, seen)
        trips = ASSUMED_LOOP_TRIPS if op.name == "stablehlo.while" else 1
        flops, nbytes, trans = flops + trips * f, nbytes + trips * b, trans + trips * t
    if op.name == "func.call":
        callee = program.functions.get(op.attributes.get("callee", ""))
        if callee is not None and callee.name not in seen:
            f, b, t = _function_cost(callee, program, seen | {callee.name})
            flops, nbytes, trans = flops + f, nbytes + b, trans + t
    return flops, nbytes, trans


def _block_cost(ops, program, seen):
    total = [0.0, 0.0, 0.0]
    for op in ops:
        for i, x in enumerate(_op_cost(op, program, seen)):
            total[i] += x
    return tuple(total)


def _function_cost(function: Function, program: Program, seen: set[str]):
    return _block_cost(function.body.entry.ops, program, seen)


def estimate_cost(program: Program) -> CostEstimate:
    flops, nbytes, trans = _function_cost(program.main, program, {program.entry})
    return CostEstimate(flops=flops, bytes_accessed=nbytes, transcendentals=trans)
