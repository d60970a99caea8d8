"""TPU slices by name, laid out as libtpu lays them out (checked against libtpu 0.0.42.1's
compile-only topologies, ``tests/test_topology_vs_libtpu.py``).

A name is ``<generation>:<bounds>``: ``v5e:2x4`` (chips along x and y), ``v4:2x2x1``,
``tpu7x:2x2x1`` (x, y, z). Options, as ``get_topology_desc`` takes them: ``chips_per_host_bounds``
(default 2x2x1: libtpu's four chips per host) and ``num_slices`` (default 1).

The layout, libtpu's:
- a chip's global index is ``x + X * (y + Y * z)``; a device's id is ``index * devices_per_chip +
  core_on_chip``, plus ``(slice + 1) * 100000`` when there are several slices;
- hosts tile the slice in ``chips_per_host_bounds`` blocks, numbered x fastest; the device list
  is host by host, inside a host z, y, x, core (x fastest after the core);
- ``process_index`` is ``slice * hosts_per_slice + host``; ``slice_index`` exists only on
  multi-slice topologies.

``PJRTKIT_TPU_TOPOLOGY`` picks the live client's slice: the name with its options after commas,
e.g. ``v5e:2x2,num_slices=2`` (default ``v5e:2x4,chips_per_host_bounds=2x4x1``, a single-host
v5e-8). A client of one process runs every device: each is addressable, its ``process_index``
is 0, and the host libtpu would run it on is the device attribute ``host_index``. Under
``jax.distributed`` with one process per host (``hosts_per_slice * num_slices`` processes),
each process is that host: the devices, ids, coords and process indices are libtpu's for the
slice (``multi_host_topology``) and a process addresses its host's chips.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping
from typing import Any

from pjrtkit.errors import InvalidArgument
from pjrtkit.types import DeviceSpec, MemorySpaceSpec, Topology

from pjrtkit_tpu.generations import Generation, generation

TOPOLOGY_VARIABLE = "PJRTKIT_TPU_TOPOLOGY"
DEFAULT_TOPOLOGY = "v5e:2x4,chips_per_host_bounds=2x4x1"
DEFAULT_CHIPS_PER_HOST = (2, 2, 1)
SLICE_ID_STRIDE = 100000
KNOWN_OPTIONS = ("chips_per_host_bounds", "num_slices")


@dataclasses.dataclass(frozen=True)
class SliceLayout:
    """A parsed topology: generation, chip bounds, host bounds and slice count."""

    name: str
    generation: Generation
    chip_bounds: tuple[int, int, int]
    chips_per_host_bounds: tuple[int, int, int]
    num_slices: int

    @property
    def chips_per_slice(self) -> int:
        return math.prod(self.chip_bounds)

    @property
    def host_grid(self) -> tuple[int, int, int]:
        return tuple(c // h for c, h in zip(self.chip_bounds, self.chips_per_host_bounds))

    @property
    def hosts_per_slice(self) -> int:
        return math.prod(self.host_grid)

    @property
    def chips_per_host(self) -> int:
        return math.prod(self.chips_per_host_bounds)

    @property
    def device_count(self) -> int:
        return self.chips_per_slice * self.generation.devices_per_chip * self.num_slices


def _bounds(text: Any, what: str, rank: int | None = None) -> tuple[int, ...]:
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        parts = str(text).replace(",", "x").split("x")
    try:
        values = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise InvalidArgument(f"pjrtkit_tpu: {what} {text!r} is not a list of whole numbers "
                              f"such as 2x4 or 2x2x1") from None
    if not values or any(v < 1 for v in values) or (rank is not None and len(values) != rank):
        expected = f"{rank} positive numbers" if rank else "positive numbers"
        raise InvalidArgument(f"pjrtkit_tpu: {what} {text!r}: expected {expected}, e.g. "
                              f"{'2x4' if rank == 2 else '2x2x1'}")
    return values


def parse_layout(name: str, options: Mapping[str, Any] | None = None) -> SliceLayout:
    """``("v5e:2x4", {"chips_per_host_bounds": (2, 4, 1)})`` -> SliceLayout; InvalidArgument
    for an unknown generation, malformed bounds, unknown options, or hosts that do not tile."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise InvalidArgument(f"pjrtkit_tpu: topology {name!r}: unexpected options "
                              f"{', '.join(unknown)} (known: {', '.join(KNOWN_OPTIONS)})")
    generation_name, sep, bounds_text = name.partition(":")
    if not sep:
        raise InvalidArgument(f"pjrtkit_tpu: topology {name!r}: expected <generation>:<bounds>, "
                              f"e.g. v5e:2x4, v4:2x2x1, tpu7x:2x2x1")
    gen = generation(generation_name)
    bounds = _bounds(bounds_text, f"topology {name!r}: chip bounds", gen.name_rank)
    chip_bounds = (*bounds, 1, 1)[:3]
    host_bounds = _bounds(options.get("chips_per_host_bounds", DEFAULT_CHIPS_PER_HOST),
                          "chips_per_host_bounds", 3)
    if any(c % h for c, h in zip(chip_bounds, host_bounds)):
        raise InvalidArgument(
            f"pjrtkit_tpu: topology {name!r} ({'x'.join(map(str, chip_bounds))} chips) is not "
            f"divisible by chips_per_host_bounds {'x'.join(map(str, host_bounds))}; pass "
            f"chips_per_host_bounds that tile it (as libtpu requires)")
    try:
        num_slices = int(options.get("num_slices", 1))
    except (TypeError, ValueError):
        raise InvalidArgument(f"pjrtkit_tpu: num_slices {options['num_slices']!r} is not a "
                              f"whole number") from None
    if not 1 <= num_slices <= 64:
        raise InvalidArgument(f"pjrtkit_tpu: num_slices={num_slices} is out of range 1..64")
    layout = SliceLayout(name, gen, chip_bounds, host_bounds, num_slices)
    if layout.device_count > 4096:
        raise InvalidArgument(f"pjrtkit_tpu: topology {name!r} has {layout.device_count} "
                              f"devices; at most 4096 are supported")
    return layout


