"""Reductions: reduce, reduce_window and sort with any body, and the core's ApproxTopK rule.

A body that is one binary op of its two arguments runs as that NumPy ufunc; any other is folded
with the region's own plan (``vectorized_region``: compiled once for whole accumulators). Sort
takes any comparator, stably.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.lowering.approx_top_k import approx_top_k
from pjrtkit.lowering.regions import vectorized_region
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.stablehlo.attributes import padding_pairs

from .elementwise import BOOL_OPS, FLOAT_OPS, INT_OPS
from .payloads import RULES, Tensor, kernel, result_type
from .shape import pad_array


def _single_ufunc(region):
    block = region.entry
    ops = [o for o in block.ops if o.name != "stablehlo.return"]
    if len(ops) == 1 and len(block.arguments) == 2 and \
            set(ops[0].operands) == set(block.arguments):
        kind = block.arguments[0].type.dtype.kind
        table = BOOL_OPS if kind == "b" else {**INT_OPS, **FLOAT_OPS} if kind in "iu" \
            else FLOAT_OPS
        fn = table.get(ops[0].name.removeprefix("stablehlo."))
        return fn if isinstance(fn, np.ufunc) else None
    return None


def _fold(body, accumulators, columns, extra=()):
    """Fold ``columns`` (each a list over the reduced positions) into the accumulators with the
    region's plan, in order. ``extra``: the values the region reads from outside."""
    for values in zip(*columns):
        accumulators = [t.data for t in body(*(Tensor(a) for a in accumulators),
                                             *(Tensor(v) for v in values), *extra)]
    return accumulators


@RULES.register("stablehlo.reduce")
def reduce(op, ctx):
    dims = tuple(op.attributes["dimensions"])
    count = len(op.results)
    ufunc = _single_ufunc(op.regions[0]) if count == 1 else None
    out_types = [r.type for r in op.results]
    # the body is applied to whole accumulators at once: compiled for their shape
    body = None if ufunc else vectorized_region(ctx, op.regions[0], out_types[0].shape)

    def run(*arrays):
        xs, inits, extra = arrays[:count], arrays[count:2 * count], arrays[2 * count:]
        if ufunc is not None:
            return (ufunc(inits[0], ufunc.reduce(xs[0], axis=dims)).astype(out_types[0].dtype),)
        kept = [d for d in range(xs[0].ndim) if d not in dims]
        moved = [np.transpose(x, kept + list(dims)).reshape(*out_types[0].shape, -1) for x in xs]
        accumulators = [np.broadcast_to(i, t.shape).copy() for i, t in zip(inits, out_types)]
        columns = [[m[..., j] for j in range(m.shape[-1])] for m in moved]
        return tuple(_fold(body, accumulators, columns, [Tensor(e) for e in extra]))
    return kernel(run)


@RULES.register("stablehlo.reduce_window")
def reduce_window(op, ctx):
    a, count = op.attributes, len(op.results)
    rank = op.operands[0].type.rank
    window = tuple(a.get("window_dimensions") or (1,) * rank)
    strides = tuple(a.get("window_strides") or (1,) * rank)
    base = tuple(a.get("base_dilations") or (1,) * rank)
    dilation = tuple(a.get("window_dilations") or (1,) * rank)
    padding = padding_pairs(a.get("padding"), rank)
    ufunc = _single_ufunc(op.regions[0]) if count == 1 else None
    out_shape = result_type(op).shape
    body = None if ufunc else vectorized_region(ctx, op.regions[0], out_shape)

    def windows(x, init):
        """The strided views of ``x`` (dilated and padded with ``init``), one per window
        position."""
        padded = pad_array(x, init, [lo for lo, _ in padding], [hi for _, hi in padding],
                           [b - 1 for b in base])
        for position in np.ndindex(*window):
            yield padded[tuple(slice(p * d, p * d + (o - 1) * s + 1, s) for p, d, o, s in
                               zip(position, dilation, out_shape, strides))]

    def run(*arrays):
        xs, inits, extra = arrays[:count], arrays[count:2 * count], arrays[2 * count:]
        if ufunc is not None:
            acc = np.full(out_shape, inits[0], xs[0].dtype)
            for view in windows(xs[0], inits[0]):
                acc = ufunc(acc, view)
            return (acc.astype(xs[0].dtype),)
        accumulators = [np.full(out_shape, i, x.dtype) for x, i in zip(xs, inits)]
        columns = [list(windows(x, i)) for x, i in zip(xs, inits)]
        return tuple(_fold(body, accumulators, columns, [Tensor(e) for e in extra]))
    return kernel(run)


@RULES.register("stablehlo.sort")
def sort(op, ctx):
    """Any comparator, stably: a bottom-up merge sort whose merges place each element by a
    binary search in the other run, every comparison of a pass made at once over arrays."""
    dim, count = op.attributes["dimension"], len(op.operands)
    shape = op.operands[0].type.shape
    n = shape[dim]
    # the comparator is applied to (rows, n) arrays at once: compiled for that shape
    less = vectorized_region(ctx, op.regions[0], (math.prod(shape) // n if n else 0, n))

    def run(*arrays):
        xs, extra = arrays[:count], [Tensor(c) for c in arrays[count:]]
        rows = [np.moveaxis(x, dim, -1) for x in xs]
        shape = rows[0].shape
        n = shape[-1]
        rows = [r.reshape(-1, n) for r in rows]
        pos = np.broadcast_to(np.arange(n), rows[0].shape)
        width = 1
        while width < n:
            pair = (pos // (2 * width)) * 2 * width
            left = pos - pair < width
            own = np.where(left, pair, pair + width)
            other = np.where(left, pair + width, pair)
            lo = np.zeros(pos.shape, np.int64)
            hi = np.clip(np.minimum(other + width, n) - other, 0, None)
            while (lo < hi).any():
                mid = (lo + hi) // 2
                probe = np.minimum(other + mid, n - 1)
                probed = [np.take_along_axis(r, probe, -1) for r in rows]
                before = less(*(Tensor(a) for p, r in zip(probed, rows) for a in (p, r)),
                              *extra)[0].data  # the probed element sorts before this one
                after = less(*(Tensor(a) for p, r in zip(probed, rows) for a in (r, p)),
                             *extra)[0].data  # this one sorts before the probed one
                # stable: a left element follows the right ones that sort before it; a right
                # element follows the left ones it does not sort before
                precedes = np.where(left, before, ~after)
                active = lo < hi
                lo = np.where(active & precedes, mid + 1, lo)
                hi = np.where(active & ~precedes, mid, hi)
            target = pair + (pos - own) + lo
            for i, r in enumerate(rows):
                merged = np.empty_like(r)
                np.put_along_axis(merged, target, r, -1)
                rows[i] = merged
            width *= 2
        return tuple(np.moveaxis(r.reshape(shape), -1, dim) for r in rows)
    return kernel(run)



# approx_max_k / approx_min_k: the core's rule builds sort and slice (or reduce) from the rules
# above, so it needs no kernel of its own.
RULES.register(custom_call_rule("ApproxTopK"))(approx_top_k)
