"""Helpers for ABI tests: fake backends, and calls made through the C table.

ABI tests drive the PJRT_Api exactly as jaxlib does: they fill an Args struct and call the
function pointer in the table, so the call crosses C (and, for handle-less functions, the
per-slot trampoline) before reaching Python. Backends occupy one of only 8 slots per process,
so the fake backends here are module-level singletons.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class FakeBackend:
    """Just the backend facade that handle-less PJRT functions use."""

    def __init__(self, name: str, attributes: dict | None = None):
        self.name = name
        self.platform_name = f"pjrtkit_{name}"
        self.attributes = attributes if attributes is not None else {
            "xla_version": 3, "flops": 1.5, "fast": True, "stablehlo_current_version": [1, 13, 7],
            "vendor": "pjrtkit tests"}
        self.topology_error: BaseException | None = None
        self.topology_calls: list[tuple[str, dict]] = []

    def plugin_attributes(self) -> dict:
        return self.attributes

    def topology_description(self, name: str, options: dict) -> Any:
        self.topology_calls.append((name, options))
        if self.topology_error is not None:
            raise self.topology_error
        return FakeTopology(name)


class FakeTopology:
    platform_name = "pjrtkit_abi_test"
    platform_version = "0.0-test"
    device_descriptions: list = []
    attributes = {"cores": 2}

    def __init__(self, name: str):
        self.name = name

    def serialize(self) -> bytes:
        return self.name.encode()


FAKE = FakeBackend("abi_test")
OTHER = FakeBackend("abi_other", {"who": "other"})


def new_args(name: str, **fields: Any) -> Any:
    """A zeroed ``<name>_Args`` with struct_size set, as a current caller would pass it."""
    from pjrtkit.abi._cffi import ffi

    args = ffi.new(f"{name}_Args*")
    args.struct_size = ffi.sizeof(f"{name}_Args")
    for key, value in fields.items():
        setattr(args, key, value)
    return args


def take_error(table: Any, err: Any) -> tuple[int, str] | None:
    """Read a returned PJRT_Error through the table's Error_* functions, then destroy it."""
    from pjrtkit.abi._cffi import ffi

    if err == ffi.NULL:
        return None
    code = new_args("PJRT_Error_GetCode", error=err)
    assert table.PJRT_Error_GetCode(code) == ffi.NULL
    message = new_args("PJRT_Error_Message", error=err)
    table.PJRT_Error_Message(message)
    text = ffi.unpack(message.message, message.message_size).decode()
    table.PJRT_Error_Destroy(new_args("PJRT_Error_Destroy", error=err))
    return int(code.code), text


def ok(table: Any, err: Any) -> None:
    result = take_error(table, err)
    if result is not None:
        raise AssertionError(f"PJRT call failed: code {result[0]}: {result[1]}")



# ---- duck-typed runtime objects (the INTERFACE.md contract, nothing more) ----------------------

class FakeMemory:
    def __init__(self, memory_id: int, kind: str = "device"):
        self.id = memory_id
        self.kind = kind
        self.kind_id = 0
        self.debug_string = f"memory {memory_id}"
        self.to_string = f"Memory({memory_id})"
        self.devices: list = []


class FakeDescription:
    def __init__(self, device_id: int):
        self.id = device_id
        self.process_index = 0
        self.kind = "fake core"
        self.debug_string = f"fake:{device_id}"
        self.to_string = f"FakeDevice(id={device_id})"
        self.attributes = {"coords": [device_id, 0, 0], "core_on_chip": 0}


class FakeDevice(FakeDescription):
    def __init__(self, device_id: int, memory: FakeMemory):
        super().__init__(device_id)
        self.local_hardware_id = device_id
        self.is_addressable = True
        self.memories = [memory]
        self.default_memory = memory
        memory.devices.append(self)
        self.stats = None

    @property
    def description(self):
        return FakeDescription(self.id)  # a fresh object each time: handles must still be stable

    def memory_stats(self):
        return self.stats


class FakeBuffer:
    def __init__(self, array, device, memory):
        self.array = array
        self.dtype = array.dtype
        self.shape = array.shape
        self.device = device
        self.memory = memory
        self.to_host_calls: list = []
        self.destroyed = False
        self.minor_to_major = None

    def to_host(self, dst, minor_to_major=None):
        self.to_host_calls.append(dst)
        order = None if minor_to_major is None else tuple(reversed(minor_to_major))
        dst[:] = (self.array if order is None else self.array.transpose(order)).tobytes()
        from pjrtkit.runtime.event import Event
        return Event.completed()

    def destroy(self):
        self.destroyed = True


class FakeClient:
    def __init__(self, num_devices: int = 2):
        self.platform_name = "pjrtkit_abi_test"
        self.platform_version = "0.0-test"
        self.process_index = 0
        self.memories = [FakeMemory(i) for i in range(num_devices)]
        self.devices = [FakeDevice(i, m) for i, m in enumerate(self.memories)]
        self.addressable_devices = list(self.devices)
        self.host_arrays: list = []
        self.destroyed = False

    def lookup_device(self, device_id):
        from pjrtkit.errors import InvalidArgument
        for d in self.devices:
            if d.id == device_id:
                return d
        raise InvalidArgument(f"no device {device_id}")

    def check_room(self, shape, dtype, *, device=None, memory=None):
        pass  # no limits here

    def buffer_from_host(self, array, *, device=None, memory=None):
        self.host_arrays.append(array)
        device = device or memory.devices[0]
        return FakeBuffer(array, device, memory or device.default_memory)

    def destroy(self):
        self.destroyed = True


class FakeExecutable:
    name = "jit_fake"
    num_replicas = 1
    num_partitions = 2
    fingerprint = "abc123"
    size_of_generated_code = 42
    compile_options = b"\x08\x01"

    def __init__(self):
        self.output_dtypes = [np.dtype(np.float32), np.dtype(np.int8)]
        self.output_shapes = [(2, 3), ()]
        self.output_memory_kinds = ["device", "pinned_host"]
        self.num_outputs = 2

    def serialize(self):
        return b"serialized-executable"


class FakeLoaded:
    def __init__(self, client: FakeClient):
        self.client = client
        self.executable = FakeExecutable()
        self.addressable_devices = client.devices
        self.device_assignment = [[0, 1]]
        self.calls: list = []
        self.destroyed = False

    def execute(self, argument_lists, *, execute_device, non_donatable):
        from pjrtkit.runtime.event import Event
        self.calls.append((argument_lists, execute_device, non_donatable))
        outputs = [[FakeBuffer(np.zeros((2, 3), np.float32), d, d.default_memory),
                    FakeBuffer(np.zeros((), np.int8), d, d.default_memory)]
                   for d in self.client.devices[:len(argument_lists)]]
        return outputs, [Event.completed() for _ in argument_lists]

    def destroy(self):
        self.destroyed = True