def parse_setting(text: str) -> SliceLayout:
    """``PJRTKIT_TPU_TOPOLOGY``'s form: ``v5e:2x4,chips_per_host_bounds=2x4x1,num_slices=2``."""
    name, *option_texts = [part.strip() for part in text.split(",")]
    options = {}
    for option in option_texts:
        key, sep, value = option.partition("=")
        if not sep:
            raise InvalidArgument(f"{TOPOLOGY_VARIABLE}={text!r}: option {option!r} is not "
                                  f"key=value")
        options[key.strip()] = value.strip()
    return parse_layout(name, options)


def configured_layout() -> SliceLayout:
    """The live client's slice, from ``PJRTKIT_TPU_TOPOLOGY`` (default a single-host v5e-8)."""
    return parse_setting(os.environ.get(TOPOLOGY_VARIABLE, "").strip() or DEFAULT_TOPOLOGY)


def memory_spaces(gen: Generation) -> tuple[MemorySpaceSpec, ...]:
    """HBM (the device's own ``hbm_bytes``) and the two host memory kinds (host RAM)."""
    return (MemorySpaceSpec("device", capacity_bytes=gen.hbm_bytes),
            MemorySpaceSpec("pinned_host"), MemorySpaceSpec("unpinned_host"))


def slice_topology(layout: SliceLayout, *, live: bool) -> Topology:
    """The devices of ``layout`` in libtpu's order. ``live``: a client's own devices (all in
    process 0, the libtpu host as attribute ``host_index``); else a compile-only topology with
    libtpu's process indices."""
    gen = layout.generation
    cx, cy, _ = layout.chip_bounds
    hx, hy, hz = layout.chips_per_host_bounds
    nx, ny, nz = layout.host_grid
    spaces = memory_spaces(gen)
    devices = []
    for slice_index in range(layout.num_slices):
        id_base = (slice_index + 1) * SLICE_ID_STRIDE if layout.num_slices > 1 else 0
        for host_z, host_y, host_x in itertools.product(range(nz), range(ny), range(nx)):
            host = host_x + nx * (host_y + ny * host_z)
            process = slice_index * layout.hosts_per_slice + host
            for dz, dy, dx in itertools.product(range(hz), range(hy), range(hx)):
                x, y, z = host_x * hx + dx, host_y * hy + dy, host_z * hz + dz
                chip = x + cx * (y + cy * z)
                for core in range(gen.devices_per_chip):
                    attributes = {"host_index": process, "chip_index": chip}
                    if layout.num_slices > 1:
                        attributes["slice_index"] = slice_index
                    devices.append(DeviceSpec(
                        id=id_base + chip * gen.devices_per_chip + core, kind=gen.device_kind,
                        process_index=0 if live else process,
                        local_hardware_id=len(devices), coords=(x, y, z), core_on_chip=core,
                        memory_spaces=spaces, default_memory_kind="device",
                        attributes=attributes))
    attributes = {
        "generation": gen.name, "chip_bounds": layout.chip_bounds,
        "chips_per_host_bounds": layout.chips_per_host_bounds,
        "chips_per_host": layout.chips_per_host, "hosts_per_slice": layout.hosts_per_slice,
        "num_slices": layout.num_slices, "device_count": len(devices),
        "hbm_bytes_per_device": gen.hbm_bytes,
    }
    return Topology(name=layout.name, devices=tuple(devices), attributes=attributes)


def multi_host_topology(layout: SliceLayout, num_nodes: int) -> Topology:
    """Every device of ``layout`` with libtpu's process indices, for a job of ``num_nodes``
    processes, one per host; ``local_hardware_id`` numbers each host's devices from 0."""
    hosts = layout.hosts_per_slice * layout.num_slices
    if num_nodes != hosts:
        raise InvalidArgument(
            f"pjrtkit_tpu: {TOPOLOGY_VARIABLE} {layout.name} ("
            f"{'x'.join(map(str, layout.chip_bounds))} chips, chips_per_host_bounds "
            f"{'x'.join(map(str, layout.chips_per_host_bounds))}, {layout.num_slices} "
            f"slice(s)) has {hosts} host(s); jax.distributed started {num_nodes} processes. "
            f"Run one process per host, or set chips_per_host_bounds to match")
    topology = slice_topology(layout, live=False)
    counts: dict[int, int] = {}
    devices = []
    for spec in topology.devices:
        local = counts.get(spec.process_index, 0)
        counts[spec.process_index] = local + 1
        devices.append(dataclasses.replace(spec, local_hardware_id=local))
    return dataclasses.replace(topology, devices=tuple(devices))
