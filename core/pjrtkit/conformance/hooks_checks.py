"""Layer 2: the hook contract, driven through the ``pjrtkit.backend.Backend`` facade.

Each check calls the backend's hooks the way the core does and holds the answers to what
``pjrtkit/hookspecs.py`` promises: topology invariants, compile-only topologies, bit-exact
transfers for every dtype, copies that do not alias, memory statistics, and the compile/execute
contract (a program in, outputs of the declared shapes and dtypes out; an op the backend lacks is
UNIMPLEMENTED at compile time, never at execute time). Every hook in ``hookspecs.py`` is called
by at least one check here (``tests/conformance/test_hooks_layer.py`` proves it).

Programs are written as StableHLO text, so this layer needs no JAX backend.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.jax_platform_like import BUILTIN_PLATFORMS
from pjrtkit.conformance.checks import Failed, Skipped, Unsupported, check, expect
from pjrtkit.conformance.hooks_support import (LAYER, STANDARD_DTYPES, as_host, bits,
                                                       client_topology, declared_dtypes,
                                                       first_device, is_unimplemented,
                                                       round_trip, sample)
from pjrtkit.types import MEMORY_KINDS, DeviceSpec, MemoryStats, PlatformInfo, Topology

UNKNOWN_TOPOLOGY = "pjrtkit-conformance-no-such-topology"


# ---- platform ---------------------------------------------------------------------------------

@check("hooks.platform.info", layer=LAYER)
def platform_info(backend):
    """pjrtkit_platform names the platform with a non-empty name, version and device kind, the
    same on every call"""
    info = backend.plugin_manager.hook.pjrtkit_platform()
    expect(isinstance(info, PlatformInfo), "pjrtkit_platform returns a PlatformInfo",
           expected="PlatformInfo", actual=type(info).__name__)
    for field in ("name", "version", "device_kind"):
        value = getattr(info, field)
        expect(isinstance(value, str) and value != "", f"PlatformInfo.{field} is a non-empty str",
               expected="non-empty str", actual=repr(value))
    again = backend.plugin_manager.hook.pjrtkit_platform()
    expect(again == info, "pjrtkit_platform answers the same on every call",
           expected=info, actual=again)
    return f"{info.name} {info.version}"


@check("hooks.platform.name", layer=LAYER)
def platform_name(backend):
    """the platform name is a lower-case identifier that does not take over one of XLA's own
    platforms (JAX picks lowering rules and devices by it)"""
    name = backend.platform.name
    expect(re.fullmatch(r"[a-z][a-z0-9_]*", name) is not None,
           "the platform name is a lower-case identifier", expected="[a-z][a-z0-9_]*",
           actual=name)
    expect(name not in ("cpu", "gpu", "cuda", "rocm", "tpu", "interpreter"),
           "the platform name is not one of XLA's own platforms", expected="a new name",
           actual=name)
    return name


@check("hooks.platform.like", layer=LAYER)
def platform_like(backend):
    """PlatformInfo.like_platform is None or one of JAX's built-in platforms (its
    lax.platform_dependent branch is taken)"""
    like = backend.platform.like_platform
    expect(like is None or like in BUILTIN_PLATFORMS,
           "like_platform names a built-in JAX platform or is None",
           expected=f"None or one of {sorted(BUILTIN_PLATFORMS)}", actual=repr(like))
    return f"like {like}"


# ---- topology ---------------------------------------------------------------------------------

@check("hooks.topology.devices", layer=LAYER)
def topology_devices(backend):
    """pjrtkit_client_topology returns a Topology of DeviceSpec records, at least one"""
    topology = client_topology(backend)
    for d in topology.devices:
        expect(isinstance(d, DeviceSpec), "every device is a DeviceSpec", expected="DeviceSpec",
               actual=type(d).__name__)
    return f"{len(topology.devices)} device(s)"


@check("hooks.topology.unique_ids", layer=LAYER)
def topology_unique_ids(backend):
    """device ids are non-negative integers, unique in the topology"""
    ids = [d.id for d in client_topology(backend).devices]
    expect(all(isinstance(i, int) and i >= 0 for i in ids), "device ids are ints >= 0",
           expected="ints >= 0", actual=ids)
    expect(len(set(ids)) == len(ids), "device ids are unique", expected="unique ids",
           actual=ids)


@check("hooks.topology.process_index", layer=LAYER)
def topology_process_index(backend):
    """every device of a live client belongs to this process (process_index 0)"""
    indices = [d.process_index for d in client_topology(backend).devices]
    expect(all(i == 0 for i in indices), "a live client's devices have process_index 0",
           expected=[0] * len(indices), actual=indices)


@check("hooks.topology.local_hardware_ids", layer=LAYER)
def topology_local_hardware_ids(backend):
    """local hardware ids are non-negative and unique among the process's devices"""
    ids = [d.local_hardware_id for d in client_topology(backend).devices]
    expect(all(isinstance(i, int) and i >= 0 for i in ids) and len(set(ids)) == len(ids),
           "local_hardware_id values are unique ints >= 0", expected="unique ints >= 0",
           actual=ids)


