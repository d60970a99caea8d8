"""The cpu backend's devices: N host "devices" (``PJRTKIT_CPU_DEVICES``, else JAX's
``jax_num_cpu_devices``, else 1), each with the three memory kinds, all backed by host RAM:
declared without a capacity, so the core counts them all against one pool, the host's memory
(``PJRTKIT_CPU_MEMORY_LIMIT`` caps each device)."""
from __future__ import annotations

import os

from pjrtkit.errors import InvalidArgument
from pjrtkit.types import DeviceSpec, MemorySpaceSpec, Topology

DEVICE_COUNT_VARIABLE = "PJRTKIT_CPU_DEVICES"
DEVICE_KIND = "cpu"
MAX_DEVICES = 1024


def device_count(options=None) -> int:
    """``PJRTKIT_CPU_DEVICES``; when it is unset, JAX's own ``jax_num_cpu_devices`` setting
    (``jax.config.update("jax_num_cpu_devices", N)``, which JAX's tests and many users set);
    else 1."""
    raw = os.environ.get(DEVICE_COUNT_VARIABLE, "").strip()
    if not raw:
        from pjrtkit import jax_compat

        configured = jax_compat.configured_cpu_device_count()
        raw = str(configured) if configured is not None else "1"
    try:
        count = int(raw)
    except ValueError:
        raise InvalidArgument(f"{DEVICE_COUNT_VARIABLE}={raw!r} is not a whole number of "
                              f"devices") from None
    if not 1 <= count <= MAX_DEVICES:
        raise InvalidArgument(f"{DEVICE_COUNT_VARIABLE}={count} is out of range 1..{MAX_DEVICES}")
    return count


def cpu_topology(name: str, count: int) -> Topology:
    spaces = (MemorySpaceSpec("device"), MemorySpaceSpec("pinned_host"),
              MemorySpaceSpec("unpinned_host"))
    devices = tuple(
        DeviceSpec(id=i, kind=DEVICE_KIND, process_index=0, local_hardware_id=i,
                   coords=(i, 0, 0), core_on_chip=0, memory_spaces=spaces,
                   default_memory_kind="device")
        for i in range(count))
    return Topology(name=name, devices=devices, attributes={"device_count": count})


def parse_topology_name(name: str) -> int | None:
    """``"cpu:4"`` -> 4 devices; ``""``/``"cpu"`` -> the configured count; else None."""
    if name in ("", "cpu", "pjrtkit_cpu"):
        return device_count()
    for prefix in ("cpu:", "pjrtkit_cpu:"):
        if name.startswith(prefix):
            try:
                count = int(name[len(prefix):])
            except ValueError:
                raise InvalidArgument(f"topology {name!r}: expected '{prefix}N' with N a whole "
                                      f"number of devices") from None
            if not 1 <= count <= MAX_DEVICES:
                raise InvalidArgument(f"topology {name!r}: device count out of range "
                                      f"1..{MAX_DEVICES}")
            return count
    return None
