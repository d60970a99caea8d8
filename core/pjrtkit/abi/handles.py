"""PJRT handles for runtime objects.

Every pointer given to C points at a small C struct (``pjrtkit_handles.h``) allocated here: its
head tags the kind of object and holds an ``ffi.new_handle`` of the Python *Ref* behind it; the
rest are the object's immutable facts (a buffer's device and memory, a memory's kind string, an
executable's replica/partition/output counts...), written by ``Ref.fill`` before C sees the
pointer, from which C answers the PJRT functions that only read them, without entering Python.
A fact ``fill`` cannot compute stays unknown and the Python callback answers (or fails) as usual.

The struct belongs to its Ref and the Ref to the handle; the handle must stay alive for as long
as C may pass the pointer back, so each one has exactly one owner:

* a ``HandleTable`` (module level, one per kind) for objects C destroys explicitly: clients,
  buffers, events, executables, loaded executables, topologies, execute contexts, errors and
  serialized blobs. The entry lives from creation until the matching ``*_Destroy`` (or deleter).
* the owning ``ClientRef`` for devices, memories and their descriptions, and for the client's own
  topology: C never destroys those; they live as long as the client. They are created on first
  use and then reused, so the same runtime object always gets the same pointer.
* the owning ``TopologyRef`` for the device descriptions of a compile-only topology.
* this module for ``pjrtkit_completed_event``: the one static handle of every event that is
  complete without error when handed out (C answers all its PJRT_Event_* calls; Destroy is a
  no-op), so work done inline costs no event object on the C side.

Refs also cache every piece of memory handed to C that must outlive the call (strings, arrays,
NamedValue lists): C may read those for as long as the object lives.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.dtypes import to_code
from pjrtkit.errors import InvalidArgument

T = TypeVar("T", bound="Ref")

NULL = ffi.NULL
_HEAD = ffi.typeof("pjrtkit_head*")
_KIND_NAMES: dict[int, str] = {}  # kind tag -> Ref class name, for error messages
_cache_lock = threading.Lock()


class Ref:
    """Base of every object a PJRT handle points at; holds C-visible memory for the object.

    Subclasses name their C struct (``CTYPE``) and kind tag (``KIND``) and write their facts in
    ``fill``. ``c`` is the struct, once a handle exists.
    """

    __slots__ = ("obj", "c_cache", "c")
    KIND: int = lib.PJRTKIT_KIND_DEAD
    CTYPE: str = "pjrtkit_plain"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.CTYPE_PTR = ffi.typeof(f"{cls.CTYPE}*")
        if cls.KIND:
            _KIND_NAMES[cls.KIND] = cls.__name__

    def __init__(self, obj: Any):
        self.obj = obj
        self.c_cache: dict[Any, Any] | None = None  # made on first use: most buffers never need it
        self.c = None

    def fill(self, c: Any) -> None:
        """Write the object's immutable facts into its struct ``c`` (none by default). Must
        not raise, and must set every integer fact (ffi.new zeroes them, and 0 is a known
        value): to the fact, or to -1 when it cannot be computed."""

    def make_c(self) -> tuple[Any, Any]:
        """(struct, handle): the struct C will point at, and the handle that owns this Ref.
        ``fill`` writes every fact of the struct, each one separately guarded: a fact that
        cannot be computed is left unknown (-1 or NULL), and Python answers its query (and
        reports the failure) as before."""
        c = ffi.new(self.CTYPE_PTR)
        handle = ffi.new_handle(self)
        head = c.head
        head.kind = self.KIND
        head.ref = handle
        self.c = c
        self.fill(c)
        return c, handle

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """The value C sees for ``key``, built once; it lives as long as this Ref."""
        cache = self.c_cache
        if cache is None:
            with _cache_lock:  # two threads must not make two caches (one would be lost)
                if self.c_cache is None:
                    self.c_cache = {}
                cache = self.c_cache
        try:
            return cache[key]
        except KeyError:
            # setdefault keeps the first value if two threads race; the loser was never shown to C.
            return cache.setdefault(key, make())

    def stable_handle(self, key: Any, ctype: str, make_ref: Callable[[], "Ref"]) -> Any:
        """A handle owned by this Ref: the same pointer for ``key`` every time, never destroyed
        by C, alive as long as this Ref."""
        def make():
            c, handle = make_ref().make_c()
            return ffi.cast(ctype, c), handle
        return self.cached(("handle", key), make)[0]

    def cstr(self, key: str, text: str | bytes) -> tuple[Any, int]:
        """(char*, size) for a string C keeps reading while this object lives."""
        def make():
            data = text.encode() if isinstance(text, str) else bytes(text)
            return ffi.new("char[]", data), len(data)
        return self.cached(("str", key), make)


# A buffer up to this size may have its PJRT_Buffer_Destroy queued in C (pjrtkit_fast_paths.h).
_DEFERRED_DESTROY_BYTES: int = lib.PJRTKIT_DEFERRED_DESTROY_BYTES
_U64 = 0xFFFFFFFFFFFFFFFF
_shape_keys: dict[tuple, int] = {}


def shape_key(shape: tuple[int, ...]) -> int:
    """The shape as the one int64 the C execute path compares (``pjrtkit_buffer.shape_key``):
    the same formula as C's ``pjrtkit_shape_key``, which keys the buffers C makes."""
    key = _shape_keys.get(shape)
    if key is None:
        key = len(shape)
        for d in shape:
            key = ((key * 1000003) & _U64) ^ (int(d) & _U64)
        key &= 0x7FFFFFFFFFFFFFFF
        if len(_shape_keys) >= 4096:
            _shape_keys.clear()
        _shape_keys[shape] = key
    return key


