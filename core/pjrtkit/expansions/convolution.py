"""Convolutions as what a backend has.

- ``ungrouped_convolution``: ``feature_group_count = G`` is G convolutions, group g taking the
  g-th slice of the input features and of the kernel's output features, concatenated along the
  output features; ``batch_group_count = B`` likewise over slices of the batch. A backend whose
  convolution rule has no groups hands such an op to it (``expansions.lower_by_expansion``).
- ``convolution_as_dots`` (the table's expansion, for a backend without convolution): the input
  padded (``stablehlo.pad``, its interior padding being the input dilation), then for each
  kernel position a strided slice of it contracted with that position's kernel matrix
  (``dot_general`` over the input features), summed; window reversal reverses the kernel.
"""
from __future__ import annotations

import itertools

from pjrtkit.expansions.build import OpBuilder
from pjrtkit.stablehlo.attributes import DotDimensionNumbers, padding_pairs
from pjrtkit.stablehlo.ir import Op


def _slices(b: OpBuilder, value, dim: int, count: int):
    shape = value.type.shape
    size = shape[dim] // count
    out = []
    for g in range(count):
        start = [0] * len(shape)
        limit = list(shape)
        start[dim], limit[dim] = g * size, (g + 1) * size
        out.append(b.slice(value, start, limit))
    return out


def ungrouped_convolution(op: Op, program=None) -> list[Op]:
    attrs = op.attributes
    features = int(attrs.get("feature_group_count", 1) or 1)
    batches = int(attrs.get("batch_group_count", 1) or 1)
    if features == 1 and batches == 1:
        return [op]
    dn = attrs["dimension_numbers"]
    lhs, rhs = op.operands
    result = op.results[0]
    b = OpBuilder(op.location)
    groups = features if features > 1 else batches
    lhs_dim = dn.input_feature_dimension if features > 1 else dn.input_batch_dimension
    lhs_parts = _slices(b, lhs, lhs_dim, groups)
    rhs_parts = _slices(b, rhs, dn.kernel_output_feature_dimension, groups)
    out_dim = dn.output_feature_dimension
    out_shape = list(result.type.shape)
    out_shape[out_dim] //= groups
    part_type = result.type.__class__(tuple(out_shape), result.type.dtype)
    single = {**attrs, "feature_group_count": 1, "batch_group_count": 1}
    parts = [b.one("stablehlo.convolution", (x, k), part_type, **single)
             for x, k in zip(lhs_parts, rhs_parts)]
    b.emit_into("stablehlo.concatenate", parts, (result,), {"dimension": out_dim})
    return b.ops


def convolution_as_dots(op: Op, program=None) -> list[Op]:
    attrs = op.attributes
    if (int(attrs.get("feature_group_count", 1) or 1), int(attrs.get("batch_group_count", 1)
                                                           or 1)) != (1, 1):
        return ungrouped_convolution(op, program)
    dn = attrs["dimension_numbers"]
    lhs, rhs = op.operands
    result = op.results[0]
    spatial = len(dn.input_spatial_dimensions)
    b = OpBuilder(op.location)
    # [N, C, S...] and [O, I, K...]
    x = b.one("stablehlo.transpose", (lhs,), _permuted(lhs, (
        dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions)),
        permutation=(dn.input_batch_dimension, dn.input_feature_dimension,
                     *dn.input_spatial_dimensions))
    k_perm = (dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
              *dn.kernel_spatial_dimensions)
    k = b.one("stablehlo.transpose", (rhs,), _permuted(rhs, k_perm), permutation=k_perm)
    ones = (1,) * spatial
    strides = tuple(attrs.get("window_strides") or ones)
    lhs_dilation = tuple(attrs.get("lhs_dilation") or ones)
    rhs_dilation = tuple(attrs.get("rhs_dilation") or ones)
    reversal = tuple(attrs.get("window_reversal") or (False,) * spatial)
    padding = padding_pairs(attrs.get("padding"), spatial)
    if any(reversal):
        k = b.one("stablehlo.reverse", (k,), k.type,
                  dimensions=tuple(2 + d for d, r in enumerate(reversal) if r))
    zero = b.constant(0, lhs.type.dtype)
    padded_shape = [x.type.shape[0], x.type.shape[1]]
    for d in range(spatial):
        size = x.type.shape[2 + d]
        dilated = (size - 1) * lhs_dilation[d] + 1 if size else 0
        padded_shape.append(dilated + padding[d][0] + padding[d][1])
    x = b.one("stablehlo.pad", (x, zero), x.type.__class__(tuple(padded_shape), x.type.dtype),
              edge_padding_low=(0, 0, *(lo for lo, _ in padding)),
              edge_padding_high=(0, 0, *(hi for _, hi in padding)),
              interior_padding=(0, 0, *(d - 1 for d in lhs_dilation)))
    out_spatial = tuple(result.type.shape[d] for d in dn.output_spatial_dimensions)
    n, o = x.type.shape[0], k.type.shape[0]
    partial_type = result.type.__class__((n, *out_spatial, o), result.type.dtype)
    dot_attrs = {"dot_dimension_numbers": _FEATURES}
    if "precision_config" in attrs:
        dot_attrs["precision_config"] = attrs["precision_config"]
    total = None
    for position in itertools.product(*(range(s) for s in k.type.shape[2:])):
        start = [0, 0, *(p * rhs_dilation[d] for d, p in enumerate(position))]
        limit = [x.type.shape[0], x.type.shape[1],
                 *(start[2 + d] + (out_spatial[d] - 1) * strides[d] + 1 if out_spatial[d]
                   else start[2 + d] for d in range(spatial))]
        window = b.slice(x, start, limit, (1, 1, *strides))
        tap = b.reshape(b.slice(k, (0, 0, *position), (*k.type.shape[:2], *(p + 1 for p in
                                                                           position))),
                        k.type.shape[:2])
        term = b.one("stablehlo.dot_general", (window, tap), partial_type, **dot_attrs)
        total = term if total is None else b.add(total, term)
    if total is None:  # an empty kernel window: zeros
        total = b.constant(0, result.type.dtype, partial_type.shape)
    # [N, P..., O] -> the output's layout
    order = [dn.output_batch_dimension, *dn.output_spatial_dimensions,
             dn.output_feature_dimension]
    permutation = tuple(order.index(d) for d in range(len(order)))
    b.emit_into("stablehlo.transpose", (total,), (result,), {"permutation": permutation})
    return b.ops


def _permuted(value, permutation):
    t = value.type
    return t.__class__(tuple(t.shape[p] for p in permutation), t.dtype)


# window [N, C, P...] . tap [O, I] over C = I -> [N, P..., O]
_FEATURES = DotDimensionNumbers(lhs_batching_dimensions=(), rhs_batching_dimensions=(),
                                lhs_contracting_dimensions=(1,), rhs_contracting_dimensions=(1,))


EXPANSIONS = {"stablehlo.convolution": convolution_as_dots}
