"""stablehlo.convolution as im2col plus matmuls (BLAS).

The rule works out, at compile time, the transposes to a canonical layout (lhs N,S...,C; rhs
S...,I,O), the dilation/padding placement, the strided window view, the group split and how
the patch matrix is cut into pieces. The kernel writes the padded input into a buffer it keeps
(borders stay zero; no copy at all without padding), then, for one group, copies the windows
into a cache-sized patch buffer piece by piece and multiplies each piece straight into its
rows of the result: (rows, win*C) @ (win*C, O), no transposes in between for NHWC/HWIO. A
patch matrix that already is a plain strided matrix (1x1 or non-overlapping windows) is read
in place. Grouped convolutions multiply all groups at once with a batched np.matmul. f16/bf16
run in f32 and are rounded once, like XLA's CPU backend.

Measured on the convnet benchmark's 5x5 32->64 layer (batch 32, 28x28, one thread): 21 ms as
one 80 MB patch matrix and one matmul, 14.8 ms in 4 MiB pieces (1 MiB: 15.5, 8 MiB: 16.2).
"""
from __future__ import annotations

import contextlib

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pjrtkit.reference.conv_scratch import Scratch
from pjrtkit.reference.dot import ThreadPolicy
from pjrtkit.reference.reduce import placement
from pjrtkit.reference.registry import REFERENCE
from pjrtkit.semantics.dtypes import BFLOAT16, FLOAT16
from pjrtkit.stablehlo.attributes import padding_pairs

_LOW_PRECISION = (FLOAT16, BFLOAT16)


def _compute_dtype(dtype):
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype in _LOW_PRECISION else dtype


def convolution_rule_with(threads: ThreadPolicy | None = None):
    """The rule of ``stablehlo.convolution`` whose kernels run their matmuls under ``threads``
    (a backend's BLAS thread policy, ``pjrtkit.reference.dot.ThreadPolicy``; None: as is)."""

    def rule(op, ctx):
        return _lower(op, ctx, threads)

    return rule