@check("hooks.topology.coords", layer=LAYER)
def topology_coords(backend):
    """coords are tuples of non-negative ints of one length; (coords, core_on_chip) is unique
    per device (jax.experimental.mesh_utils builds meshes from them)"""
    devices = client_topology(backend).devices
    coords = [d.coords for d in devices]
    expect(all(isinstance(c, tuple) and all(isinstance(v, int) and v >= 0 for v in c)
               for c in coords), "coords are tuples of ints >= 0", expected="tuple[int, ...]",
           actual=coords)
    expect(len({len(c) for c in coords}) == 1, "every device's coords have the same length",
           expected="one length", actual=coords)
    places = [(d.coords, d.core_on_chip) for d in devices]
    expect(len(set(places)) == len(places), "(coords, core_on_chip) is unique per device",
           expected="unique", actual=places)


@check("hooks.topology.device_kind", layer=LAYER)
def topology_device_kind(backend):
    """every device has a non-empty kind"""
    kinds = [d.kind for d in client_topology(backend).devices]
    expect(all(isinstance(k, str) and k for k in kinds), "device kinds are non-empty strings",
           expected="non-empty str", actual=kinds)


@check("hooks.topology.memory_kinds", layer=LAYER)
def topology_memory_kinds(backend):
    """every device's memory spaces have standard kind names (device, pinned_host,
    unpinned_host), each at most once, and include 'device'"""
    for d in client_topology(backend).devices:
        kinds = [m.kind for m in d.memory_spaces]
        expect(set(kinds) <= set(MEMORY_KINDS), f"device {d.id}: memory kinds are standard",
               expected=list(MEMORY_KINDS), actual=kinds)
        expect(len(set(kinds)) == len(kinds), f"device {d.id}: each memory kind appears once",
               expected="unique kinds", actual=kinds)
        expect("device" in kinds, f"device {d.id}: has a 'device' memory",
               expected="'device' in kinds", actual=kinds)


@check("hooks.topology.default_memory", layer=LAYER)
def topology_default_memory(backend):
    """every device has exactly one default memory, one of its own memory spaces"""
    for d in client_topology(backend).devices:
        matches = [m for m in d.memory_spaces if m.kind == d.default_memory_kind]
        expect(len(matches) == 1, f"device {d.id}: default_memory_kind names exactly one of its "
               f"memory spaces", expected=f"one space of kind {d.default_memory_kind!r}",
               actual=[m.kind for m in d.memory_spaces])


@check("hooks.topology.capacity", layer=LAYER)
def topology_capacity(backend):
    """memory capacities are unknown (None) or positive byte counts"""
    for d in client_topology(backend).devices:
        for m in d.memory_spaces:
            c = m.capacity_bytes
            expect(c is None or (isinstance(c, int) and c > 0),
                   f"device {d.id} memory {m.kind}: capacity_bytes is None or > 0",
                   expected="None or int > 0", actual=c)


@check("hooks.topology.stable", layer=LAYER)
def topology_stable(backend):
    """pjrtkit_client_topology answers the same topology on every call"""
    first, second = client_topology(backend), client_topology(backend)
    expect(first == second, "two calls give equal topologies", expected=first, actual=second)


# ---- compile-only (AOT) topologies ------------------------------------------------------------

def _aot_default(backend) -> Topology:
    try:
        return backend.make_topology(name="", options={})
    except PjrtError as exc:
        if exc.code in (ErrorCode.UNIMPLEMENTED, ErrorCode.INVALID_ARGUMENT):
            raise Unsupported("compile-only (AOT) topologies",
                              f"pjrtkit_make_topology('') answered {exc.code.name}: {exc}") from exc
        raise


