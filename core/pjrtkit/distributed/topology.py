"""The topology exchange: every process's devices over the key-value store, so that each
process reports the same global device list (jaxlib trusts what the plugin reports; it does
not exchange topologies itself for a C-API plugin).

Two kinds of plugin (``MultiProcessSupport.global_topology``):
- per-process (a cpu): each process publishes its own devices; the global list is process 0's
  devices, then process 1's, ...; global ids are numbered 0, 1, ... in that order, each device
  keeps its ``local_hardware_id`` and gets its process's index;
- global (a virtual TPU slice): the plugin computes every process's devices itself; each
  process publishes a digest of its answer and the core checks they all agree.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from pjrtkit.distributed.placement import Placement
from pjrtkit.distributed.store import KeyValueStore
from pjrtkit.errors import InvalidArgument
from pjrtkit.types import DeviceSpec, MemorySpaceSpec, Topology


def _attribute(value):
    return list(value) if isinstance(value, tuple) else value


def encode_devices(devices: Sequence[DeviceSpec]) -> bytes:
    """Devices as JSON (the form that goes through the store)."""
    return json.dumps([{
        "id": d.id, "kind": d.kind, "process_index": d.process_index,
        "local_hardware_id": d.local_hardware_id, "coords": list(d.coords),
        "core_on_chip": d.core_on_chip,
        "memory_spaces": [[s.kind, s.capacity_bytes] for s in d.memory_spaces],
        "default_memory_kind": d.default_memory_kind,
        "attributes": {k: _attribute(v) for k, v in d.attributes.items()},
    } for d in devices], sort_keys=True).encode()


def decode_devices(blob: bytes) -> tuple[DeviceSpec, ...]:
    return tuple(DeviceSpec(
        id=int(d["id"]), kind=d["kind"], process_index=int(d["process_index"]),
        local_hardware_id=int(d["local_hardware_id"]), coords=tuple(d["coords"]),
        core_on_chip=int(d["core_on_chip"]),
        memory_spaces=tuple(MemorySpaceSpec(k, c) for k, c in d["memory_spaces"]),
        default_memory_kind=d["default_memory_kind"],
        attributes={k: tuple(v) if isinstance(v, list) else v
                    for k, v in d["attributes"].items()},
    ) for d in json.loads(blob))


def _gather(store: KeyValueStore, placement: Placement, key: str, mine: bytes,
            timeout_s: float, platform: str) -> list[bytes]:
    store.put(f"{key}/{placement.node_id}", mine)
    values = []
    for node in range(placement.num_nodes):
        if node == placement.node_id:
            values.append(mine)
            continue
        try:
            values.append(store.get(f"{key}/{node}", timeout_s))
        except Exception as exc:
            raise type(exc)(f"{platform}: process {placement.node_id} waited {timeout_s:g} s "
                            f"for process {node}'s topology and it did not come (has process "
                            f"{node} created its {platform} client? {exc})") from exc
    return values


def exchange_topology(local: Topology, placement: Placement, store: KeyValueStore, *,
                      global_topology: bool, timeout_s: float, platform: str) -> Topology:
    """The topology every process of the job reports (see the module's docstring)."""
    if global_topology:
        return _agreed_global(local, placement, store, timeout_s, platform)
    for d in local.devices:
        if d.process_index != 0:
            raise InvalidArgument(f"{platform}: pjrtkit_client_topology returned device {d.id} "
                                  f"with process_index {d.process_index}; a per-process "
                                  f"topology has process_index 0 (the core sets it)")
    blobs = _gather(store, placement, "topology", encode_devices(local.devices), timeout_s,
                    platform)
    devices = []
    for node, blob in enumerate(blobs):
        for spec in decode_devices(blob):
            devices.append(DeviceSpec(
                id=len(devices), kind=spec.kind, process_index=node,
                local_hardware_id=spec.local_hardware_id, coords=spec.coords,
                core_on_chip=spec.core_on_chip, memory_spaces=spec.memory_spaces,
                default_memory_kind=spec.default_memory_kind, attributes=spec.attributes))
        if not decode_devices(blob):
            raise InvalidArgument(f"{platform}: process {node} has no devices")
    attributes = dict(local.attributes, num_processes=placement.num_nodes)
    return Topology(name=local.name, devices=tuple(devices), attributes=attributes)


def _agreed_global(local: Topology, placement: Placement, store: KeyValueStore,
                   timeout_s: float, platform: str) -> Topology:
    counts = [0] * placement.num_nodes
    for d in local.devices:
        if not 0 <= d.process_index < placement.num_nodes:
            raise InvalidArgument(
                f"{platform}: topology {local.name!r} puts device {d.id} in process "
                f"{d.process_index}, but the job has {placement.num_nodes} processes")
        counts[d.process_index] += 1
    empty = [p for p, n in enumerate(counts) if n == 0]
    if empty:
        raise InvalidArgument(f"{platform}: topology {local.name!r} has devices for "
                              f"{placement.num_nodes - len(empty)} process(es), but the job "
                              f"has {placement.num_nodes} (no device for process(es) {empty})")
    digest = hashlib.sha256(encode_devices(local.devices)).hexdigest()
    mine = json.dumps({"name": local.name, "devices": len(local.devices),
                       "digest": digest}).encode()
    views = [json.loads(v) for v in _gather(store, placement, "topology-digest", mine,
                                            timeout_s, platform)]
    ours = json.loads(mine)
    for node, view in enumerate(views):
        if view != ours:
            raise InvalidArgument(
                f"{platform}: process {node} reports topology {view['name']!r} with "
                f"{view['devices']} devices, process {placement.node_id} reports "
                f"{ours['name']!r} with {ours['devices']} (digests {view['digest'][:12]} and "
                f"{digest[:12]}); every process must configure the same slice")
    return local
