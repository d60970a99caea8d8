"""A test backend with its own device memory, as the tpu plugin will declare HBM: the template
backend's hooks, but two devices whose ``device`` memory has a fixed capacity
(``MemorySpaceSpec("device", HBM_BYTES)``, counted per device) and whose ``pinned_host`` memory
is host RAM (no capacity: the client's one host pool). ``tests/test_memory_limits.py`` drives it.
"""
from __future__ import annotations

from template_backend import (pjrtkit_capabilities, pjrtkit_compile,  # noqa: F401 (hooks)
                              pjrtkit_copy_buffer, pjrtkit_transfer_to_device,
                              pjrtkit_transfer_to_host)

from pjrtkit import hookimpl
from pjrtkit.types import DeviceSpec, MemorySpaceSpec, PlatformInfo, Topology

PLATFORM = "pjrtkit_hbm"
HBM_BYTES = 1 << 20


@hookimpl
def pjrtkit_platform():
    return PlatformInfo(name=PLATFORM, version="hbm 0.1", device_kind="hbm")


@hookimpl
def pjrtkit_client_topology(options):
    spaces = (MemorySpaceSpec("device", HBM_BYTES), MemorySpaceSpec("pinned_host"))
    return Topology("hbm", tuple(DeviceSpec(id=i, kind="hbm", local_hardware_id=i,
                                            memory_spaces=spaces) for i in range(2)))
