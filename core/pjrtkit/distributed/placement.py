"""Where this process sits in a multi-process job: the ``PJRT_Client_Create`` options
``node_id``, ``num_nodes`` and ``partition_index`` (jaxlib passes them under
``jax.distributed``), and how long a rendezvous may wait (``PJRTKIT_DISTRIBUTED_TIMEOUT_S``)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pjrtkit.errors import InvalidArgument
from pjrtkit.settings import seconds_setting

TIMEOUT_VARIABLE = "PJRTKIT_DISTRIBUTED_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class Placement:
    """This process (``node_id``) among ``num_nodes``; ``partition_index`` is jaxlib's, kept
    for messages (pjrtkit gives it no meaning)."""

    node_id: int
    num_nodes: int
    partition_index: int | None = None

    @property
    def others(self) -> tuple[int, ...]:
        return tuple(n for n in range(self.num_nodes) if n != self.node_id)


def _whole(options: Mapping[str, Any], name: str, platform: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{platform}: client option {name}={value!r} is not a whole number")
    return int(value)


def placement_from_options(options: Mapping[str, Any], platform: str) -> Placement | None:
    """The job this client is part of, or None for a single process (no ``num_nodes``, or 1)."""
    num_nodes = _whole(options, "num_nodes", platform)
    node_id = _whole(options, "node_id", platform)
    partition = _whole(options, "partition_index", platform)
    if num_nodes is None or num_nodes == 1:
        if node_id not in (None, 0):
            raise InvalidArgument(f"{platform}: client option node_id={node_id} without "
                                  f"num_nodes > 1")
        return None
    if num_nodes < 1:
        raise InvalidArgument(f"{platform}: client option num_nodes={num_nodes} is not positive")
    if node_id is None or not 0 <= node_id < num_nodes:
        raise InvalidArgument(f"{platform}: client option node_id={node_id!r} is not in "
                              f"0..{num_nodes - 1} (num_nodes={num_nodes})")
    return Placement(node_id, num_nodes, partition)


def rendezvous_timeout_s() -> float:
    """How long the topology exchange and an engine's set-up wait for the other processes
    (``PJRTKIT_DISTRIBUTED_TIMEOUT_S``, default 300 s)."""
    return seconds_setting(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT_S)
