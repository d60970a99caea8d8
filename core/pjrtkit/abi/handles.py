"""Opaque PJRT handles for runtime objects.

Every pointer given to C is an ``ffi.new_handle`` of a small *Ref* object. The handle cdata must
stay alive for as long as C may pass the pointer back, so each one has exactly one owner:

* a ``HandleTable`` (module level, one per kind) for objects C destroys explicitly: clients,
  buffers, events, executables, loaded executables, topologies, execute contexts, errors and
  serialized blobs. The entry lives from creation until the matching ``*_Destroy`` (or deleter).
* the owning ``ClientRef`` for devices, memories and their descriptions, and for the client's own
  topology: C never destroys those; they live as long as the client. They are created on first
  use and then reused, so the same runtime object always gets the same pointer.
* the owning ``TopologyRef`` for the device descriptions of a compile-only topology.

Refs also cache every piece of memory handed to C that must outlive the call (strings, arrays,
NamedValue lists): C may read those for as long as the object lives.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import InvalidArgument

T = TypeVar("T", bound="Ref")


class Ref:
    """Base of every object a PJRT handle points at; holds C-visible memory for the object."""

    __slots__ = ("obj", "_c")

    def __init__(self, obj: Any):
        self.obj = obj
        self._c: dict[Any, Any] = {}

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """The value C sees for ``key``, built once; it lives as long as this Ref."""
        try:
            return self._c[key]
        except KeyError:
            # setdefault keeps the first value if two threads race; the loser was never shown to C.
            return self._c.setdefault(key, make())

    def stable_handle(self, key: Any, ctype: str, make_ref: Callable[[], "Ref"]) -> Any:
        """A handle owned by this Ref: the same pointer for ``key`` every time, never destroyed
        by C, alive as long as this Ref."""
        def make():
            handle = ffi.new_handle(make_ref())
            return ffi.cast(ctype, handle), handle
        return self.cached(("handle", key), make)[0]

    def cstr(self, key: str, text: str | bytes) -> tuple[Any, int]:
        """(char*, size) for a string C keeps reading while this object lives."""
        def make():
            data = text.encode() if isinstance(text, str) else bytes(text)
            return ffi.new("char[]", data), len(data)
        return self.cached(("str", key), make)


class HandleTable(Generic[T]):
    """Owns the handles of one kind from creation until C destroys them."""

    def __init__(self, kind: str, ctype: str):
        self.kind = kind
        self.ctype = ffi.typeof(ctype)
        self._live: dict[int, Any] = {}

    def new(self, ref: T) -> Any:
        handle = ffi.new_handle(ref)
        ptr = ffi.cast(self.ctype, handle)
        self._live[int(ffi.cast("uintptr_t", handle))] = handle
        return ptr

    def release(self, ptr: Any) -> T | None:
        """Drop C's handle; returns the Ref, or None for NULL or an unknown pointer."""
        if ptr == ffi.NULL:
            return None
        handle = self._live.pop(int(ffi.cast("uintptr_t", ptr)), None)
        return None if handle is None else ffi.from_handle(handle)

    def __len__(self) -> int:
        return len(self._live)


def deref(ptr: Any, cls: type[T], what: str) -> T:
    """The Ref behind a handle C passed in; ``what`` names the Args field for error messages."""
    if ptr == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL")
    ref = ffi.from_handle(ffi.cast("void*", ptr))
    if type(ref) is not cls:
        raise InvalidArgument(f"{what} is a {type(ref).__name__} handle, expected {cls.__name__}")
    return ref


# ---- Refs owned by their client or topology (stable pointers, never destroyed by C) -----------

class DescriptionRef(Ref):
    """A PJRT_DeviceDescription: a runtime Device or DeviceDescription (both expose the facts)."""

    __slots__ = ()


class DeviceRef(Ref):
    __slots__ = ("client",)

    def __init__(self, device: Any, client: "ClientRef"):
        super().__init__(device)
        self.client = client

    def description_ptr(self) -> Any:
        # Owned here: C asks for a device's description repeatedly and never destroys it.
        return self.stable_handle("description", "PJRT_DeviceDescription*",
                                  lambda: DescriptionRef(self.obj.description))


class MemoryRef(Ref):
    __slots__ = ("client",)

    def __init__(self, memory: Any, client: "ClientRef"):
        super().__init__(memory)
        self.client = client


class ClientRef(Ref):
    __slots__ = ("backend",)

    def __init__(self, client: Any, backend: Any):
        super().__init__(client)
        self.backend = backend

    # Devices and memories are keyed by their id (unique within a client), not by Python
    # identity, so the pointer stays the same even if the runtime hands out equal copies.
    def device_ptr(self, device: Any) -> Any:
        return self.stable_handle(("device", device.id), "PJRT_Device*",
                                  lambda: DeviceRef(device, self))

    def memory_ptr(self, memory: Any) -> Any:
        return self.stable_handle(("memory", memory.id), "PJRT_Memory*",
                                  lambda: MemoryRef(memory, self))

    def device_array(self, key: Any, devices: list[Any]) -> tuple[Any, int]:
        """A PJRT_Device*[] for a fixed device list, kept alive with the client."""
        return self.cached(("devices", key), lambda: (
            ffi.new("PJRT_Device*[]", [self.device_ptr(d) for d in devices]), len(devices)))

    def memory_array(self, key: Any, memories: list[Any]) -> tuple[Any, int]:
        return self.cached(("memories", key), lambda: (
            ffi.new("PJRT_Memory*[]", [self.memory_ptr(m) for m in memories]), len(memories)))

    def topology_ptr(self) -> Any:
        # The client's topology belongs to the client: C must not destroy it.
        return self.stable_handle("topology", "PJRT_TopologyDescription*",
                                  lambda: TopologyRef(self.obj.topology, owned_by_client=True))