@check("hooks.make_topology.default", layer=LAYER, mandatory=False,
       capability="compile-only (AOT) topologies")
def make_topology_default(backend):
    """pjrtkit_make_topology('') returns the backend's default compile-only topology, with unique
    ids and one default memory per device"""
    topology = _aot_default(backend)
    expect(isinstance(topology, Topology) and topology.devices,
           "the default compile-only topology is a Topology with devices",
           expected="Topology with >= 1 device", actual=topology)
    ids = [d.id for d in topology.devices]
    expect(len(set(ids)) == len(ids), "compile-only device ids are unique",
           expected="unique ids", actual=ids)
    for d in topology.devices:
        expect(sum(m.kind == d.default_memory_kind for m in d.memory_spaces) == 1,
               f"compile-only device {d.id} has exactly one default memory",
               expected=d.default_memory_kind, actual=[m.kind for m in d.memory_spaces])
    return f"{topology.name!r}: {len(topology.devices)} device(s)"


@check("hooks.make_topology.unknown_name", layer=LAYER, mandatory=False,
       capability="compile-only (AOT) topologies")
def make_topology_unknown_name(backend):
    """pjrtkit_make_topology returns None for a name it does not know (the core answers
    INVALID_ARGUMENT), instead of inventing a topology or failing otherwise"""
    _aot_default(backend)
    answer = backend.plugin_manager.hook.pjrtkit_make_topology(name=UNKNOWN_TOPOLOGY, options={})
    expect(answer is None, f"pjrtkit_make_topology({UNKNOWN_TOPOLOGY!r}) returns None",
           expected=None, actual=answer)
    try:
        backend.make_topology(name=UNKNOWN_TOPOLOGY, options={})
    except PjrtError as exc:
        expect(exc.code == ErrorCode.INVALID_ARGUMENT, "an unknown topology name is "
               "INVALID_ARGUMENT", expected="INVALID_ARGUMENT", actual=exc.code.name)
    else:
        raise Failed("an unknown topology name is INVALID_ARGUMENT",
                     expected="INVALID_ARGUMENT", actual="a topology")


@check("hooks.make_topology.matches_client", layer=LAYER, mandatory=False,
       capability="compile-only (AOT) topologies")
def make_topology_matches_client(backend):
    """a compile-only topology describes devices like the live client's: same device kind and
    memory kinds"""
    aot = _aot_default(backend)
    live = first_device(backend)
    for d in aot.devices:
        expect(d.kind == live.kind, f"compile-only device {d.id} has the live device kind",
               expected=live.kind, actual=d.kind)
        expect({m.kind for m in d.memory_spaces} == {m.kind for m in live.memory_spaces},
               f"compile-only device {d.id} has the live memory kinds",
               expected=sorted(m.kind for m in live.memory_spaces),
               actual=sorted(m.kind for m in d.memory_spaces))


# ---- transfers --------------------------------------------------------------------------------

def _transfer_check(dtype: np.dtype):
    def run(backend):
        declared = declared_dtypes(backend)
        device = first_device(backend)
        array = sample(dtype, (3, 5), seed=dtype.num)
        try:
            round_trip(backend, array, device, device.default_memory_kind)
        except PjrtError as exc:
            if is_unimplemented(exc):
                if declared is not None and dtype in declared:
                    raise Failed(f"{dtype} is a declared dtype, but storing it is UNIMPLEMENTED",
                                 expected="a payload", actual=f"UNIMPLEMENTED: {exc}") from exc
                raise Unsupported(f"dtype {dtype}", str(exc)) from exc
            raise
        if declared is not None and dtype not in declared:
            return f"round-trips, though {dtype} is not among the declared dtypes"
        return ""

    run.__doc__ = f"a {dtype} array stored on the device reads back bit-exactly"
    return run


for _dtype in STANDARD_DTYPES:
    check(f"hooks.transfer.round_trip[{_dtype.name}]", layer=LAYER, mandatory=False,
          capability=f"dtype {_dtype.name}")(_transfer_check(_dtype))


@check("hooks.transfer.every_memory_kind", layer=LAYER)
def transfer_every_memory_kind(backend):
    """an array stored in each of the device's memory kinds reads back bit-exactly"""
    device = first_device(backend)
    for space in device.memory_spaces:
        round_trip(backend, sample(np.float32, (4, 3), seed=7), device, space.kind)
    return ", ".join(m.kind for m in device.memory_spaces)


