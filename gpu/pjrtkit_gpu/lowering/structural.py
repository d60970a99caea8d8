"""Ops that move elements without arithmetic, all through the one ``strided_copy`` kernel
(broadcast: stride 0; slice: scaled strides and a base; reverse: negative strides; pad and
concatenate: strided writes into a filled output), and ``iota``. Reshape and same-width
bitcast_convert are free: a new view of the same memory (no kernel writes memory another array
reads)."""
from __future__ import annotations

import math

from pjrtkit_gpu import dtypes as D, kernels
from pjrtkit_gpu.device_array import DeviceArray, is_storable
from pjrtkit_gpu.lowering.launching import (blocks, permuted, row_major_strides,
                                            strided_copy)


def check_operands(op, ctx, max_rank: int | None = None) -> None:
    """UNIMPLEMENTED unless every operand and result has a supported dtype (and, given
    ``max_rank``, rank). The kernels take any rank: the strided copy coalesces its index space
    and loops past ``kernels.MAX_RANK`` (``launching.strided_copy``); generated kernels index
    every dimension."""
    for value in (*op.operands, *op.results):
        t = value.type
        if not hasattr(t, "dtype"):
            raise ctx.unimplemented(op, f"{t} values")
        if not D.is_supported(t.dtype):
            raise ctx.unimplemented(op, f"{t.dtype.name} (the GPU kernels take "
                                        f"{', '.join(d.name for d in D.SUPPORTED)})")
        if max_rank is not None and t.rank > max_rank:
            raise ctx.unimplemented(op, f"rank {t.rank} > {max_rank} on {t.dtype.name}")


def _device(ctx):
    return ctx.payloads.driver, ctx.payloads.device_index


def reshape(op, ctx):
    check_operands(op, ctx)
    shape = op.results[0].type.shape

    def run_reshape(x):
        return (x.reshaped(shape),)

    return run_reshape


