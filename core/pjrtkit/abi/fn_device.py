"""PJRT_DeviceDescription_* and PJRT_Device_*. Device handles belong to their client."""
from __future__ import annotations

from typing import Any

from pjrtkit.abi.args import Args
from pjrtkit.abi.errors import pjrt_function
from pjrtkit.abi.handles import DescriptionRef, DeviceRef, deref
from pjrtkit.abi.named_values import NamedValues


def description_of(a: Args) -> DescriptionRef:
    return deref(a.req("device_description"), DescriptionRef, f"{a.name}.device_description")


def device_of(a: Args, field: str = "device") -> DeviceRef:
    return deref(a.req(field), DeviceRef, f"{a.name}.{field}")


def _string_out(a: Args, ref: Any, field: str, value: str) -> None:
    chars, size = ref.cstr(field, value)
    a.require_outputs(field, f"{field}_size")
    a.set(field, chars)
    a.set(f"{field}_size", size)


# ---- DeviceDescription ------------------------------------------------------------------------

@pjrt_function("PJRT_DeviceDescription_Id")
def description_id(args: Any) -> None:
    a = Args(args)
    a.set("id", description_of(a).obj.id)


@pjrt_function("PJRT_DeviceDescription_ProcessIndex")
def description_process_index(args: Any) -> None:
    a = Args(args)
    a.set("process_index", description_of(a).obj.process_index)


@pjrt_function("PJRT_DeviceDescription_Attributes")
def description_attributes(args: Any) -> None:
    a = Args(args)
    ref = description_of(a)
    values = ref.cached("attributes", lambda: NamedValues(ref.obj.attributes))
    a.set_outputs(attributes=values.array, num_attributes=values.count)


@pjrt_function("PJRT_DeviceDescription_Kind")
def description_kind(args: Any) -> None:
    a = Args(args)
    ref = description_of(a)
    _string_out(a, ref, "device_kind", ref.obj.kind)


@pjrt_function("PJRT_DeviceDescription_DebugString")
def description_debug_string(args: Any) -> None:
    a = Args(args)
    ref = description_of(a)
    _string_out(a, ref, "debug_string", ref.obj.debug_string)


@pjrt_function("PJRT_DeviceDescription_ToString")
def description_to_string(args: Any) -> None:
    a = Args(args)
    ref = description_of(a)
    _string_out(a, ref, "to_string", ref.obj.to_string)


# ---- Device -----------------------------------------------------------------------------------

@pjrt_function("PJRT_Device_GetDescription")
def device_get_description(args: Any) -> None:
    a = Args(args)
    ref = device_of(a)
    a.set_outputs(device_description=ref.description_ptr())


@pjrt_function("PJRT_Device_IsAddressable")
def device_is_addressable(args: Any) -> None:
    a = Args(args)
    a.set("is_addressable", bool(device_of(a).obj.is_addressable))


@pjrt_function("PJRT_Device_LocalHardwareId")
def device_local_hardware_id(args: Any) -> None:
    a = Args(args)
    a.set("local_hardware_id", device_of(a).obj.local_hardware_id)


@pjrt_function("PJRT_Device_AddressableMemories")
def device_addressable_memories(args: Any) -> None:
    a = Args(args)
    ref = device_of(a)
    array, count = ref.client.memory_array(("device", ref.obj.id), ref.obj.memories)
    a.set_outputs(memories=array, num_memories=count)


@pjrt_function("PJRT_Device_DefaultMemory")
def device_default_memory(args: Any) -> None:
    a = Args(args)
    ref = device_of(a)
    a.set_outputs(memory=ref.client.memory_ptr(ref.obj.default_memory))


# Stats with an *_is_set flag; bytes_in_use has none and is always reported.
_OPTIONAL_STATS = (
    "peak_bytes_in_use", "num_allocs", "largest_alloc_size", "bytes_limit", "bytes_reserved",
    "peak_bytes_reserved", "bytes_reservable_limit", "largest_free_block_bytes", "pool_bytes",
    "peak_pool_bytes",
)


@pjrt_function("PJRT_Device_MemoryStats")
def device_memory_stats(args: Any) -> None:
    a = Args(args)
    stats = device_of(a).obj.memory_stats()
    a.set("bytes_in_use", int(getattr(stats, "bytes_in_use", 0) or 0))
    for name in _OPTIONAL_STATS:
        value = getattr(stats, name, None)
        # Callers older than a stat do not have its slot: leave it out rather than fail.
        if a.has(f"{name}_is_set"):
            a.set(f"{name}_is_set", value is not None)
            a.set(name, 0 if value is None else int(value))
