"""One PJRT_Api table per backend, handed to JAX as a ``"pjrt_c_api"`` PyCapsule.

Tables are never freed: jaxlib keeps the pointer for the life of the process.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

# Every extern "Python" callback must be defined before C can reach any of them; importing
# fn_unimplemented imports every area module, then stubs the slots they leave.
from pjrtkit.abi import fn_unimplemented  # noqa: F401 - imported for its definitions
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.capsules import new_capsule
from pjrtkit.abi.slots import BACKENDS
from pjrtkit.errors import ResourceExhausted

MAX_BACKENDS: int = lib.PJRTKIT_MAX_BACKENDS
API_VERSION = (0, lib.PJRTKIT_API_MINOR)

# The capsule keeps a pointer to its name, so the name buffer must live forever too.
_CAPSULE_NAME = ctypes.create_string_buffer(b"pjrt_c_api")

_lock = threading.Lock()
_tables: list[Any] = []     # PJRT_Api cdata; alive for the process (jaxlib never lets go)
_capsules: list[Any] = []


def register_backend(backend: Any) -> tuple[Any, int]:
    """Build (once per backend object) the PJRT_Api for ``backend``; returns (capsule, slot)."""
    with _lock:
        for slot, known in enumerate(BACKENDS):
            if known is backend:
                return _capsules[slot], slot
        slot = len(BACKENDS)
        if slot >= MAX_BACKENDS:
            names = ", ".join(repr(getattr(b, "name", b)) for b in BACKENDS)
            raise ResourceExhausted(
                f"pjrtkit supports at most {MAX_BACKENDS} backends per process; already "
                f"registered: {names}; cannot add {getattr(backend, 'name', backend)!r}")
        api = ffi.new("PJRT_Api*")
        lib.pjrtkit_fill_api(api, slot)
        capsule = new_capsule(int(ffi.cast("uintptr_t", api)), _CAPSULE_NAME)
        BACKENDS.append(backend)
        _tables.append(api)
        _capsules.append(capsule)
        return capsule, slot


def api_for_slot(slot: int) -> Any:
    """The PJRT_Api* of a slot (tests call through it as C would)."""
    return _tables[slot]
