"""stablehlo.convolution as im2col plus one batched matmul (BLAS) per call.

The rule works out, at compile time, the transposes to a canonical layout (lhs N,S...,C; rhs
S...,I,O), the dilation/padding placement, the strided window view and the group split. The
kernel then pads once, takes one copy of the windows, and multiplies all groups at once with
np.matmul: no Python loop over batch, spatial positions or groups. f16/bf16 run in f32 and are
rounded once, like XLA's CPU backend.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from pjrtkit_cpu.lowering.reduce import make_padder, padded_shape
from pjrtkit_cpu.lowering.registry import RULES

_LOW_PRECISION = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _compute_dtype(dtype):
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype in _LOW_PRECISION else dtype


@RULES.register("stablehlo.convolution")
def convolution_rule(op, ctx):
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    out_t = op.results[0].type
    attrs = op.attributes
    dn = attrs["dimension_numbers"]
    k = len(dn.input_spatial_dimensions)
    ones = (1,) * k
    strides = tuple(attrs.get("window_strides") or ones)
    lhs_dil = tuple(attrs.get("lhs_dilation") or ones)
    rhs_dil = tuple(attrs.get("rhs_dilation") or ones)
    padding = attrs.get("padding")
    padding = ((0, 0),) * k if padding is None else tuple(
        (int(lo), int(hi)) for lo, hi in np.asarray(padding).reshape(k, 2))
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
    pad = make_padder(canon_shape, full, pads)
    padded = padded_shape(canon_shape, full, pads)
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

    def windows(x):
        """x: padded canonical lhs -> read-only view (N, out..., win..., C)."""
        sn, *ss, sc = x.strides
        shape = (n, *out_spatial, *window, c)
        st = (sn, *(s * t for s, t in zip(ss, strides)), *(s * d for s, d in zip(ss, rhs_dil)), sc)
        return as_strided(x, shape, st, writeable=False)

    def convolution_kernel(lhs, rhs):
        if empty:
            return (np.zeros(out_t.shape, out_t.dtype),)
        x = np.ascontiguousarray(lhs.transpose(lhs_perm), dtype=cdt)
        x = pad(x, np.zeros((), cdt))
        w = rhs.transpose(rhs_perm).astype(cdt, copy=False)  # (win..., kin, kout)
        patches = windows(x)
        if bg > 1:
            # Batch group g pairs lhs batches [g*n_out, (g+1)*n_out) with output features
            # [g*og, (g+1)*og); results are concatenated along the output features.
            p = patches.reshape(bg, n_out * out_size, win_size * c)
            w = w.reshape(win_size * kin, bg, og).transpose(1, 0, 2)
            y = np.matmul(p, w)  # (bg, n_out*out, og)
            y = y.reshape(bg, n_out, *out_spatial, og)
            y = np.moveaxis(y, 0, -2).reshape(canon_out)
        elif fg > 1:
            # Feature group g reads input features [g*kin, (g+1)*kin) and writes outputs
            # [g*og, (g+1)*og).
            p = patches.reshape(n * out_size, win_size, fg, kin).transpose(2, 0, 1, 3)
            p = p.reshape(fg, n * out_size, win_size * kin)
            w = w.reshape(win_size * kin, fg, og).transpose(1, 0, 2)
            y = np.matmul(p, w)  # (fg, n*out, og)
            y = y.transpose(1, 0, 2).reshape(canon_out)
        else:
            y = np.matmul(patches.reshape(n * out_size, win_size * c),
                          w.reshape(win_size * kin, kout)).reshape(canon_out)
        return (np.ascontiguousarray(y.transpose(out_perm)).astype(out_t.dtype, copy=False),)

    return convolution_kernel