@check("hooks.transfer.shapes", layer=LAYER)
def transfer_shapes(backend):
    """scalars, zero-size arrays and a large (1e6-element) array round-trip with their shapes"""
    device = first_device(backend)
    for shape in ((), (0,), (3, 0, 2), (1_000_000,)):
        round_trip(backend, sample(np.float32, shape, seed=len(shape)), device,
                    device.default_memory_kind)


@check("hooks.transfer.every_device", layer=LAYER)
def transfer_every_device(backend):
    """an array stored on each device of the client reads back from that device"""
    topology = client_topology(backend)
    for device in topology.devices:
        round_trip(backend, np.full((2, 2), device.id, np.int32), device,
                    device.default_memory_kind)
    return f"{len(topology.devices)} device(s)"


@check("hooks.buffer_address", layer=LAYER, mandatory=False)
def buffer_address(backend):
    """pjrtkit_buffer_address gives a stored payload a nonzero int address, the same on every
    call, and two live payloads different addresses (or UNIMPLEMENTED: no addresses)"""
    device = first_device(backend)
    kind = device.default_memory_kind
    payloads = [backend.transfer_to_device(array=np.full((3, 2), i, np.float32), device=device,
                                           memory_kind=kind) for i in range(2)]
    try:
        first, again, second = (
            backend.buffer_address(payload=p, device=device, memory_kind=kind)
            for p in (payloads[0], payloads[0], payloads[1]))
    except PjrtError as exc:
        if is_unimplemented(exc):
            raise Unsupported("buffer addresses (jax.Array.unsafe_buffer_pointer)",
                              str(exc)) from exc
        raise
    expect(isinstance(first, int) and first != 0, "the address is a nonzero int",
           expected="an int", actual=repr(first))
    expect(first == again, "the same payload has the same address", expected=first,
           actual=again)
    expect(first != second, "two live payloads have different addresses",
           expected=f"not {first}", actual=second)
    return f"{first:#x}"


# ---- copies -----------------------------------------------------------------------------------

@check("hooks.copy_buffer.round_trip", layer=LAYER)
def copy_buffer_round_trip(backend):
    """pjrtkit_copy_buffer copies a payload to each other memory kind of the device; the copy
    reads back bit-exactly"""
    device = first_device(backend)
    array = sample(np.float64, (5, 2), seed=3)
    src_kind = device.default_memory_kind
    payload = backend.transfer_to_device(array=array.copy(), device=device, memory_kind=src_kind)
    for space in device.memory_spaces:
        copy = backend.copy_buffer(payload=payload, src_device=device, src_memory_kind=src_kind,
                                   dst_device=device, dst_memory_kind=space.kind)
        host = as_host(backend, copy, device, space.kind)
        expect(bits(host) == bits(array) and host.shape == array.shape,
               f"a copy from '{src_kind}' to '{space.kind}' reads back bit-exactly",
               expected=array.ravel()[:4].tolist(), actual=host.ravel()[:4].tolist())


@check("hooks.copy_buffer.no_aliasing", layer=LAYER)
def copy_buffer_no_aliasing(backend):
    """a copy shares no storage with its source (donation may later write either in place)"""
    device = first_device(backend)
    kind = device.default_memory_kind
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    payload = backend.transfer_to_device(array=array.copy(), device=device, memory_kind=kind)
    copy = backend.copy_buffer(payload=payload, src_device=device, src_memory_kind=kind,
                               dst_device=device, dst_memory_kind=kind)
    expect(copy is not payload, "the copy is a new payload", expected="a new payload",
           actual="the source payload itself")
    source_host = as_host(backend, payload, device, kind)
    copy_host = as_host(backend, copy, device, kind)
    expect(not np.shares_memory(source_host, copy_host), "source and copy read back from "
           "separate storage", expected="no shared memory", actual="shared memory")
    # If payloads are host arrays, writing the source must leave the copy unchanged.
    if isinstance(payload, np.ndarray) and payload.flags.writeable:
        payload[...] = -1
        expect(np.array_equal(as_host(backend, copy, device, kind), array),
               "writing the source payload leaves the copy unchanged",
               expected=array.ravel().tolist(), actual=copy_host.ravel().tolist())


