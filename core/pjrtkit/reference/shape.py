"""Structural ops: iota, broadcast, reshape, transpose, slicing, padding, concat.

Every index expression (slices, permutations, pad placement) is worked out in the rule, so a
kernel is one NumPy indexing call. Results that are pure re-indexings of an input are returned
as views: kernels never write their inputs, so a view can't be corrupted downstream. Views of
constants and broadcasts are read-only to make any such bug loud.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.reference.payloads import frozen
from pjrtkit.reference.registry import REFERENCE


def _result_type(op, i: int = 0):
    return op.results[i].type


@REFERENCE.register("stablehlo.iota")
def iota(op, ctx):
    rtype = _result_type(op)
    dim = op.attributes["iota_dimension"]
    view_shape = [1] * rtype.rank
    view_shape[dim] = rtype.shape[dim]
    # Integer iota wraps in narrow types (astype from int64 does exactly that); float iota
    # rounds each index once, as XLA's convert does.
    line = np.arange(rtype.shape[dim], dtype=np.int64).astype(rtype.dtype).reshape(view_shape)
    value = frozen(np.ascontiguousarray(np.broadcast_to(line, rtype.shape)))

    def kernel():
        return (value,)

    return kernel


# Broadcast results up to this many elements are materialised rather than viewed.
SMALL_BROADCAST = 4096


@REFERENCE.register("stablehlo.broadcast_in_dim")
def broadcast_in_dim(op, ctx):
    rtype = _result_type(op)
    operand_shape = op.operands[0].type.shape
    dims = tuple(op.attributes["broadcast_dimensions"])
    aligned = [1] * rtype.rank
    for src, dst in enumerate(dims):
        aligned[dst] = operand_shape[src]
    aligned = tuple(aligned)
    # Operand dims must appear in increasing order for a plain reshape to align them;
    # otherwise transpose first.
    order = tuple(np.argsort(dims, kind="stable")) if dims else ()
    needs_transpose = order != tuple(range(len(dims)))
    shape = rtype.shape

    if needs_transpose:
        def kernel(x):
            return (np.broadcast_to(np.transpose(x, order).reshape(aligned), shape),)
    elif aligned == shape:
        def kernel(x):
            return (x.reshape(shape),)
    elif math.prod(shape) <= SMALL_BROADCAST:
        # Small results: filling a fresh array is cheaper than np.broadcast_to's view setup.
        dtype = rtype.dtype

        def kernel(x):
            out = np.empty(shape, dtype)
            out[...] = x.reshape(aligned)
            return (out,)
    else:
        def kernel(x):
            return (np.broadcast_to(x.reshape(aligned), shape),)

    return kernel


@REFERENCE.register("stablehlo.reshape")
def reshape(op, ctx):
    shape = _result_type(op).shape

    def kernel(x):
        return (np.reshape(x, shape),)

    return kernel


@REFERENCE.register("stablehlo.transpose")
def transpose(op, ctx):
    permutation = tuple(op.attributes["permutation"])

    def kernel(x):
        return (np.transpose(x, permutation),)

    return kernel


@REFERENCE.register("stablehlo.slice")
def slice_(op, ctx):
    index = tuple(slice(start, limit, stride) for start, limit, stride in zip(
        op.attributes["start_indices"], op.attributes["limit_indices"], op.attributes["strides"]))

    def kernel(x):
        return (x[index],)

    return kernel


@REFERENCE.register("stablehlo.reverse")
def reverse(op, ctx):
    dims = set(op.attributes["dimensions"])
    index = tuple(slice(None, None, -1) if d in dims else slice(None)
                  for d in range(op.operands[0].type.rank))

    def kernel(x):
        return (x[index],)

    return kernel


@REFERENCE.register("stablehlo.concatenate")
def concatenate(op, ctx):
    axis = op.attributes["dimension"]
    dtype = _result_type(op).dtype

    def kernel(*xs):
        return (np.concatenate(xs, axis=axis, dtype=dtype),)

    return kernel


def _clamped_starts(starts, limits):
    """XLA clamps each start index into [0, operand_dim - slice_dim]."""
    return [min(max(int(s), 0), hi) for s, hi in zip(starts, limits)]


@REFERENCE.register("stablehlo.dynamic_slice")
def dynamic_slice(op, ctx):
    operand_shape = op.operands[0].type.shape
    sizes = tuple(op.attributes["slice_sizes"])
    limits = [d - s for d, s in zip(operand_shape, sizes)]

    def kernel(x, *starts):
        begin = _clamped_starts(starts, limits)
        return (x[tuple(slice(b, b + s) for b, s in zip(begin, sizes))],)

    return kernel


@REFERENCE.register("stablehlo.dynamic_update_slice")
def dynamic_update_slice(op, ctx):
    operand_shape = op.operands[0].type.shape
    sizes = op.operands[1].type.shape
    limits = [d - s for d, s in zip(operand_shape, sizes)]

    def kernel(x, update, *starts):
        begin = _clamped_starts(starts, limits)
        out = x.copy()
        out[tuple(slice(b, b + s) for b, s in zip(begin, sizes))] = update
        return (out,)

    return kernel


def _pad_placement(in_dim: int, low: int, high: int, interior: int, out_dim: int):
    """(input slice, output slice) of the operand elements that survive padding on one dim.

    Element i lands at ``low + i * (interior + 1)``; negative edge padding crops, so keep only
    those landing inside [0, out_dim).
    """
    step = interior + 1
    first = max(0, -(low // step) if low < 0 else 0)  # smallest i with low + i*step >= 0
    last = min(in_dim, -(-(out_dim - low) // step))     # one past the largest i inside
    count = max(0, last - first)
    if count == 0:
        return slice(0, 0), slice(0, 0)
    start = low + first * step
    return slice(first, first + count), slice(start, start + (count - 1) * step + 1, step)


@REFERENCE.register("stablehlo.pad")
def pad(op, ctx):
    rtype = _result_type(op)
    placements = [
        _pad_placement(d, lo, hi, it, od) for d, lo, hi, it, od in zip(
            op.operands[0].type.shape, op.attributes["edge_padding_low"],
            op.attributes["edge_padding_high"], op.attributes["interior_padding"], rtype.shape)]
    source = tuple(p[0] for p in placements)
    target = tuple(p[1] for p in placements)
    shape, dtype = rtype.shape, rtype.dtype

    def kernel(x, padding_value):
        out = np.full(shape, padding_value, dtype=dtype)
        out[target] = x[source]
        return (out,)

    return kernel


@REFERENCE.register("stablehlo.tuple")
def tuple_(op, ctx):
    def kernel(*xs):
        return (xs,)

    return kernel


@REFERENCE.register("stablehlo.get_tuple_element")
def get_tuple_element(op, ctx):
    index = op.attributes["index"]

    def kernel(t):
        return (t[index],)

    return kernel


@REFERENCE.register("stablehlo.optimization_barrier")
def optimization_barrier(op, ctx):
    def kernel(*xs):
        return xs

    return kernel
