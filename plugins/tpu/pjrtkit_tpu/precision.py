"""TPU numerics of float32 contractions, as a rewrite of the program before the cpu kernels run.

A TPU's matrix unit multiplies bfloat16 numbers and accumulates in float32. A float32
``dot_general``/``dot``/``convolution`` is computed from bfloat16 pieces of its operands
(JAX's documentation of ``lax.Precision``):

- ``DEFAULT``: one pass, both operands rounded to bfloat16 (``x -> bf16(x)``);
- ``HIGH``: three passes (bf16x3): ``x = hi + lo`` with ``hi = bf16(x)``, ``lo = bf16(x - hi)``;
  ``hi*hi + hi*lo + lo*hi``;
- ``HIGHEST``: six passes (bf16x6): three pieces ``hi, mid, lo``; every product of pieces
  whose ranks add up to at most 2, about float32's accuracy.

An op's precision is the higher of its two operands' (``precision_config``); the dot algorithm
presets that name these schemes (``BF16_BF16_F32``, ``_X3``, ``_X6``) are the same passes.

A dot with a vector side is not a matrix-unit op: XLA's TPU compiler rewrites it as multiply
and reduce on the vector unit, in float32, whatever its precision (``on_vector_unit``; measured
with libtpu 0.0.42.1's compile-only compile for v5e). It stays float32 here.
Products are summed smallest first, each pass accumulating in float32. Every other dtype
(bfloat16 and float16 operands, integers, complex64) is computed as the cpu plugin computes it.

The rewrite inserts ``stablehlo.reduce_precision`` (a float32 rounded to bfloat16's bits) /
``convert`` / ``subtract`` / ``add`` ops, so the cpu plugin's fusion and native loops see
ordinary StableHLO.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from pjrtkit.errors import Unimplemented
from pjrtkit.semantics.dtypes import BFLOAT16
from pjrtkit.stablehlo.attributes import OpaqueAttribute
from pjrtkit.stablehlo.ir import Op, Program, Region, TensorType, Value, fresh_value

F32 = np.dtype(np.float32)
BF16 = BFLOAT16
BF16_EXPONENT_BITS, BF16_MANTISSA_BITS = 8, 7
CONTRACTIONS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})
PASSES = {"DEFAULT": 1, "HIGH": 3, "HIGHEST": 6}
_PIECES = {1: 1, 3: 2, 6: 3}
_ALGORITHM = re.compile(r"(\w+)\s*=\s*(\w+)")


def passes_of(op: Op) -> int | None:
    """How many bfloat16 passes a TPU makes for ``op``; None unless its operands are float32,
    or float32 and bfloat16 (``jax.nn.dot_product_attention``'s mix; a bfloat16 operand is its
    own single piece): other types keep the cpu's arithmetic. Unimplemented for a dot
    algorithm a TPU lacks."""
    dtypes = [v.type.dtype if isinstance(v.type, TensorType) else None for v in op.operands[:2]]
    if F32 not in dtypes or any(d not in (F32, BF16) for d in dtypes):
        return None
    algorithm = op.attributes.get("algorithm")
    if algorithm is not None:
        fields = dict(_ALGORITHM.findall(algorithm.text)) \
            if isinstance(algorithm, OpaqueAttribute) else {}
        count = int(fields.get("num_primitive_operations", "0") or 0)
        if (fields.get("lhs_precision_type"), fields.get("rhs_precision_type"),
                fields.get("accumulation_type")) == ("bf16", "bf16", "f32") and count in _PIECES:
            return count
        if (fields.get("lhs_precision_type"), fields.get("rhs_precision_type"),
                fields.get("accumulation_type"), count) == ("f32", "f32", "f32", 1):
            return PASSES["HIGHEST"]
        raise Unimplemented(f"pjrtkit_tpu: {op.name} with dot algorithm {algorithm} "
                            f"({op.describe()}): TPUs run bf16 passes with f32 accumulation "
                            f"(BF16_BF16_F32, _X3, _X6) or F32_F32_F32")
    precision = op.attributes.get("precision_config") or ()
    return max((PASSES.get(str(p), 1) for p in precision), default=1)


# A batched matrix-vector dot stays on the matrix unit once the matrix's free and contracting
# sizes both reach this (libtpu: (8, 64, 64) @ (8, 64) is a convolution, (8, 63, 63) @ (8, 63)
# and (8, 2048, 32) @ (8, 32) are multiply + reduce).
MATRIX_UNIT_MIN_SIZE = 64


def on_vector_unit(op: Op) -> bool:
    """Whether a TPU computes the dot ``op`` on its vector unit in float32 rather than in
    bfloat16 passes: one side has free dimensions of one element in all (a vector, or an outer
    product when nothing is contracted) and no dot algorithm is named. Unbatched (or a batch of
    one) always; batched while the matrix side's free or contracting size is under
    ``MATRIX_UNIT_MIN_SIZE``."""
    if "algorithm" in op.attributes or op.name not in ("stablehlo.dot_general", "stablehlo.dot"):
        return False
    lhs, rhs = (v.type.shape for v in op.operands[:2])
    if op.name == "stablehlo.dot":  # contracts lhs's last dimension with rhs's first
        batch, contract = 1, lhs[-1]
        free = (math.prod(lhs[:-1]), math.prod(rhs[1:]))
    else:
        dims = op.attributes["dot_dimension_numbers"]
        lhs_free, rhs_free = dims.free_dimensions(len(lhs), len(rhs))
        batch = math.prod(lhs[d] for d in dims.lhs_batching_dimensions)
        contract = math.prod(lhs[d] for d in dims.lhs_contracting_dimensions)
        free = (math.prod(lhs[d] for d in lhs_free), math.prod(rhs[d] for d in rhs_free))
    if contract == 1:
        return True
    if min(free) != 1:
        return False
    return batch == 1 or min(max(free), contract) < MATRIX_UNIT_MIN_SIZE


def _unary(name: str, operand: Value, dtype) -> tuple[Op, Value]:
    result = fresh_value(TensorType(operand.type.shape, dtype))
    return Op(name, (operand,), (result,), {}), result


def _binary(name: str, lhs: Value, rhs: Value) -> tuple[Op, Value]:
    result = fresh_value(lhs.type)
    return Op(name, (lhs, rhs), (result,), {}), result


def _pieces(value: Value, count: int, ops: list[Op],
            made: dict | None = None) -> list[Value | None]:
    """``value`` as ``count`` float32 values holding bfloat16 numbers, largest first, whose sum
    is ``value`` to ``8 * count`` significant bits (None: a piece known to be zero). ``made``:
    the pieces made earlier in the same block, by (value, count), reused instead of made again
    (they precede every later op of the block)."""
    if made is not None:
        known = made.get((value, count))
        if known is None:
            known = made[(value, count)] = _pieces(value, count, ops)
        return known
    if value.type.dtype == BF16:  # exact in one piece; the others would be zeros
        op, wide = _unary("stablehlo.convert", value, F32)
        ops.append(op)
        return [wide] + [None] * (count - 1)
    pieces, rest = [], value
    for index in range(count):
        # float32 -> bfloat16 -> float32 as one float32 op: the same bits for every number
        # (XLA's reduce_precision and the two converts agree on 2M random bit patterns, NaN
        # stays NaN), and unlike a bfloat16 value it runs in the fused loops (the 8-device
        # step's weight converts took 22 of its 47 ms through ml_dtypes).
        op, piece = _unary("stablehlo.reduce_precision", rest, F32)
        op.attributes.update(exponent_bits=BF16_EXPONENT_BITS, mantissa_bits=BF16_MANTISSA_BITS)
        ops.append(op)
        pieces.append(piece)
        if index + 1 < count:
            op, rest = _binary("stablehlo.subtract", rest, piece)
            ops.append(op)
    return pieces


def tpu_contraction(op: Op, passes: int, made: dict | None = None) -> list[Op]:
    """The ops that compute ``op`` as a TPU does in ``passes`` bfloat16 passes. ``made``: the
    pieces earlier contractions of the same block made (``_pieces``), updated: an operand two
    contractions share is rounded once (a weight's forward and backward dots)."""
    count = _PIECES[passes]
    ops: list[Op] = []
    lhs = _pieces(op.operands[0], count, ops, made)
    rhs = _pieces(op.operands[1], count, ops, made)
    attributes = {k: v for k, v in op.attributes.items()
                  if k not in ("precision_config", "algorithm")}
    # Products of pieces whose ranks add up to < count, smallest (highest rank sum) first.
    pairs = sorted(((i, j) for i in range(count) for j in range(count)
                    if i + j < count and lhs[i] is not None and rhs[j] is not None),
                   key=lambda p: -(p[0] + p[1]))
    total = None
    for index, (i, j) in enumerate(pairs):
        result = op.results[0] if index == len(pairs) - 1 and len(pairs) == 1 \
            else fresh_value(op.results[0])
        ops.append(dataclasses.replace(op, operands=(lhs[i], rhs[j], *op.operands[2:]),
                                       results=(result,), attributes=dict(attributes)))
        if total is None:
            total = result
            continue
        final = index == len(pairs) - 1
        add_result = op.results[0] if final else fresh_value(op.results[0])
        ops.append(Op("stablehlo.add", (total, result), (add_result,), {}, (), op.location))
        total = add_result
    return ops


def _rewritten_region(region: Region) -> Region | None:
    """A copy of ``region`` with its float32 contractions rewritten, or None when it has none
    (the loaded program may be shared: it is never changed in place)."""
    blocks, changed = [], False
    for block in region.blocks:
        new_ops: list[Op] = []
        made: dict = {}  # pieces made in this block, by (value, count)
        for op in block.ops:
            regions = [_rewritten_region(inner) for inner in op.regions]
            if any(r is not None for r in regions):
                op = dataclasses.replace(op, regions=tuple(
                    new if new is not None else old for new, old in zip(regions, op.regions)))
                changed = True
            passes = passes_of(op) if op.name in CONTRACTIONS and not on_vector_unit(op) \
                else None
            if passes is None:
                new_ops.append(op)
                continue
            new_ops.extend(tpu_contraction(op, passes, made))
            changed = True
        blocks.append(dataclasses.replace(block, ops=new_ops))
    return Region(blocks) if changed else None


def with_tpu_precision(program: Program) -> Program:
    """``program`` with every float32 contraction computed as a TPU computes it; ``program``
    itself is returned when it has none."""
    functions = {}
    for name, function in program.functions.items():
        body = _rewritten_region(function.body)
        functions[name] = function if body is None else dataclasses.replace(function, body=body)
    if all(functions[name] is program.functions[name] for name in functions):
        return program
    return dataclasses.replace(program, functions=functions)
