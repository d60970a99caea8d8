"""Every PJRT_Api slot the area modules did not implement answers UNIMPLEMENTED, by name.

An extern "Python" function with no Python implementation would return 0 (NULL: success) to C.
Importing this module therefore first imports every area module, then stubs what is left, so
the whole table is defined whichever module is imported first.
"""
from __future__ import annotations

from typing import Any

from pjrtkit.abi import (  # noqa: F401 - imported for their @pjrt_function registrations
    fn_buffer, fn_client, fn_device, fn_event, fn_executable, fn_memory, fn_plugin, fn_topology,
)
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.errors import REGISTERED, pjrt_function
from pjrtkit.errors import Unimplemented

SLOTS: tuple[str, ...] = tuple(
    name for name, field in ffi.typeof("PJRT_Api").fields if field.type.kind == "function")


def _stub(name: str) -> None:
    takes_slot = len(ffi.typeof(getattr(lib, f"pjrtkit_{name}")).args) == 2
    if name.endswith("_Destroy"):
        # pjrtkit never hands out objects of the kinds left here, so there is nothing to free;
        # a destroy that failed would abort jaxlib.
        def destroy(*c_args: Any) -> None:
            return None
        pjrt_function(name, never_fails=True)(destroy)
        return

    message = f"{name} is not implemented by pjrtkit"

    def unimplemented(*c_args: Any) -> None:
        raise Unimplemented(message)
    unimplemented.__name__ = name
    unimplemented.__doc__ = f"UNIMPLEMENTED stub (takes slot: {takes_slot})."
    pjrt_function(name)(unimplemented)


UNIMPLEMENTED: tuple[str, ...] = tuple(name for name in SLOTS if name not in REGISTERED)
for _name in UNIMPLEMENTED:
    _stub(_name)