class TopologyRef(Ref):
    __slots__ = ("owned_by_client",)

    def __init__(self, topology: Any, *, owned_by_client: bool = False):
        super().__init__(topology)
        self.owned_by_client = owned_by_client

    def description_array(self) -> tuple[Any, int]:
        """PJRT_DeviceDescription*[] of the topology, owned by this Ref."""
        def make():
            descs = list(self.obj.device_descriptions)
            ptrs = [self.stable_handle(("description", i), "PJRT_DeviceDescription*",
                                       lambda d=d: DescriptionRef(d)) for i, d in enumerate(descs)]
            return ffi.new("PJRT_DeviceDescription*[]", ptrs), len(ptrs)
        return self.cached("descriptions", make)


# ---- Refs that C destroys ---------------------------------------------------------------------

class BufferRef(Ref):
    __slots__ = ("client",)

    def __init__(self, buffer: Any, client: ClientRef):
        super().__init__(buffer)
        self.client = client


class EventRef(Ref):
    __slots__ = ()


class ExecutableRef(Ref):
    __slots__ = ()


class LoadedExecutableRef(Ref):
    __slots__ = ("client", "device_assignment")

    def __init__(self, loaded: Any, client: ClientRef, device_assignment: bytes):
        super().__init__(loaded)
        self.client = client
        # Serialized DeviceAssignmentProto, computed at load time because
        # LoadedExecutable_GetDeviceAssignment must never fail.
        self.device_assignment = device_assignment


class ExecuteContextRef(Ref):
    __slots__ = ()


class BlobRef(Ref):
    """Bytes handed to C together with a deleter (serialized executables, topologies, ...)."""

    __slots__ = ()


# How long C holds each kind of handle (and so how long the table keeps it):
# a client until PJRT_Client_Destroy (jaxlib: for the process, or until the backend is cleared);
CLIENTS: HandleTable[ClientRef] = HandleTable("client", "PJRT_Client*")
# a buffer until PJRT_Buffer_Destroy (when the jax.Array is garbage-collected or deleted);
BUFFERS: HandleTable[BufferRef] = HandleTable("buffer", "PJRT_Buffer*")
# an event until PJRT_Event_Destroy, usually right after OnReady/Await returns;
EVENTS: HandleTable[EventRef] = HandleTable("event", "PJRT_Event*")
# an executable (from GetExecutable or PJRT_Compile) until PJRT_Executable_Destroy;
EXECUTABLES: HandleTable[ExecutableRef] = HandleTable("executable", "PJRT_Executable*")
# a loaded executable until PJRT_LoadedExecutable_Destroy (the jitted function's cache entry);
LOADED_EXECUTABLES: HandleTable[LoadedExecutableRef] = HandleTable(
    "loaded executable", "PJRT_LoadedExecutable*")
# a compile-only topology until PJRT_TopologyDescription_Destroy;
TOPOLOGIES: HandleTable[TopologyRef] = HandleTable("topology", "PJRT_TopologyDescription*")
# an execute context until PJRT_ExecuteContext_Destroy;
EXECUTE_CONTEXTS: HandleTable[ExecuteContextRef] = HandleTable(
    "execute context", "PJRT_ExecuteContext*")
# serialized bytes (executables, topologies, device assignments) until C calls our deleter.
BLOBS: HandleTable[BlobRef] = HandleTable("serialized blob", "void*")
# (PJRT_Error handles live in errors.ERRORS, until PJRT_Error_Destroy.)


def new_buffer(buffer: Any, client: ClientRef) -> Any:
    return BUFFERS.new(BufferRef(buffer, client))


def new_event(event: Any) -> Any:
    return EVENTS.new(EventRef(event))


def new_blob(data: bytes) -> tuple[Any, Any, int]:
    """(opaque handle, char*, size) for bytes C reads until it calls our deleter."""
    ref = BlobRef(data)
    chars, size = ref.cstr("data", data)
    return BLOBS.new(ref), chars, size


def _release_blob(ptr: Any) -> None:
    try:
        BLOBS.release(ptr)
    except BaseException:  # noqa: BLE001 - a deleter returns void; nothing may escape into C
        pass


# Deleters C calls when it is done with serialized bytes we handed out (one per opaque type).
for _ctype in ("PJRT_DeviceAssignmentSerialized", "PJRT_SerializedExecutable",
               "PJRT_SerializedCompileOptions", "PJRT_SerializedTopology"):
    ffi.def_extern(name=f"pjrtkit_free_{_ctype}")(_release_blob)


@ffi.def_extern(name="pjrtkit_chunk_deleter")
def _chunk_deleter(data: Any, deleter_arg: Any) -> None:
    """Reserved for PJRT_Chunk data handed to C; pjrtkit hands out none yet."""
    _release_blob(deleter_arg)
