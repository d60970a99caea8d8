"""Typed records the hooks exchange. Plain frozen dataclasses: no C, no JAX objects.

A plugin builds these; the core turns them into runtime objects and PJRT handles.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

# The memory kinds JAX knows; every device of a pjrtkit backend has exactly these three.
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")

AttributeValue = int | float | bool | str | tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PlatformInfo:
    """Who the backend is. ``name`` is the JAX platform (``pjrtkit_cpu``) and must equal the
    PJRT platform name: JAX picks lowering rules by it. ``like_platform`` is the built-in JAX
    platform (``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``) whose ``lax.platform_dependent``
    branch the backend takes, or None for the default branch (``pjrtkit.jax_platform_like``)."""

    name: str
    version: str
    device_kind: str
    like_platform: str | None = None


@dataclasses.dataclass(frozen=True)
class MemorySpaceSpec:
    """One memory space of a device. ``capacity_bytes`` None means "as much as the host has"."""

    kind: str
    capacity_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One device of a topology.

    ``id`` is global and unique in the topology; ``local_hardware_id`` is the index among this
    process's devices. ``coords`` and ``core_on_chip`` are what ``jax.experimental.mesh_utils``
    reads; ``attributes`` are published through PJRT_DeviceDescription_Attributes.
    """

    id: int
    kind: str
    process_index: int = 0
    local_hardware_id: int = 0
    coords: tuple[int, ...] = (0, 0, 0)
    core_on_chip: int = 0
    memory_spaces: tuple[MemorySpaceSpec, ...] = tuple(MemorySpaceSpec(k) for k in MEMORY_KINDS)
    default_memory_kind: str = "device"
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)

    def memory_space(self, kind: str) -> MemorySpaceSpec:
        for space in self.memory_spaces:
            if space.kind == kind:
                return space
        raise KeyError(kind)


@dataclasses.dataclass(frozen=True)
class Topology:
    """A set of devices: either a live client's own devices (``pjrtkit_client_topology``) or a
    compile-only description for ahead-of-time compilation (``pjrtkit_make_topology``)."""

    name: str
    devices: tuple[DeviceSpec, ...]
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    """PJRT_Device_MemoryStats. ``None`` fields are reported as not set."""

    bytes_in_use: int
    peak_bytes_in_use: int | None = None
    num_allocs: int | None = None
    largest_alloc_size: int | None = None
    bytes_limit: int | None = None


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """The parts of xla::CompileOptionsProto a backend acts on; ``serialized`` keeps the rest."""

    num_replicas: int
    num_partitions: int
    device_assignment: tuple[tuple[int, ...], ...] | None  # [replica][partition] -> device id
    use_spmd_partitioning: bool
    serialized: bytes = dataclasses.field(default=b"", repr=False)


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    """Static cost of one execution, estimated at compile time."""

    flops: float = 0.0
    bytes_accessed: float = 0.0
    transcendentals: float = 0.0


@dataclasses.dataclass(frozen=True)
class CompiledProgram:
    """What ``pjrtkit_compile`` returns.

    ``executable`` is the plugin's own object, opaque to the core and handed back to
    ``pjrtkit_execute``. ``cost`` feeds PJRT_Executable_GetCostAnalysis and the core's choice of
    running a cheap program inline on the caller's thread. ``temp_bytes`` feeds
    PJRT_Executable_GetCompiledMemoryStats.
    """

    executable: Any
    cost: CostEstimate = CostEstimate()
    code_size_bytes: int = 0
    temp_bytes: int = 0