class HandleTable(Generic[T]):
    """Owns the handles of one kind from creation until C destroys them."""

    def __init__(self, kind: str, ctype: str):
        self.kind = kind
        self.ctype = ffi.typeof(ctype)
        self._live: dict[Any, Any] = {}  # pointer (cdata) -> the ffi handle owning the Ref

    def new(self, ref: T) -> Any:
        c, handle = ref.make_c()
        ptr = ffi.cast(self.ctype, c)
        # Keyed by the pointer itself: cdata pointers hash and compare by address, whatever
        # their C type, so the pointer C passes back finds the entry.
        self._live[ptr] = handle
        return ptr

    def adopt(self, c: Any, handle: Any) -> Any:
        """``new`` for a struct already made and filled (``c``, owned by the Ref in
        ``handle``)."""
        ptr = ffi.cast(self.ctype, c)
        self._live[ptr] = handle
        return ptr

    def readopt(self, ptr: Any, handle: Any) -> Any:
        """Make ``ptr`` (a handle released earlier, its Ref in ``handle``) live again."""
        self._live[ptr] = handle
        return ptr

    def release_handle(self, ptr: Any) -> Any:
        """``release``, returning the ffi handle itself (None for unknown pointers)."""
        if ptr == NULL:
            return None
        handle = self._live.pop(ptr, None)
        if handle is not None:
            ffi.from_handle(handle).c.head.kind = lib.PJRTKIT_KIND_DEAD
        return handle

    def release(self, ptr: Any) -> T | None:
        """Drop C's handle; returns the Ref, or None for NULL or an unknown pointer."""
        handle = self.release_handle(ptr)
        return None if handle is None else ffi.from_handle(handle)

    def __len__(self) -> int:
        return len(self._live)


# Set by pjrtkit.abi.native (which imports this module): makes the Ref of a buffer the C
# execute path made, which has none until Python first needs it.
adopt_native_buffer: Callable[[Any], Any] | None = None


def deref(ptr: Any, cls: type[T], what: str) -> T:
    """The Ref behind a handle C passed in; ``what`` names the Args field for error messages."""
    if ptr == NULL:
        raise InvalidArgument(f"{what} is NULL")
    head = ffi.cast(_HEAD, ptr)
    kind = head.kind
    if kind != cls.KIND:
        found = _KIND_NAMES.get(kind, "destroyed or foreign")
        raise InvalidArgument(f"{what} is a {found} handle, expected {cls.__name__}")
    ref = head.ref
    if ref == NULL:  # only an output of the C execute path, before Python needed it
        if adopt_native_buffer is None or kind != lib.PJRTKIT_KIND_BUFFER:
            raise InvalidArgument(f"{what} is a {cls.__name__} handle with nothing behind it")
        return adopt_native_buffer(ptr)
    return ffi.from_handle(ref)


