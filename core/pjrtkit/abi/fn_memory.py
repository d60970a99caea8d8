"""PJRT_Memory_*. Memory handles belong to their client and are never destroyed by C."""
from __future__ import annotations

from typing import Any

from pjrtkit.abi.args import Args
from pjrtkit.abi.errors import pjrt_function
from pjrtkit.abi.handles import MemoryRef, deref


def memory_of(a: Args, field: str = "memory") -> MemoryRef:
    return deref(a.req(field), MemoryRef, f"{a.name}.{field}")


def _string_out(a: Args, ref: MemoryRef, field: str, value: str) -> None:
    chars, size = ref.cstr(field, value)
    a.require_outputs(field, f"{field}_size")
    a.set(field, chars)
    a.set(f"{field}_size", size)


@pjrt_function("PJRT_Memory_Id")
def memory_id(args: Any) -> None:
    a = Args(args)
    a.set("id", memory_of(a).obj.id)


@pjrt_function("PJRT_Memory_Kind")
def memory_kind(args: Any) -> None:
    a = Args(args)
    ref = memory_of(a)
    _string_out(a, ref, "kind", ref.obj.kind)


@pjrt_function("PJRT_Memory_Kind_Id")
def memory_kind_id(args: Any) -> None:
    a = Args(args)
    a.set("kind_id", memory_of(a).obj.kind_id)


@pjrt_function("PJRT_Memory_DebugString")
def memory_debug_string(args: Any) -> None:
    a = Args(args)
    ref = memory_of(a)
    _string_out(a, ref, "debug_string", ref.obj.debug_string)


@pjrt_function("PJRT_Memory_ToString")
def memory_to_string(args: Any) -> None:
    a = Args(args)
    ref = memory_of(a)
    _string_out(a, ref, "to_string", ref.obj.to_string)


@pjrt_function("PJRT_Memory_AddressableByDevices")
def memory_addressable_by_devices(args: Any) -> None:
    a = Args(args)
    ref = memory_of(a)
    array, count = ref.client.device_array(("memory", ref.obj.id), ref.obj.devices)
    a.set_outputs(devices=array, num_devices=count)