def _lower(op, ctx, threads: ThreadPolicy | None):
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    out_t = op.results[0].type
    attrs = op.attributes
    dn = attrs["dimension_numbers"]
    k = len(dn.input_spatial_dimensions)
    ones = (1,) * k
    strides = tuple(attrs.get("window_strides") or ones)
    lhs_dil = tuple(attrs.get("lhs_dilation") or ones)
    rhs_dil = tuple(attrs.get("rhs_dilation") or ones)
    padding = padding_pairs(attrs.get("padding"), k)
    if any(attrs.get("window_reversal") or ()):
        raise ctx.unimplemented(op, "window_reversal is not supported")
    fg = int(attrs.get("feature_group_count", 1))
    bg = int(attrs.get("batch_group_count", 1))
    if out_t.dtype == np.bool_:
        raise ctx.unimplemented(op, "bool convolution is not supported")
    cdt = _compute_dtype(out_t.dtype)

    lhs_perm = (dn.input_batch_dimension, *dn.input_spatial_dimensions,
                dn.input_feature_dimension)
    rhs_perm = (*dn.kernel_spatial_dimensions, dn.kernel_input_feature_dimension,
                dn.kernel_output_feature_dimension)
    n, c = lhs_t.shape[dn.input_batch_dimension], lhs_t.shape[dn.input_feature_dimension]
    spatial = tuple(lhs_t.shape[d] for d in dn.input_spatial_dimensions)
    window = tuple(rhs_t.shape[d] for d in dn.kernel_spatial_dimensions)
    kin = rhs_t.shape[dn.kernel_input_feature_dimension]
    kout = rhs_t.shape[dn.kernel_output_feature_dimension]
    if c != kin * fg or n % bg or kout % (fg * bg):
        raise ctx.unimplemented(op, f"inconsistent group counts (features {c}, kernel in "
                                    f"{kin}, out {kout}, fg {fg}, bg {bg}, batch {n})")

    full = (1, *lhs_dil, 1)
    pads = ((0, 0), *padding, (0, 0))
    canon_shape = (n, *spatial, c)
    padded, _, _ = placement(canon_shape, full, pads)
    out_spatial = tuple(
        0 if p < (w - 1) * d + 1 else (p - (w - 1) * d - 1) // s + 1
        for p, w, d, s in zip(padded[1:-1], window, rhs_dil, strides))
    n_out = n // bg
    canon_out = (n_out, *out_spatial, kout)
    out_perm = [0] * out_t.rank  # out_perm[d] = canonical axis holding output dim d
    out_perm[dn.output_batch_dimension] = 0
    for i, d in enumerate(dn.output_spatial_dimensions):
        out_perm[d] = 1 + i
    out_perm[dn.output_feature_dimension] = k + 1
    if tuple(canon_out[p] for p in out_perm) != out_t.shape:
        raise ctx.unimplemented(op, f"computed output shape {canon_out} (canonical) does not "
                                    f"match {out_t.shape}")
    out_perm = tuple(out_perm)

    win_size = int(np.prod(window, dtype=np.int64))
    out_size = int(np.prod(out_spatial, dtype=np.int64))
    groups = fg * bg
    og = kout // groups  # output features per group
    empty = out_t.size == 0 or win_size == 0 or c == 0
    out_identity = out_perm == tuple(range(out_t.rank)) and out_t.dtype == cdt
    contraction = win_size * c  # K of the matmul
    flops = 2.0 * n_out * out_size * kout * win_size * kin

    # The padded canonical input lives in scratch when it differs from the input itself.
    needs_pad = any(d != 1 for d in lhs_dil) or any(p != (0, 0) for p in padding)
    _, pad_dst, pad_src = placement(canon_shape, full, pads)
    specs = {"padded": (padded, cdt, True)} if needs_pad else {}
    chunks = ()
    call_flops = flops / groups  # BLAS calls: one per group (batched), or one per chunk
    if groups == 1 and not empty:
        chunks, rows = _chunks(n, out_spatial, contraction * cdt.itemsize)
        specs["patches"] = ((rows, contraction), cdt, False)
        # Counted per chunk even when the patch matrix is read in place in one call (known
        # only at run time): that only makes widening onto busy cores rarer.
        call_flops = 2.0 * rows * contraction * kout
    scratch = Scratch(specs)
    widen = threads(flops, call_flops) if threads is not None else None

    def windows(x):
        """x: padded canonical lhs -> read-only view (N, out..., win..., C)."""
        sn, *ss, sc = x.strides
        shape = (n, *out_spatial, *window, c)
        st = (sn, *(s * t for s, t in zip(ss, strides)), *(s * d for s, d in zip(ss, rhs_dil)), sc)
        return as_strided(x, shape, st, writeable=False)

    def padded_input(lhs, buffers):
        x = lhs.transpose(lhs_perm)
        if not needs_pad:
            return x
        out = buffers["padded"]
        np.copyto(out[pad_dst], x[pad_src], casting="unsafe")
        return out

    def single_group(patches, w, buffers):
        """One matmul of the whole (N*out, win*C) patch matrix, built chunk by chunk in a
        cache-sized buffer (or read in place when it already is a plain matrix)."""
        w = w.reshape(contraction, kout)
        y = np.empty((n * out_size, kout), cdt)
        try:
            direct = np.reshape(patches, (n * out_size, contraction), copy=False)
        except ValueError:
            direct = None
        if direct is not None and direct.dtype == cdt:
            np.matmul(direct, w, out=y)
            return y
        buffer = buffers["patches"]
        for index, row, count in chunks:
            part = buffer[:count]
            np.copyto(part.reshape(patches[index].shape), patches[index], casting="unsafe")
            np.matmul(part, w, out=y[row:row + count])
        return y

    def convolution_kernel(lhs, rhs):
        if empty:
            return (np.zeros(out_t.shape, out_t.dtype),)
        w = rhs.transpose(rhs_perm).astype(cdt, copy=False)  # (win..., kin, kout)
        with scratch.take() as buffers, widen() if widen is not None else _AS_IS:
            patches = windows(padded_input(lhs, buffers))
            if groups == 1:
                y = single_group(patches, w, buffers)
            elif bg > 1:
                # Batch group g pairs lhs batches [g*n_out, (g+1)*n_out) with output features
                # [g*og, (g+1)*og); results are concatenated along the output features.
                p = patches.reshape(bg, n_out * out_size, win_size * c)
                w = w.reshape(win_size * kin, bg, og).transpose(1, 0, 2)
                y = np.matmul(p, w)  # (bg, n_out*out, og)
                y = y.reshape(bg, n_out, *out_spatial, og)
                y = np.moveaxis(y, 0, -2)
            else:
                # Feature group g reads input features [g*kin, (g+1)*kin) and writes outputs
                # [g*og, (g+1)*og).
                p = patches.reshape(n * out_size, win_size, fg, kin).transpose(2, 0, 1, 3)
                p = p.reshape(fg, n * out_size, win_size * kin)
                w = w.reshape(win_size * kin, fg, og).transpose(1, 0, 2)
                y = np.matmul(p, w)  # (fg, n*out, og)
                y = y.transpose(1, 0, 2)
        y = y.reshape(canon_out)
        if out_identity:
            return (y,)
        return (np.ascontiguousarray(y.transpose(out_perm)).astype(out_t.dtype, copy=False),)

    return convolution_kernel


_AS_IS = contextlib.nullcontext()
REFERENCE.register("stablehlo.convolution")(convolution_rule_with())

# Bytes of patches copied per matmul: big enough for BLAS to run at full speed, small enough
# that the matmul finds them still in cache.
CHUNK_BYTES = 4 << 20


def _chunks(n, out_spatial, row_bytes):
    """Pieces of the (N, out...) rows of the patch matrix, each at most ~CHUNK_BYTES: whole
    images when one fits, else runs of lines along the first output dimension.

    Returns ((index into the windows view, first row, row count), ...) and the largest count.
    """
    per_line = int(np.prod(out_spatial[1:], dtype=np.int64)) * row_bytes
    lines = out_spatial[0] if out_spatial else 1
    line_rows = per_line // row_bytes
    pieces = []
    if per_line * lines <= CHUNK_BYTES or not out_spatial:
        step = max(1, CHUNK_BYTES // max(per_line * lines, 1))
        for start in range(0, n, step):
            stop = min(start + step, n)
            pieces.append(((slice(start, stop),), start * lines * line_rows,
                           (stop - start) * lines * line_rows))
    else:
        step = max(1, CHUNK_BYTES // max(per_line, 1))
        for image in range(n):
            for start in range(0, lines, step):
                stop = min(start + step, lines)
                pieces.append(((slice(image, image + 1), slice(start, stop)),
                               (image * lines + start) * line_rows, (stop - start) * line_rows))
    return tuple(pieces), max((count for _, _, count in pieces), default=0)
