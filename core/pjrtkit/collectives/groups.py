"""Which devices take part in a collective, as StableHLO specifies (its "process groups").

A device of a launch is named by its position ``replica * num_partitions + partition`` in the
device assignment (StableHLO's "global device id"). Modes, by op:

- ``all_reduce``, ``all_gather``, ``reduce_scatter``: no channel (handle <= 0) ->
  cross_replica; a channel -> cross_replica_and_partition; a channel and
  ``use_global_device_ids`` -> flattened_ids.
- ``all_to_all``, ``collective_permute``, ``collective_broadcast``: a channel ->
  cross_partition, else cross_replica.

An empty replica_groups list means every replica (or partition) in one group.
"""
from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.stablehlo.attributes import AxisRef, MeshAxesReplicaGroups, OpaqueAttribute

CROSS_REPLICA = "cross_replica"
CROSS_PARTITION = "cross_partition"
CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
FLATTENED_IDS = "flattened_ids"

_HANDLE = re.compile(r"handle\s*=\s*(-?\d+)")

# Ops whose groups follow all_reduce's rule (the others follow all_to_all's).
_REDUCING_RULE = frozenset({"stablehlo.all_reduce", "stablehlo.all_gather",
                            "stablehlo.reduce_scatter"})


def channel_id(op) -> int:
    """The op's channel handle (0 when it has none). The loader keeps
    ``#stablehlo.channel_handle<handle = 1, type = 0>`` as its printed text."""
    attribute = op.attributes.get("channel_handle")
    if attribute is None:
        return 0
    handle = getattr(attribute, "handle", None)
    if handle is not None:
        return int(handle)
    found = _HANDLE.search(str(getattr(attribute, "text", attribute)))
    return int(found.group(1)) if found else 0


def group_mode(op) -> str:
    channel = channel_id(op) > 0
    if op.name in _REDUCING_RULE:
        if not channel:
            return CROSS_REPLICA
        return FLATTENED_IDS if op.attributes.get("use_global_device_ids") else \
            CROSS_REPLICA_AND_PARTITION
    return CROSS_PARTITION if channel else CROSS_REPLICA


def replica_groups(op) -> list[list[int]]:
    """The op's replica_groups as lists of ids, padding (-1) dropped."""
    groups = op.attributes.get("replica_groups")
    if groups is None:
        return []
    if isinstance(groups, MeshAxesReplicaGroups):
        return mesh_axes_groups(groups, op.name)
    if isinstance(groups, OpaqueAttribute):
        raise Unimplemented(f"{op.name}: replica groups given as {groups.text} are not "
                            "supported (dense replica_groups and mesh axes are)")
    array = np.asarray(groups, dtype=np.int64)
    if array.size == 0:
        return []
    return [[int(i) for i in row if i >= 0] for row in array.reshape(array.shape[0], -1)]