@check("hooks.copy_buffer.between_devices", layer=LAYER)
def copy_buffer_between_devices(backend):
    """pjrtkit_copy_buffer copies a payload from the first device to every other device"""
    topology = client_topology(backend)
    if len(topology.devices) < 2:
        raise Skipped(f"the client has {len(topology.devices)} device; copies between devices "
                      f"need two (for the cpu backend: PJRTKIT_CPU_DEVICES=2)")
    src = topology.devices[0]
    array = sample(np.int16, (3, 3), seed=11)
    payload = backend.transfer_to_device(array=array.copy(), device=src,
                                         memory_kind=src.default_memory_kind)
    for dst in topology.devices[1:]:
        copy = backend.copy_buffer(payload=payload, src_device=src,
                                   src_memory_kind=src.default_memory_kind, dst_device=dst,
                                   dst_memory_kind=dst.default_memory_kind)
        host = as_host(backend, copy, dst, dst.default_memory_kind)
        expect(bits(host) == bits(array), f"copy to device {dst.id} reads back bit-exactly",
               expected=array.ravel().tolist(), actual=host.ravel().tolist())


# ---- memory statistics ------------------------------------------------------------------------

@check("hooks.memory_stats.consistent", layer=LAYER)
def memory_stats_consistent(backend):
    """pjrtkit_memory_stats returns MemoryStats with non-negative counts, peak >= in use and
    limit >= in use where set"""
    device = first_device(backend)
    tracked = MemoryStats(bytes_in_use=4096, peak_bytes_in_use=8192, num_allocs=3,
                          largest_alloc_size=2048,
                          bytes_limit=device.memory_space(device.default_memory_kind).capacity_bytes)
    stats = backend.memory_stats(device=device, tracked=tracked)
    expect(isinstance(stats, MemoryStats), "pjrtkit_memory_stats returns MemoryStats",
           expected="MemoryStats", actual=type(stats).__name__)
    for field in dataclasses.fields(MemoryStats):
        value = getattr(stats, field.name)
        expect(value is None or (isinstance(value, int) and value >= 0),
               f"MemoryStats.{field.name} is None or an int >= 0", expected="int >= 0",
               actual=value)
    expect(stats.bytes_in_use is not None, "bytes_in_use is set", expected="int",
           actual=None)
    if stats.peak_bytes_in_use is not None:
        expect(stats.peak_bytes_in_use >= stats.bytes_in_use, "peak_bytes_in_use >= bytes_in_use",
               expected=f">= {stats.bytes_in_use}", actual=stats.peak_bytes_in_use)
    if stats.bytes_limit is not None:
        expect(stats.bytes_limit >= stats.bytes_in_use, "bytes_limit >= bytes_in_use",
               expected=f">= {stats.bytes_in_use}", actual=stats.bytes_limit)
    return f"{stats}"


@check("hooks.memory_stats.every_device", layer=LAYER)
def memory_stats_every_device(backend):
    """pjrtkit_memory_stats answers for every device, not only the first"""
    for device in client_topology(backend).devices:
        stats = backend.memory_stats(device=device, tracked=MemoryStats(bytes_in_use=0))
        expect(isinstance(stats, MemoryStats), f"device {device.id}: MemoryStats",
               expected="MemoryStats", actual=type(stats).__name__)


@check("hooks.jax_lowering_rules.records", layer=LAYER)
def jax_lowering_rules_records(backend):
    """pjrtkit_jax_lowering_rules yields JaxLoweringRule records of a JAX primitive and a
    callable rule, each primitive once (none at all is a valid answer)"""
    try:
        records = backend.jax_lowering_rules()
    except PjrtError as exc:
        raise Failed("pjrtkit_jax_lowering_rules gives well-formed records",
                     expected="JaxLoweringRule records, each primitive once",
                     actual=str(exc)) from exc
    for record in records:
        name = getattr(record.primitive, "name", None)
        expect(isinstance(name, str) and callable(getattr(record.primitive, "bind", None)),
               "each record's primitive is a JAX primitive", expected="a Primitive",
               actual=type(record.primitive).__name__)
        expect(callable(record.rule), f"the rule for {name} is callable", expected="callable",
               actual=type(record.rule).__name__)
    return f"{len(records)} rules: {', '.join(sorted(r.primitive.name for r in records))}"


def all_hook_names() -> set[str]:
    """Every hook of the contract (``tests/conformance`` checks this layer calls them all)."""
    from pjrtkit import hookspecs

    return {name for name in dir(hookspecs) if name.startswith("pjrtkit_")}

