"""Helpers for ABI tests: fake backends, and calls made through the C table.

ABI tests drive the PJRT_Api exactly as jaxlib does: they fill an Args struct and call the
function pointer in the table, so the call crosses C (and, for handle-less functions, the
per-slot trampoline) before reaching Python. Backends occupy one of only 8 slots per process,
so the fake backends here are module-level singletons.
"""
from __future__ import annotations

from typing import Any


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

