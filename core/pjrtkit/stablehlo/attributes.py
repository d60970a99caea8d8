"""Decoded forms of StableHLO attributes.

The loader decodes every MLIR attribute into plain Python:

| MLIR attribute                               | Python value                                |
|----------------------------------------------|---------------------------------------------|
| DenseElementsAttr (incl. splat)              | ``np.ndarray`` of the element dtype, full shape |
| DenseI64ArrayAttr / DenseI32 / DenseBool     | ``tuple[int, ...]`` / ``tuple[bool, ...]``   |
| IntegerAttr / BoolAttr / FloatAttr           | ``int`` / ``bool`` / ``float``               |
| StringAttr / FlatSymbolRefAttr               | ``str`` (``bytes`` when not UTF-8)           |
| ArrayAttr / DictAttr                         | ``tuple`` / ``dict`` of decoded values       |
| TypeAttr                                     | the decoded type (TensorType, ...)          |
| #stablehlo.comparison_direction<LT>          | ``"LT"`` (enums decode to their name, below) |
| #stablehlo.dot<...>                          | ``DotDimensionNumbers``                      |
| #stablehlo.conv<...>                         | ``ConvDimensionNumbers``                     |
| #stablehlo.gather<...>                       | ``GatherDimensionNumbers``                   |
| #stablehlo.scatter<...>                      | ``ScatterDimensionNumbers``                  |
| #stablehlo.output_operand_alias<...>         | ``OutputOperandAlias``                       |
| #stablehlo.replica_group_mesh_axes<...>      | ``MeshAxesReplicaGroups`` (mesh resolved)    |
| anything else                                | ``OpaqueAttribute(text)``                    |

Enums decode to their names: comparison_type "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED",
"NOTYPE"; precision "DEFAULT"; rng_algorithm "DEFAULT"/"THREE_FRY"/"PHILOX"; fft_type "FFT"...;
transpose. Field names follow the StableHLO specification.
"""
from __future__ import annotations

import dataclasses

import numpy as np


def padding_pairs(padding, rank: int) -> tuple[tuple[int, int], ...]:
    """A window op's ``padding`` attribute (a (rank, 2) array, or None when absent) as
    (low, high) pairs per dimension."""
    if padding is None:
        return ((0, 0),) * rank
    return tuple((int(lo), int(hi)) for lo, hi in np.asarray(padding).reshape(rank, 2))


@dataclasses.dataclass(frozen=True)
class DotDimensionNumbers:
    lhs_batching_dimensions: tuple[int, ...]
    rhs_batching_dimensions: tuple[int, ...]
    lhs_contracting_dimensions: tuple[int, ...]
    rhs_contracting_dimensions: tuple[int, ...]

    def free_dimensions(self, lhs_rank: int, rhs_rank: int) -> tuple[list[int], list[int]]:
        """The lhs and rhs dimensions that are neither batch nor contracting, in order."""
        lhs_bound = {*self.lhs_batching_dimensions, *self.lhs_contracting_dimensions}
        rhs_bound = {*self.rhs_batching_dimensions, *self.rhs_contracting_dimensions}
        return ([d for d in range(lhs_rank) if d not in lhs_bound],
                [d for d in range(rhs_rank) if d not in rhs_bound])


@dataclasses.dataclass(frozen=True)
class ConvDimensionNumbers:
    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class GatherDimensionNumbers:
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...]
    start_indices_batching_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int


@dataclasses.dataclass(frozen=True)
class ScatterDimensionNumbers:
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    input_batching_dims: tuple[int, ...]
    scatter_indices_batching_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int


@dataclasses.dataclass(frozen=True)
class OutputOperandAlias:
    output_tuple_indices: tuple[int, ...]
    operand_index: int
    operand_tuple_indices: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class MeshAxis:
    name: str
    size: int


@dataclasses.dataclass(frozen=True)
class Mesh:
    """A logical device mesh (``sdy.mesh`` or ``#stablehlo.mesh``): its axes, major first, and
    the device ids in mesh order (empty: the iota 0..N-1)."""

    axes: tuple[MeshAxis, ...]
    device_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class AxisRef:
    """A mesh axis, or a sub-axis of it: ``name:(pre_size)size`` is the part of size ``size``
    after (more minor than) a major part of size ``pre_size``; ``size`` None is the whole axis."""

    name: str
    pre_size: int = 1
    size: int | None = None


@dataclasses.dataclass(frozen=True)
class MeshAxesReplicaGroups:
    """``#stablehlo.replica_group_mesh_axes``: the groups are the devices that differ only
    along ``axes`` of ``mesh`` (the loader resolves a ``@mesh`` symbol to its ``sdy.mesh``).
    ``pjrtkit.collectives.groups`` materializes them as XLA does."""

    mesh: Mesh
    axes: tuple[AxisRef, ...]


@dataclasses.dataclass(frozen=True)
class OpaqueAttribute:
    """An attribute the loader has no decoder for, kept as its MLIR text."""

    text: str