def mesh_axes_groups(groups: MeshAxesReplicaGroups, op_name: str = "collective"
                     ) -> list[list[int]]:
    """Dense groups of ``#stablehlo.replica_group_mesh_axes``, as XLA materializes them
    (``MeshAxesReplicaGroupList::flattened_replica_groups``; JAX 0.11 and later write them for
    shard_map's collectives): the mesh's device ids are reshaped to the mesh, each grouped axis
    split where its sub-axes need; the grouped parts move last, in the order named, and each
    row of what is left is one group."""
    mesh = groups.mesh
    sizes = {axis.name: axis.size for axis in mesh.axes}
    total = int(np.prod([axis.size for axis in mesh.axes], dtype=np.int64))
    ids = np.asarray(mesh.device_ids or range(total), dtype=np.int64)
    if ids.size != total:
        raise InvalidArgument(f"{op_name}: mesh {mesh} lists {ids.size} device ids for "
                              f"{total} devices")
    named: dict[str, list[tuple[int, int, AxisRef]]] = {}
    for order, ref in enumerate(groups.axes):
        if ref.name not in sizes:
            raise InvalidArgument(f"{op_name}: replica groups name axis {ref.name!r}, which "
                                  f"mesh {[a.name for a in mesh.axes]} does not have")
        named.setdefault(ref.name, []).append((ref.pre_size, order, ref))
    dims: list[int] = []
    grouped: list[tuple[int, int]] = []  # (position in the order named, reshaped dimension)
    for axis in mesh.axes:
        refs = sorted(named.get(axis.name, ()), key=lambda entry: entry[0])
        if not refs:
            dims.append(axis.size)
            continue
        covered = 1  # product of the sizes of the major parts placed so far
        for pre_size, order, ref in refs:
            size = axis.size if ref.size is None else ref.size
            if pre_size % covered or axis.size % (pre_size * size):
                raise InvalidArgument(f"{op_name}: sub-axis {ref} does not fit mesh axis "
                                      f"{axis.name}={axis.size}")
            if pre_size != covered:
                dims.append(pre_size // covered)
            grouped.append((order, len(dims)))
            dims.append(size)
            covered = pre_size * size
        if covered != axis.size:
            dims.append(axis.size // covered)
    # Group members vary fastest along the axis named last (checked against jaxlib 0.11 and
    # 0.12's XLA:CPU: all_gather over ("y", "x") of an ("x", "y") mesh is y-major there).
    grouped_dims = [dim for _, dim in sorted(grouped)]
    rest = [d for d in range(len(dims)) if d not in grouped_dims]
    members = int(np.prod([dims[d] for d in grouped_dims], dtype=np.int64))
    table = ids.reshape(dims).transpose(rest + grouped_dims).reshape(-1, members)
    return [[int(i) for i in row] for row in table]


def process_groups(mode: str, groups: list[list[int]], num_replicas: int,
                   num_partitions: int) -> list[tuple[int, ...]]:
    """Every process group as a tuple of device positions, in group order."""
    replicas, partitions = range(num_replicas), range(num_partitions)

    def position(replica: int, partition: int) -> int:
        if not (0 <= replica < num_replicas and 0 <= partition < num_partitions):
            raise InvalidArgument(f"collective names replica {replica}, partition {partition} "
                                  f"but the program runs on {num_replicas} replica(s) x "
                                  f"{num_partitions} partition(s)")
        return replica * num_partitions + partition

    if mode == CROSS_REPLICA:
        groups = groups or [list(replicas)]
        return [tuple(position(r, p) for r in g) for p in partitions for g in groups]
    if mode == CROSS_PARTITION:
        groups = groups or [list(partitions)]
        return [tuple(position(r, p) for p in g) for r in replicas for g in groups]
    if mode == CROSS_REPLICA_AND_PARTITION:
        groups = groups or [list(replicas)]
        return [tuple(position(r, p) for p in partitions for r in g) for g in groups]
    if mode == FLATTENED_IDS:
        total = num_replicas * num_partitions
        groups = groups or [list(range(total))]
        for g in groups:
            for i in g:
                if not 0 <= i < total:
                    raise InvalidArgument(f"collective names device {i} but the program runs "
                                          f"on {total} device(s)")
        return [tuple(g) for g in groups]
    raise ValueError(f"unknown collective group mode {mode!r}")


def group_of(position: int, groups: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The process group holding ``position``, or None when it is in none."""
    for group in groups:
        if position in group:
            return group
    return None


def id_space(mode: str, num_replicas: int, num_partitions: int, position: int
             ) -> tuple[tuple[int, ...], Callable[[int], int]]:
    """For ops naming devices by pairs (collective_permute): the positions that share an id
    space with ``position`` and a function from an id in the pairs to a position."""
    replica, partition = divmod(position, num_partitions)
    if mode == CROSS_PARTITION:
        members = tuple(replica * num_partitions + p for p in range(num_partitions))
        return members, lambda i: replica * num_partitions + i
    members = tuple(r * num_partitions + partition for r in range(num_replicas))
    return members, lambda i: i * num_partitions + partition
