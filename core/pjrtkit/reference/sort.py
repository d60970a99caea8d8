"""stablehlo.sort.

The comparators JAX emits (jnp.sort, argsort, lax.sort with num_keys) are lexicographic chains
``LT(k0) or (EQ(k0) and (LT(k1) or ...))`` over keys that are the same elementwise transform
(e.g. JAX's -0.0/NaN canonicalisation) of an operand pair. Those are recognised at compile
time: each key operand is transformed once as a whole array, mapped to an unsigned integer whose
order is the comparison's order, and sorted with one stable np.argsort / np.lexsort. Any other
comparator runs a vectorized stable merge sort that evaluates the comparator region on whole
arrays.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.stablehlo.ir import Block, Op, Region
from pjrtkit.lowering.regions import vectorized_region
from pjrtkit.reference.registry import REFERENCE


def total_order_key(x: np.ndarray, compare_type: str) -> np.ndarray:
    """An unsigned array ordered like ``x`` under ``compare_type``.

    Floats follow IEEE total order (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN); a FLOAT
    compare treats -0.0 and +0.0 as equal.
    """
    x = np.asarray(x)
    dtype = x.dtype
    if dtype == np.bool_:
        return x.view(np.uint8)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    sign = unsigned.type(1 << (8 * dtype.itemsize - 1))
    if dtype.kind in "iu":
        bits = x.view(unsigned)
        return bits ^ sign if compare_type == "SIGNED" or (
            compare_type == "NOTYPE" and dtype.kind == "i") else bits
    if compare_type == "FLOAT":
        x = np.where(x == 0, np.zeros((), dtype), x)
    bits = np.ascontiguousarray(x).view(unsigned)
    return np.where(bits & sign, ~bits, bits | sign)


# --- comparator recognition -----------------------------------------------------------------

def _definitions(block):
    return {v.id: op for op in block.ops for v in op.results}


def _expr(value, defs, arg_ids, rename):
    """A hashable expression for ``value``; block arguments in ``rename`` become their label,
    outer (captured) values stand for themselves. None if it reads another block argument."""
    if value.id in rename:
        return rename[value.id]
    if value.id in arg_ids:
        return None
    op = defs.get(value.id)
    if op is None:
        return ("outer", value.id)
    if op.name == "stablehlo.constant":
        v = np.asarray(op.attributes["value"])
        return ("const", v.dtype.str, v.tobytes(), v.shape)
    children = tuple(_expr(v, defs, arg_ids, rename) for v in op.operands)
    if any(c is None for c in children):
        return None
    attrs = tuple(sorted((k, repr(v)) for k, v in op.attributes.items()))
    return (op.name, attrs, children)


def lexicographic_keys(region):
    """[(compare op, pair index, descending)] if the comparator is a recognised key chain."""
    block = region.entry
    defs = _definitions(block)
    args = block.arguments
    arg_ids = {a.id for a in args}
    npairs = len(args) // 2

    def key_of(cmp):
        if cmp is None or cmp.name != "stablehlo.compare":
            return None
        direction = cmp.attributes["comparison_direction"]
        if direction not in ("LT", "GT"):
            return None
        lhs, rhs = cmp.operands
        for p in range(npairs):
            a, b = args[2 * p], args[2 * p + 1]
            for flip, (x, y) in ((False, (a, b)), (True, (b, a))):
                ex = _expr(lhs, defs, arg_ids, {x.id: "X"})
                if ex is not None and ex == _expr(rhs, defs, arg_ids, {y.id: "X"}):
                    return cmp, p, (direction == "GT") != flip, x
        return None

    def same_operands(eq, cmp):
        return (eq is not None and eq.name == "stablehlo.compare"
                and eq.attributes["comparison_direction"] == "EQ"
                and eq.attributes.get("compare_type") == cmp.attributes.get("compare_type")
                and set(v.id for v in eq.operands) == set(v.id for v in cmp.operands))

    def chain(value):
        op = defs.get(value.id)
        key = key_of(op)
        if key is not None:
            return [key]
        if op is None or op.name != "stablehlo.or":
            return None
        for first, rest in (op.operands, op.operands[::-1]):
            key = key_of(defs.get(first.id))
            conj = defs.get(rest.id)
            if key is None or conj is None or conj.name != "stablehlo.and":
                continue
            for eq, tail in (conj.operands, conj.operands[::-1]):
                if same_operands(defs.get(eq.id), key[0]):
                    keys = chain(tail)
                    if keys is not None:
                        return [key, *keys]
        return None

    ret = block.ops[-1]
    if len(ret.operands) != 1:
        return None
    return chain(ret.operands[0])


def _key_transform(ctx, block, cmp_operand, arg, shape):
    """A plan computing ``cmp_operand`` from block argument ``arg`` on whole arrays, or None
    when the key is the argument itself."""
    if cmp_operand is arg:
        return None
    defs = _definitions(block)
    needed, stack = set(), [cmp_operand]
    while stack:
        op = defs.get(stack.pop().id)
        if op is not None and id(op) not in needed:
            needed.add(id(op))
            stack.extend(op.operands)
    ops = [op for op in block.ops if id(op) in needed]
    ops.append(Op("stablehlo.return", (cmp_operand,), (), {}))
    return vectorized_region(ctx, Region([Block((arg,), ops)]), shape)


# --- the rule -------------------------------------------------------------------------------

@REFERENCE.register("stablehlo.sort")
def sort_rule(op, ctx):
    shape = op.operands[0].type.shape
    rank = len(shape)
    dim = int(op.attributes.get("dimension", -1))
    dim = dim + rank if dim < 0 else dim
    if rank == 0:
        return lambda *args: tuple(np.array(a) for a in args[:len(op.results)])
    n = len(op.operands)
    block = op.regions[0].entry
    keys = lexicographic_keys(op.regions[0])
    if keys is not None:
        specs = []
        for cmp, p, descending, arg in keys:
            transform = _key_transform(ctx, block, cmp.operands[0], arg, shape)
            specs.append((p, transform, cmp.attributes.get("compare_type", "NOTYPE"), descending))
        return _key_sort_kernel(specs, dim, n)
    return _merge_sort_kernel(ctx, op, dim, n, shape)


def _key_sort_kernel(specs, dim, n):
    def sort_kernel(*args):
        operands, captures = args[:n], args[n:]
        sort_keys = []
        for p, transform, compare_type, descending in specs:
            x = operands[p] if transform is None else transform(operands[p], *captures)[0]
            k = total_order_key(x, compare_type)
            sort_keys.append(~k if descending else k)
        if len(sort_keys) == 1:
            perm = np.argsort(sort_keys[0], axis=dim, kind="stable")
        else:
            perm = np.lexsort(sort_keys[::-1], axis=dim)
        return tuple(np.take_along_axis(x, perm, axis=dim) for x in operands)

    return sort_kernel


def _merge_sort_kernel(ctx, op, dim, n, shape):
    """Bottom-up stable merge sort along ``dim`` with the comparator applied to whole arrays.

    Each level merges runs of width w pairwise: an element's place in the merged run is its
    index in its own run plus how many partner-run elements precede it, found by a vectorized
    binary search (log2(w) + 1 comparator calls per level). The length is padded to a power of
    two with elements that sort after everything.
    """
    length = shape[dim]
    size = 1
    while size < length:
        size *= 2
    rows = int(np.prod(shape, dtype=np.int64)) // max(length, 1)
    less = vectorized_region(ctx, op.regions[0], (rows, size))
    position = np.arange(size)

    def sort_kernel(*args):
        operands, captures = args[:n], args[n:]
        if length <= 1 or rows == 0:
            return tuple(np.array(x) for x in operands)
        flat = [np.moveaxis(x, dim, -1).reshape(rows, length) for x in operands]
        perm = np.broadcast_to(np.minimum(position, length - 1), (rows, size)).copy()
        pad_of = np.broadcast_to(position >= length, (rows, size)).copy()
        width = 1
        while width < size:
            values = [np.take_along_axis(x, perm, axis=1) for x in flat]
            base = (position // (2 * width)) * (2 * width)
            in_a = (position - base) < width
            own = np.where(in_a, position - base, position - base - width)
            partner = np.where(in_a, base + width, base)
            lo = np.zeros((rows, size), np.int64)
            hi = np.full((rows, size), width, np.int64)
            for _ in range(width.bit_length()):
                active = lo < hi
                mid = (lo + hi) // 2
                at = np.minimum(partner + mid, size - 1)
                other = [np.take_along_axis(v, at, axis=1) for v in values]
                other_pad = np.take_along_axis(pad_of, at, axis=1)
                # A-elements count partner elements strictly less; B-elements count those not
                # greater, so equal elements keep their original order.
                b_first = _less(less, other, values, other_pad, pad_of, captures)
                a_first = ~_less(less, values, other, pad_of, other_pad, captures)
                precedes = np.where(in_a, b_first, a_first)
                lo = np.where(active & precedes, mid + 1, lo)
                hi = np.where(active & ~precedes, mid, hi)
            target = base + own + lo
            new_perm = np.empty_like(perm)
            new_pad = np.empty_like(pad_of)
            np.put_along_axis(new_perm, target, perm, axis=1)
            np.put_along_axis(new_pad, target, pad_of, axis=1)
            perm, pad_of = new_perm, new_pad
            width *= 2
        perm = perm[:, :length]
        out = []
        for x, f in zip(operands, flat):
            y = np.take_along_axis(f, perm, axis=1)
            moved = np.moveaxis(x, dim, -1).shape
            out.append(np.moveaxis(y.reshape(moved), -1, dim))
        return tuple(out)

    return sort_kernel


def _less(plan, xs, ys, x_pad, y_pad, captures):
    """comparator(x, y) with padding elements greater than every real element."""
    interleaved = [v for pair in zip(xs, ys) for v in pair]
    result = np.asarray(plan(*interleaved, *captures)[0], dtype=bool)
    return (result & ~x_pad & ~y_pad) | (~x_pad & y_pad)

