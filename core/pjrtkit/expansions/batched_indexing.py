"""Gathers and scatters with batching dimensions as ones without (what XLA's
BatchedGatherScatterNormalizer does): each batching dimension pair becomes one more start-index
component, an iota along the indices' batch dimension, mapped to the operand's batching
dimension, which becomes a collapsed (gather) or inserted (scatter) window dimension.
``take_along_axis`` emits such gathers. A backend whose gather/scatter rule has no batching
dimensions hands such an op to these from its rule (``expansions.lower_by_expansion``).
"""
from __future__ import annotations

import dataclasses

from pjrtkit.expansions.build import OpBuilder, like
from pjrtkit.stablehlo.ir import Op


def _indices_with_batch_iotas(b: OpBuilder, indices, index_vector_dim: int, batch_dims):
    """``indices`` with one start-index component per batching dimension appended along
    ``index_vector_dim``: the position along that batch dimension."""
    shape = list(indices.type.shape)
    if index_vector_dim == len(shape):  # an implicit trailing index vector of size 1
        shape.append(1)
        indices = b.reshape(indices, shape)
    iota_shape = list(shape)
    iota_shape[index_vector_dim] = 1
    columns = [indices]
    for dim in batch_dims:
        columns.append(b.one("stablehlo.iota", (), like(indices, shape=iota_shape),
                             iota_dimension=dim))
    return b.concatenate(columns, index_vector_dim)


def gather_without_batching(op: Op, program=None) -> list[Op]:
    """``stablehlo.gather`` with operand_batching_dims, as one without."""
    dn = op.attributes["dimension_numbers"]
    if not dn.operand_batching_dims:
        return [op]
    b = OpBuilder(op.location)
    operand, indices = op.operands
    indices = _indices_with_batch_iotas(b, indices, dn.index_vector_dim,
                                        dn.start_indices_batching_dims)
    numbers = dataclasses.replace(
        dn, collapsed_slice_dims=tuple(sorted((*dn.collapsed_slice_dims,
                                               *dn.operand_batching_dims))),
        operand_batching_dims=(), start_indices_batching_dims=(),
        start_index_map=(*dn.start_index_map, *dn.operand_batching_dims))
    b.emit_into("stablehlo.gather", (operand, indices), op.results,
                {**op.attributes, "dimension_numbers": numbers}, op.regions)
    return b.ops


def scatter_without_batching(op: Op, program=None) -> list[Op]:
    """``stablehlo.scatter`` with input_batching_dims, as one without."""
    dn = op.attributes["scatter_dimension_numbers"]
    if not dn.input_batching_dims:
        return [op]
    b = OpBuilder(op.location)
    count = len(op.results)
    inputs, indices, updates = op.operands[:count], op.operands[count], op.operands[count + 1:]
    indices = _indices_with_batch_iotas(b, indices, dn.index_vector_dim,
                                        dn.scatter_indices_batching_dims)
    numbers = dataclasses.replace(
        dn, inserted_window_dims=tuple(sorted((*dn.inserted_window_dims,
                                               *dn.input_batching_dims))),
        input_batching_dims=(), scatter_indices_batching_dims=(),
        scatter_dims_to_operand_dims=(*dn.scatter_dims_to_operand_dims,
                                      *dn.input_batching_dims))
    b.emit_into("stablehlo.scatter", (*inputs, indices, *updates), op.results,
                {**op.attributes, "scatter_dimension_numbers": numbers}, op.regions)
    return b.ops
