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
from pjrtkit.stablehlo.attributes import OpaqueAttribute

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
    if isinstance(groups, OpaqueAttribute):
        # jaxlib 0.12's partitioner names groups by mesh axes
        # (#stablehlo.replica_group_mesh_axes<mesh = @mesh, axes = [...]>), not as dense ids.
        raise Unimplemented(f"{op.name}: replica groups given as {groups.text} are not "
                            "supported yet (only dense replica_groups, as jaxlib 0.10 emits)")
    array = np.asarray(groups, dtype=np.int64)
    if array.size == 0:
        return []
    return [[int(i) for i in row if i >= 0] for row in array.reshape(array.shape[0], -1)]


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