def set_c_answers(enabled: bool) -> bool:
    """Turn the C answers on or off (off: every PJRT call enters Python); returns the old state.
    The tracer and the profiler turn them off so that they see every call."""
    old = bool(lib.pjrtkit_c_answers)
    lib.pjrtkit_c_answers = 1 if enabled else 0
    return old


def _fact(compute: Callable[[], Any], default: Any = -1) -> Any:
    try:
        return compute()
    except Exception:  # noqa: BLE001 - unknown: the Python callback answers, and reports why
        return default


# ---- Refs owned by their client or topology (stable pointers, never destroyed by C) -----------

class DescriptionRef(Ref):
    """A PJRT_DeviceDescription: a runtime Device or DeviceDescription (both expose the facts)."""

    __slots__ = ()
    KIND = lib.PJRTKIT_KIND_DESCRIPTION
    CTYPE = "pjrtkit_description"

    def fill(self, c: Any) -> None:
        obj = self.obj
        c.id = _fact(lambda: int(obj.id))
        c.process_index = _fact(lambda: int(obj.process_index))


class DeviceRef(Ref):
    __slots__ = ("client",)
    KIND = lib.PJRTKIT_KIND_DEVICE
    CTYPE = "pjrtkit_device"

    def __init__(self, device: Any, client: "ClientRef"):
        super().__init__(device)
        self.client = client

    def fill(self, c: Any) -> None:
        obj = self.obj
        c.local_hardware_id = _fact(lambda: int(obj.local_hardware_id))
        c.is_addressable = _fact(lambda: int(bool(obj.is_addressable)))
        c.description = _fact(self.description_ptr, NULL)
        c.default_memory = _fact(lambda: self.client.memory_ptr(obj.default_memory), NULL)

    def description_ptr(self) -> Any:
        # Owned here: C asks for a device's description repeatedly and never destroys it.
        return self.stable_handle("description", "PJRT_DeviceDescription*",
                                  lambda: DescriptionRef(self.obj.description))


class MemoryRef(Ref):
    __slots__ = ("client",)
    KIND = lib.PJRTKIT_KIND_MEMORY
    CTYPE = "pjrtkit_memory"

    def __init__(self, memory: Any, client: "ClientRef"):
        super().__init__(memory)
        self.client = client

    def fill(self, c: Any) -> None:
        obj = self.obj
        c.id = _fact(lambda: int(obj.id))
        c.kind_id = _fact(lambda: int(obj.kind_id))
        # The very string PJRT_Memory_Kind hands out from Python (same cache key).
        kind, size = _fact(lambda: self.cstr("kind", obj.kind), (NULL, -1))
        c.kind_size = size
        c.kind = kind


class ClientRef(Ref):
    __slots__ = ("backend", "_device_ptrs", "_memory_ptrs")
    KIND = lib.PJRTKIT_KIND_CLIENT

    def __init__(self, client: Any, backend: Any):
        super().__init__(client)
        self.backend = backend
        # id -> pointer: every new buffer asks for its device's and memory's pointers.
        self._device_ptrs: dict[Any, Any] = {}
        self._memory_ptrs: dict[Any, Any] = {}

    # Devices and memories are keyed by their id (unique within a client), not by Python
    # identity, so the pointer stays the same even if the runtime hands out equal copies.
    def device_ptr(self, device: Any) -> Any:
        try:
            return self._device_ptrs[device.id]
        except KeyError:
            ptr = self.stable_handle(("device", device.id), "PJRT_Device*",
                                     lambda: DeviceRef(device, self))
            return self._device_ptrs.setdefault(device.id, ptr)

    def memory_ptr(self, memory: Any) -> Any:
        try:
            return self._memory_ptrs[memory.id]
        except KeyError:
            ptr = self.stable_handle(("memory", memory.id), "PJRT_Memory*",
                                     lambda: MemoryRef(memory, self))
            return self._memory_ptrs.setdefault(memory.id, ptr)

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
    KIND = lib.PJRTKIT_KIND_TOPOLOGY

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

_C_MAX_RANK = 8  # pjrtkit_buffer.dims


