"""Topology descriptions: a set of device descriptions, live or compile-only (AOT)."""
from __future__ import annotations

import dataclasses
import json

from pjrtkit.runtime.devices import DeviceDescription
from pjrtkit.runtime.executable import Executable, load_and_compile
from pjrtkit.types import Topology


# jaxlib cross-compiles a compile-only topology through a live client of the same platform when
# the platform versions match, calling PJRT_Compile from a worker thread while the caller keeps
# the GIL: a deadlock for a plugin written in Python. A distinct version for compile-only
# topologies keeps jaxlib on the client-free path (PJRT_Compile against the topology).
COMPILE_ONLY_SUFFIX = " (compile-only)"


class TopologyDescription:
    def __init__(self, backend, topology: Topology, *, compile_only: bool = False):
        self.backend = backend
        self.topology = topology
        self.name = topology.name
        self.platform_name = backend.platform_name
        self.platform_version = backend.platform.version + (
            COMPILE_ONLY_SUFFIX if compile_only else "")
        self.device_descriptions = [DeviceDescription(spec, backend.platform_name)
                                    for spec in topology.devices]
        self.attributes = dict(topology.attributes)

    def serialize(self) -> bytes:
        return json.dumps({"platform": self.platform_name, "name": self.name,
                           "devices": [dataclasses.asdict(d) for d in self.topology.devices]},
                          default=str).encode()

    def compile(self, code: bytes, fmt: str, compile_options: bytes) -> Executable:
        """PJRT_Compile: compile against these devices without a client."""

        def specs_for(options):
            count = options.num_replicas * options.num_partitions
            if options.device_assignment is not None:
                ids = {i for row in options.device_assignment for i in row}
                return [d for d in self.topology.devices if d.id in ids]
            return list(self.topology.devices[:count])

        return load_and_compile(self.backend, code, fmt, compile_options, specs_for)
