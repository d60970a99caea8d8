"""Grouped convolutions as ungrouped ones: ``feature_group_count = G`` is G convolutions, group g
taking the g-th slice of the input features and of the kernel's output features, concatenated
along the output features; ``batch_group_count = B`` likewise over slices of the batch and of
the kernel's output features. A backend whose convolution rule has no groups hands such an op
to this from its rule (``expansions.lower_by_expansion``).
"""
from __future__ import annotations

from pjrtkit.expansions.build import OpBuilder
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