class BufferRef(Ref):
    __slots__ = ("client", "recycle")
    KIND = lib.PJRTKIT_KIND_BUFFER
    CTYPE = "pjrtkit_buffer"

    def __init__(self, buffer: Any, client: ClientRef):
        super().__init__(buffer)
        self.client = client
        # (OutputHandles, slot, facts) when the handle may be reused once C destroyed it.
        self.recycle: tuple[Any, int, Any] | None = None

    def fill(self, c: Any) -> None:
        # Written out (no _fact) because every execution output comes through here.
        obj, client = self.obj, self.client
        try:
            c.device = client.device_ptr(obj.device)
        except Exception:  # noqa: BLE001 - unknown (NULL): Python answers PJRT_Buffer_Device
            pass
        try:
            c.memory = client.memory_ptr(obj.memory)
        except Exception:  # noqa: BLE001
            pass
        try:
            c.element_type = to_code(obj.dtype)
        except Exception:  # noqa: BLE001
            c.element_type = -1
        try:
            size = obj.on_device_size_in_bytes
            c.on_device_size_in_bytes = size
        except Exception:  # noqa: BLE001
            c.on_device_size_in_bytes = -1
        else:
            c.deferrable_destroy = 0 <= size <= _DEFERRED_DESTROY_BYTES
        try:  # what the C execute path compares an argument's shape by (abi/native.shape_key)
            shape = obj.shape
            c.shape_key = shape_key(shape)
        except Exception:  # noqa: BLE001 - no shape known: C never takes it as an argument
            c.shape_key = -1
            c.rank = -1
        else:  # C answers the shape queries (PJRT_Buffer_Dimensions...) from these
            if len(shape) <= _C_MAX_RANK:
                c.rank = len(shape)
                if shape:
                    c.dims[0:len(shape)] = shape
            else:
                c.rank = -1


class EventRef(Ref):
    __slots__ = ()
    KIND = lib.PJRTKIT_KIND_EVENT
    CTYPE = "pjrtkit_event"

    def fill(self, c: Any) -> None:
        c.complete_ok = 0  # only pjrtkit_completed_event is answered in C


class ExecutableRef(Ref):
    __slots__ = ()
    KIND = lib.PJRTKIT_KIND_EXECUTABLE
    CTYPE = "pjrtkit_executable"

    def fill(self, c: Any) -> None:
        obj = self.obj
        c.num_replicas = _fact(lambda: int(obj.num_replicas))
        c.num_partitions = _fact(lambda: int(obj.num_partitions))
        c.num_outputs = _fact(lambda: int(obj.num_outputs))


class LoadedExecutableRef(Ref):
    __slots__ = ("client", "device_assignment", "inline", "output_handles", "native")
    KIND = lib.PJRTKIT_KIND_LOADED_EXECUTABLE
    CTYPE = "pjrtkit_loaded_executable"

    def __init__(self, loaded: Any, client: ClientRef, device_assignment: bytes):
        super().__init__(loaded)
        self.client = client
        # Serialized DeviceAssignmentProto, computed at load time because
        # LoadedExecutable_GetDeviceAssignment must never fail.
        self.device_assignment = device_assignment
        # The runtime's cheap path for PJRT_LoadedExecutable_Execute, when it has one.
        self.inline = getattr(loaded, "execute_inline", None)
        self.output_handles = OutputHandles(client)
        # Its state on the C execute path (abi/native.NativeState), set by whoever made it.
        self.native = None

    def fill(self, c: Any) -> None:
        c.has_inline = self.inline is not None


class ExecuteContextRef(Ref):
    __slots__ = ()
    KIND = lib.PJRTKIT_KIND_EXECUTE_CONTEXT


class BlobRef(Ref):
    """Bytes handed to C together with a deleter (serialized executables, topologies, ...)."""

    __slots__ = ()
    KIND = lib.PJRTKIT_KIND_BLOB


# How long C holds each kind of handle (and so how long the table keeps it):
# a client until PJRT_Client_Destroy (jaxlib: for the process, or until the backend is cleared);
CLIENTS: HandleTable[ClientRef] = HandleTable("client", "PJRT_Client*")
class BufferTable(HandleTable[BufferRef]):
    """Buffer handles: those in the table and the outputs of the C execute path that Python
    has not adopted (C counts them), together."""

    def __len__(self) -> int:
        return super().__len__() + int(lib.pjrtkit_native_buffers_live())


# a buffer until PJRT_Buffer_Destroy (when the jax.Array is garbage-collected or deleted);
BUFFERS: BufferTable = BufferTable("buffer", "PJRT_Buffer*")
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


