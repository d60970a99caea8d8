"""Shape and layout ops: iota, reshape, broadcast_in_dim, transpose, reverse, slice,
concatenate, pad, dynamic_slice and dynamic_update_slice (start indices clamped as XLA does).

``pad_array`` is StableHLO's pad on arrays; ``reductions.reduce_window`` pads its windows with it.
"""
from __future__ import annotations

import numpy as np

from .payloads import RULES, kernel, result_type


@RULES.register("stablehlo.iota")
def iota(op, ctx):
    t, d = result_type(op), op.attributes["iota_dimension"]
    shape = [1] * t.rank
    shape[d] = t.shape[d]
    values = np.broadcast_to(np.arange(t.shape[d]).reshape(shape), t.shape).astype(t.dtype)
    return kernel(lambda: (values.copy(),))


@RULES.register("stablehlo.reshape")
def reshape(op, ctx):
    shape = result_type(op).shape
    return kernel(lambda x: (x.reshape(shape),))


@RULES.register("stablehlo.broadcast_in_dim")
def broadcast_in_dim(op, ctx):
    t, dims = result_type(op), op.attributes["broadcast_dimensions"]
    expanded = [1] * t.rank
    for i, d in enumerate(dims):
        expanded[d] = op.operands[0].type.shape[i]
    return kernel(lambda x: (np.broadcast_to(x.reshape(expanded), t.shape).copy(),))


@RULES.register("stablehlo.transpose")
def transpose(op, ctx):
    permutation = op.attributes["permutation"]
    return kernel(lambda x: (np.transpose(x, permutation).copy(),))


@RULES.register("stablehlo.reverse")
def reverse(op, ctx):
    dims = tuple(op.attributes["dimensions"])
    return kernel(lambda x: (np.flip(x, dims).copy(),))


@RULES.register("stablehlo.slice")
def slice_(op, ctx):
    a = op.attributes
    index = tuple(slice(lo, hi, s) for lo, hi, s in zip(a["start_indices"], a["limit_indices"],
                                                        a["strides"]))
    return kernel(lambda x: (x[index].copy(),))


@RULES.register("stablehlo.concatenate")
def concatenate(op, ctx):
    d = op.attributes["dimension"]
    return kernel(lambda *xs: (np.concatenate(xs, axis=d),))


def pad_array(x, value, low, high, interior):
    """StableHLO's pad: ``interior`` values between elements, then edges (negative: cropped)."""
    inner = np.full([(n - 1) * (i + 1) + 1 if n else 0 for n, i in zip(x.shape, interior)],
                    value, x.dtype)
    inner[tuple(slice(None, None, i + 1) for i in interior)] = x
    out = np.full([n + max(lo, 0) + max(hi, 0) for n, lo, hi in zip(inner.shape, low, high)],
                  value, x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + n) for n, lo in zip(inner.shape, low))] = inner
    return out[tuple(slice(-min(lo, 0), n + min(hi, 0) if hi < 0 else n)
                     for n, lo, hi in zip(out.shape, low, high))].copy()


@RULES.register("stablehlo.pad")
def pad(op, ctx):
    a = op.attributes
    low, high, interior = a["edge_padding_low"], a["edge_padding_high"], a["interior_padding"]
    return kernel(lambda x, value: (pad_array(x, value, low, high, interior),))


def _clamped_starts(starts, operand_shape, sizes):
    return tuple(int(np.clip(int(s), 0, dim - size)) for s, dim, size in
                 zip(starts, operand_shape, sizes))


@RULES.register("stablehlo.dynamic_slice")
def dynamic_slice(op, ctx):
    sizes = op.attributes["slice_sizes"]

    def run(x, *starts):
        begin = _clamped_starts(starts, x.shape, sizes)
        return (x[tuple(slice(b, b + s) for b, s in zip(begin, sizes))].copy(),)
    return kernel(run)


@RULES.register("stablehlo.dynamic_update_slice")
def dynamic_update_slice(op, ctx):
    def run(x, update, *starts):
        begin = _clamped_starts(starts, x.shape, update.shape)
        out = x.copy()
        out[tuple(slice(b, b + s) for b, s in zip(begin, update.shape))] = update
        return (out,)
    return kernel(run)

