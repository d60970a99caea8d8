"""``stablehlo.select_and_scatter`` (the gradient of max and min pooling) as ops every backend
has: one strided slice of the padded operand per window position, the select region applied
elementwise to pick each window's position, then per window position a pad that places the
source values it selected back at their operand positions, combined with the scatter region.

XLA's meaning, kept here: the windows slide over the operand padded by ``padding``; a padded
position is never selected (a window that is all padding selects nothing); within a window
the positions are visited in row-major order and the current pick is kept while the select
region answers true for (current, next); the result starts as ``init`` everywhere and each
source element is combined into it at its window's pick with the scatter region.

Both regions are applied elementwise to whole tensors, which needs their bodies to be
elementwise ops (compare, select, arithmetic, constants): JAX's max/min pooling gradients
and any ``lax.select_and_scatter_add`` are. A region with other ops, or a window of more than
``MAX_WINDOW_POSITIONS`` positions (one slice and one pad each), stays UNIMPLEMENTED, naming
the reason.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from pjrtkit.errors import Unimplemented
from pjrtkit.expansions.build import BOOL, like
from pjrtkit.expansions.builder import Builder
from pjrtkit.semantics.ops import traits
from pjrtkit.stablehlo.attributes import padding_pairs
from pjrtkit.stablehlo.ir import Op, Program, Region, TensorType, Value

# Window positions the expansion unrolls at most (a 2x2 pooling window has 4, 3x3 has 9).
MAX_WINDOW_POSITIONS = 64
INDEX = np.dtype(np.int32)


def elementwise_region(b: Builder, region: Region, arguments: Sequence[Value],
                       shape: Sequence[int]) -> list[Value] | None:
    """The results of ``region`` (a one-block region of rank-0 values) computed elementwise on
    ``arguments``, tensors of ``shape``; None when the body has an op that is not elementwise
    (or a region of its own). A rank-0 value from outside the region is broadcast."""
    block = region.entry
    if len(region.blocks) != 1 or len(block.arguments) != len(arguments) or not block.ops:
        return None
    env = {a.id: v for a, v in zip(block.arguments, arguments)}

    def value(v: Value) -> Value | None:
        if v.id in env:
            return env[v.id]
        if isinstance(v.type, TensorType) and v.type.rank == 0:
            env[v.id] = b.broadcast(v, tuple(shape), ())
            return env[v.id]
        return None

    for op in block.ops[:-1]:
        if op.regions or len(op.results) != 1 or op.results[0].type.rank != 0:
            return None
        result_type = like(op.results[0], shape=shape)
        if op.name == "stablehlo.constant":
            env[op.results[0].id] = b.constant(np.asarray(op.attributes["value"]).reshape(()),
                                               result_type.dtype, tuple(shape))
            continue
        if traits(op.name) is None:
            return None
        operands = [value(v) for v in op.operands]
        if any(o is None for o in operands):
            return None
        env[op.results[0].id] = b.one(op.name, operands, result_type, **op.attributes)
    returned = [value(v) for v in block.ops[-1].operands]
    return None if any(r is None for r in returned) else returned


def _pad(b: Builder, x: Value, fill: Value, low, high, interior=None) -> Value:
    rank = x.type.rank
    interior = tuple(interior or (0,) * rank)
    shape = tuple(lo + hi + (n - 1) * (i + 1) + 1 if n else lo + hi
                  for n, lo, hi, i in zip(x.type.shape, low, high, interior))
    if shape == x.type.shape:
        return x
    return b.one("stablehlo.pad", (x, fill), like(x, shape=shape),
                 edge_padding_low=tuple(low), edge_padding_high=tuple(high),
                 interior_padding=interior)


def select_and_scatter(op: Op, program: Program | None = None) -> list[Op]:
    operand, source, init = op.operands
    result = op.results[0]
    t, rank = operand.type, operand.type.rank
    attrs = op.attributes
    window = tuple(attrs.get("window_dimensions") or (1,) * rank)
    strides = tuple(attrs.get("window_strides") or (1,) * rank)
    padding = padding_pairs(attrs.get("padding"), rank)
    where = op.describe()
    positions = list(itertools.product(*(range(w) for w in window)))
    if len(positions) > MAX_WINDOW_POSITIONS:
        raise Unimplemented(f"select_and_scatter with a window of {len(positions)} positions "
                            f"(the expansion unrolls at most {MAX_WINDOW_POSITIONS}): {where}")
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, padding))
    out_shape = source.type.shape
    expected = tuple((p - w) // s + 1 if p >= w else 0
                     for p, w, s in zip(padded, window, strides))
    if expected != out_shape:
        raise Unimplemented(f"select_and_scatter: windows of the padded operand {padded} give "
                            f"{expected}, the source is {out_shape}: {where}")
    b = Builder(op.location)
    scalar_init = b.reshape(init, ()) if init.type.shape != () else init
    if t.size == 0 or source.type.size == 0:
        return b.finish([b.broadcast(scalar_init, t.shape, ())], [result])

    lows, highs = [lo for lo, _ in padding], [hi for _, hi in padding]
    has_padding = any(lows) or any(highs)
    x = _pad(b, operand, b.constant(0, t.dtype), lows, highs)
    valid = (_pad(b, b.constant(True, BOOL, t.shape), b.constant(False, BOOL), lows, highs)
             if has_padding else None)

    def window_slice(value: Value, position) -> Value:
        start = tuple(position)
        limit = tuple(k + (n - 1) * s + 1 for k, n, s in zip(position, out_shape, strides))
        return b.slice(value, start, limit, strides)

    # Each window's pick: its value, its position's number, whether it is an operand position.
    picked = window_slice(x, positions[0])
    picked_valid = window_slice(valid, positions[0]) if has_padding else None
    picked_index = b.constant(0, INDEX, out_shape)
    for number, position in enumerate(positions[1:], 1):
        candidate = window_slice(x, position)
        kept = elementwise_region(b, op.regions[0], (picked, candidate), out_shape)
        if kept is None or len(kept) != 1 or kept[0].type.dtype != BOOL:
            raise Unimplemented(f"select_and_scatter: the select region is not elementwise "
                                f"(the expansion applies it to whole windows): {where}")
        take = b.not_(kept[0])
        if has_padding:
            candidate_valid = window_slice(valid, position)
            take = b.and_(candidate_valid, b.or_(b.not_(picked_valid), take))
            picked_valid = b.or_(picked_valid, candidate_valid)
        picked = b.select(take, candidate, picked)
        picked_index = b.select(take, b.constant(number, INDEX, out_shape), picked_index)

    # Scatter: per window position, the source values whose window picked it, placed at their
    # operand positions (a pad with stride - 1 between them), combined into the result.
    total = b.broadcast(scalar_init, padded, ())
    fill_false = b.constant(False, BOOL)
    for number, position in enumerate(positions):
        chosen = b.compare(picked_index, b.constant(number, INDEX, out_shape), "EQ")
        if has_padding:
            chosen = b.and_(chosen, picked_valid)
        high = [p - (k + (n - 1) * s + 1) for p, k, n, s in
                zip(padded, position, out_shape, strides)]
        interior = [s - 1 for s in strides]
        mask = _pad(b, chosen, fill_false, position, high, interior)
        updates = _pad(b, source, scalar_init, position, high, interior)
        combined = elementwise_region(b, op.regions[1], (total, updates), padded)
        if combined is None or len(combined) != 1:
            raise Unimplemented(f"select_and_scatter: the scatter region is not elementwise "
                                f"(the expansion applies it to whole tensors): {where}")
        total = b.select(mask, combined[0], total)
    if has_padding:
        total = b.slice(total, tuple(lows), tuple(lo + n for lo, n in zip(lows, t.shape)))
    if total.type != result.type:
        total = b.convert(total, result.type.dtype)
    return b.finish([total], [result])


EXPANSIONS = {"stablehlo.select_and_scatter": select_and_scatter}