def _new_buffer_ref(buffer: Any, client: ClientRef) -> BufferRef:
    """``BufferRef(buffer, client)`` without the constructor chain (one per execution output)."""
    ref = _BUFFER_REF_NEW(BufferRef)
    ref.obj = buffer
    ref.c_cache = None
    ref.c = None
    ref.client = client
    return ref


_BUFFER_REF_NEW = object.__new__


class OutputHandles:
    """Makes the handles of one executable's outputs, whose facts (device, memory, element
    type, size) are the same at every execution: the first buffer of each output slot is
    filled as usual and its struct kept as a template; later buffers with the same facts
    (checked, cheaply, by identity) copy it instead of computing them again.

    A handle whose PJRT_Buffer_Destroy C queued comes back here (``give_back``) and serves a
    later output of the same slot and facts: Ref, struct and ffi handle are reused, only the
    runtime Buffer behind them changes. C gave the pointer up when it destroyed it."""

    __slots__ = ("client", "_templates", "_spare")
    SPARE_PER_SLOT = 8

    def __init__(self, client: ClientRef):
        self.client = client
        self._templates: dict[int, tuple[Any, Any, Any, int, Any]] = {}
        self._spare: dict[int, list[tuple[BufferRef, Any, Any]]] = {}

    def new(self, slot: int, buffer: Any) -> Any:
        known = self._templates.get(slot)
        if (known is not None and buffer.device is known[0] and buffer.memory is known[1]
                and buffer.dtype is known[2] and buffer.on_device_size_in_bytes == known[3]):
            spare = self._spare.get(slot)
            if spare:
                try:
                    ref, handle, ptr = spare.pop()
                except IndexError:  # another thread took the last one
                    pass
                else:
                    if ref.recycle[2] is known:  # made from the current template
                        ref.obj = buffer
                        ref.c.head.kind = BufferRef.KIND
                        return BUFFERS.readopt(ptr, handle)
            ref = _new_buffer_ref(buffer, self.client)
            c = ffi.new(BufferRef.CTYPE_PTR, known[4][0])
            handle = ffi.new_handle(ref)
            c.head.ref = handle
            ref.c = c
            ref.recycle = (self, slot, known)
            return BUFFERS.adopt(c, handle)
        ptr = new_buffer(buffer, self.client)
        c = ffi.from_handle(ffi.cast(_HEAD, ptr).ref).c
        if c.device != NULL and c.memory != NULL and c.element_type >= 0 \
                and c.on_device_size_in_bytes >= 0:
            template = ffi.new(BufferRef.CTYPE_PTR, c[0])
            template.head.ref = NULL
            self._templates[slot] = (buffer.device, buffer.memory, buffer.dtype,
                                     c.on_device_size_in_bytes, template)
        return ptr

    def clear(self) -> None:
        """Drop the spare handles (they refer back to this object: a cycle otherwise)."""
        self._spare.clear()

    def give_back(self, ref: BufferRef, handle: Any, ptr: Any) -> None:
        """A handle C destroyed (and Python finished): keep it for reuse, up to a few."""
        ref.obj = None  # the runtime Buffer is gone
        ref.c_cache = None
        spare = self._spare.setdefault(ref.recycle[1], [])
        if len(spare) < self.SPARE_PER_SLOT:
            spare.append((ref, handle, ptr))


_completed_lock = threading.Lock()
_completed_handle: list[Any] = []  # the static event's Ref handle, alive for the process
COMPLETED_EVENT = ffi.cast("PJRT_Event*", ffi.addressof(lib, "pjrtkit_completed_event"))


def _completed_event_ptr() -> Any:
    if not _completed_handle:
        with _completed_lock:
            if not _completed_handle:
                from pjrtkit.runtime.event import Event  # abi must load without the runtime
                handle = ffi.new_handle(EventRef(Event.completed()))
                lib.pjrtkit_completed_event.head.ref = handle
                _completed_handle.append(handle)
    return COMPLETED_EVENT


def new_event(event: Any) -> Any:
    """A PJRT_Event* for ``event``: the static completed handle when the event is already done
    without error (nothing about it can change any more), else a handle of its own."""
    if event.is_ready() and event.error() is None:
        return _completed_event_ptr()
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