def broadcast_in_dim(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    in_shape = op.operands[0].type.shape
    out = op.results[0].type
    dims = tuple(op.attributes["broadcast_dimensions"])
    in_strides = row_major_strides(in_shape)
    src_strides = [0] * out.rank
    for i, d in enumerate(dims):
        if in_shape[i] == out.shape[d]:
            src_strides[d] = in_strides[i]
    dst_strides = row_major_strides(out.shape)
    if math.prod(in_shape) == math.prod(out.shape) and list(dims) == sorted(dims):
        # only size-1 dimensions added (keepdims): the same elements in the same order
        def run_view(x):
            return (x.reshaped(out.shape),)

        return run_view

    def run_broadcast(x):
        result = driver.empty(device, out.shape, out.dtype)
        strided_copy(driver, device, x, result, out.shape, src_strides, dst_strides)
        return (result,)

    return run_broadcast


def transpose(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    permutation = tuple(op.attributes["permutation"])

    def run_transpose(x):
        result = permuted(driver, device, x, permutation)
        return (result if result is not x else x,)

    return run_transpose


def slice_(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    in_strides = row_major_strides(op.operands[0].type.shape)
    out = op.results[0].type
    starts, steps = op.attributes["start_indices"], op.attributes["strides"]
    base = sum(s * st for s, st in zip(starts, in_strides))
    src_strides = [st * step for st, step in zip(in_strides, steps)]

    def run_slice(x):
        result = driver.empty(device, out.shape, out.dtype)
        strided_copy(driver, device, x, result, out.shape, src_strides,
                     row_major_strides(out.shape), src_base=base)
        return (result,)

    return run_slice


def reverse(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    t = op.results[0].type
    strides = list(row_major_strides(t.shape))
    base = 0
    for d in op.attributes["dimensions"]:
        base += (t.shape[d] - 1) * strides[d]
        strides[d] = -strides[d]

    def run_reverse(x):
        result = driver.empty(device, t.shape, t.dtype)
        strided_copy(driver, device, x, result, t.shape, strides, row_major_strides(t.shape),
                     src_base=base)
        return (result,)

    return run_reverse


def _fill(driver, device, value, result):
    strided_copy(driver, device, value, result, result.shape, [0] * len(result.shape),
                 row_major_strides(result.shape))


def pad(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    in_shape = op.operands[0].type.shape
    out = op.results[0].type
    low, interior = op.attributes["edge_padding_low"], op.attributes["interior_padding"]
    in_strides, out_strides = row_major_strides(in_shape), row_major_strides(out.shape)
    counts, src_strides, dst_strides, src_base, dst_base = [], [], [], 0, 0
    for d, size in enumerate(in_shape):
        step = interior[d] + 1
        first = 0 if low[d] >= 0 else -(low[d] // step)  # ceil(-low / step): first inside
        last = min(size - 1, (out.shape[d] - 1 - low[d]) // step) if size else -1
        counts.append(max(0, last - first + 1))
        src_strides.append(in_strides[d])
        dst_strides.append(step * out_strides[d])
        src_base += first * in_strides[d]
        dst_base += (low[d] + first * step) * out_strides[d]

    def run_pad(x, value):
        result = driver.empty(device, out.shape, out.dtype)
        _fill(driver, device, value, result)
        if math.prod(counts):
            strided_copy(driver, device, x, result, counts, src_strides, dst_strides,
                         src_base=src_base, dst_base=dst_base)
        return (result,)

    return run_pad


def concatenate(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    out = op.results[0].type
    axis = op.attributes["dimension"]
    out_strides = row_major_strides(out.shape)
    pieces, offset = [], 0
    for value in op.operands:
        shape = value.type.shape
        pieces.append((shape, row_major_strides(shape), offset * out_strides[axis]))
        offset += shape[axis]

    def run_concatenate(*xs):
        result = driver.empty(device, out.shape, out.dtype)
        for x, (shape, strides, base) in zip(xs, pieces):
            strided_copy(driver, device, x, result, shape, strides, out_strides, dst_base=base)
        return (result,)

    return run_concatenate


def iota(op, ctx):
    check_operands(op, ctx)
    out = op.results[0].type
    if out.dtype == D.BOOL:
        raise ctx.unimplemented(op, "iota of bool")
    driver, device = _device(ctx)
    dim = op.attributes["iota_dimension"]
    n = out.size
    stride = math.prod(out.shape[dim + 1:])
    size = out.shape[dim] if out.rank else 1

    def run_iota():
        result = driver.empty(device, out.shape, out.dtype)
        if n:
            driver.launch(device, kernels.iota, (blocks(n, kernels.ELEMENTWISE_BLOCK),),
                          [result, n, stride, size],
                          {"IS_FLOAT": D.is_float(out.dtype), "BLOCK": kernels.ELEMENTWISE_BLOCK})
        return (result,)

    return run_iota


def _starts(driver, indices, operand_shape, window_shape):
    """Dynamic start indices read from the device (control from the host), clamped as XLA."""
    starts = []
    for index, size, window in zip(indices, operand_shape, window_shape):
        value = int(driver.to_host(index).reshape(()))
        starts.append(min(max(value, 0), size - window))
    return starts


def dynamic_slice(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    in_shape = op.operands[0].type.shape
    in_strides = row_major_strides(in_shape)
    out = op.results[0].type

    def run_dynamic_slice(x, *indices):
        starts = _starts(driver, indices, in_shape, out.shape)
        result = driver.empty(device, out.shape, out.dtype)
        strided_copy(driver, device, x, result, out.shape, in_strides,
                     row_major_strides(out.shape),
                     src_base=sum(s * st for s, st in zip(starts, in_strides)))
        return (result,)

    return run_dynamic_slice


def dynamic_update_slice(op, ctx):
    check_operands(op, ctx)
    driver, device = _device(ctx)
    shape = op.operands[0].type.shape
    update_shape = op.operands[1].type.shape
    strides = row_major_strides(shape)

    def run_dynamic_update_slice(x, update, *indices):
        starts = _starts(driver, indices, shape, update_shape)
        result = driver.duplicate(x)
        strided_copy(driver, device, update, result, update_shape,
                     row_major_strides(update_shape), strides,
                     dst_base=sum(s * st for s, st in zip(starts, strides)))
        return (result,)

    return run_dynamic_update_slice


def bitcast_convert(op, ctx):
    """A new view of the same memory (no kernel): the bytes of a dense row-major array read as
    another type. Between widths the narrower side has one more dimension, of the ratio
    (uint32[n, 2] <-> uint64[n], float32[n, 2] <-> complex64[n]), which is how the bytes lie.
    Types the kernels only store (complex, float8, int4) pass here: the core's expansions read
    them as uint8 / float pairs."""
    source, target = op.operands[0].type, op.results[0].type
    for t in (source, target):
        if not hasattr(t, "dtype") or not is_storable(t.dtype):
            raise ctx.unimplemented(op, f"bitcast_convert of {t}")
    if D.BOOL in (source.dtype, target.dtype) and source.dtype != target.dtype:
        raise ctx.unimplemented(op, f"bitcast_convert {source.dtype.name} -> "
                                    f"{target.dtype.name} (a bool is one bit, stored in a byte)")
    if source.size * source.dtype.itemsize != target.size * target.dtype.itemsize:
        raise ctx.unimplemented(op, f"bitcast_convert {source} -> {target} changes the size")

    def run_bitcast(x):
        return (DeviceArray(x.memory, target.shape, target.dtype),)

    return run_bitcast


def identity(op, ctx):
    def run_identity(*xs):
        return tuple(xs)

    return run_identity


STRUCTURAL_RULES = {
    "stablehlo.reshape": reshape,
    "stablehlo.broadcast_in_dim": broadcast_in_dim,
    "stablehlo.transpose": transpose,
    "stablehlo.slice": slice_,
    "stablehlo.reverse": reverse,
    "stablehlo.pad": pad,
    "stablehlo.concatenate": concatenate,
    "stablehlo.iota": iota,
    "stablehlo.dynamic_slice": dynamic_slice,
    "stablehlo.dynamic_update_slice": dynamic_update_slice,
    "stablehlo.optimization_barrier": identity,
    "stablehlo.bitcast_convert": bitcast_convert,
}
