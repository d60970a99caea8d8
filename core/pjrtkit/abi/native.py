"""The C execute path, its Python side (the C side: ``pjrtkit_native.h``,
``pjrtkit_native_execute.h``; the design: ARCHITECTURE.md, "The C execute path").

C answers ``PJRT_LoadedExecutable_Execute`` by itself for a loaded executable once Python has
installed a native plan for it (``install_plan``), and only with arguments whose contents C may
read: buffers whose handle carries a storage. This module

* gives a new client's memories and host pool ledgers whose counts live in C (``CLedger``,
  ``install_ledgers``), so buffers either side makes are counted in one place;
* makes a Python buffer's contents readable by C (``make_readable``, when an execution served
  in Python used it as an argument of an executable that has a native plan) and takes that
  away before the buffer is deleted, donated or destroyed (``detach``);
* makes the Python objects of an output of the C path when Python first needs it (``adopt``,
  called by ``handles.deref``);
* installs plans (``after_python_execution``: the runtime says when an executable has one).
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from pjrtkit.abi import handles
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.dtypes import to_code, to_dtype
from pjrtkit.abi.handles import BUFFERS, BufferRef, LoadedExecutableRef
from pjrtkit.errors import InvalidArgument

NULL = ffi.NULL
_BUFFER_PTR = ffi.typeof("pjrtkit_buffer*")
_HEAD = ffi.typeof("pjrtkit_head*")
_RELEASED_BATCH = 64


# ---- ledgers ----------------------------------------------------------------------------------

class CLedger:
    """``runtime.memory_limits.Ledger`` with its counts in C (``pjrtkit_ledger``), where the C
    execute path counts the outputs it makes. The struct is never freed (buffers may outlive
    their client)."""

    __slots__ = ("c", "pool", "_counts")

    def __init__(self, limit_bytes: int | None, pool: "CLedger | None" = None):
        c = lib.pjrtkit_ledger_new(-1 if limit_bytes is None else int(limit_bytes),
                                   NULL if pool is None else pool.c)
        if c == NULL:
            raise MemoryError("no memory for a memory ledger")
        self.c = c
        self.pool = pool
        self._counts = ffi.new("int64_t[4]")

    @property
    def limit_bytes(self) -> int | None:
        limit = self.c.limit_bytes
        return None if limit < 0 else int(limit)

    @limit_bytes.setter
    def limit_bytes(self, value: int | None) -> None:
        self.c.limit_bytes = -1 if value is None else int(value)

    def check(self, nbytes: int) -> int:
        return lib.pjrtkit_ledger_check(self.c, min(nbytes, _LARGEST_REQUEST))

    def take(self, nbytes: int) -> int:
        return lib.pjrtkit_ledger_take(self.c, min(nbytes, _LARGEST_REQUEST))

    def give(self, nbytes: int) -> None:
        lib.pjrtkit_ledger_give(self.c, nbytes)

    def counts(self) -> tuple[int, int, int, int]:
        counts = ffi.new("int64_t[4]")
        lib.pjrtkit_ledger_read(self.c, counts)
        return int(counts[0]), int(counts[1]), int(counts[2]), int(counts[3])


# A request past any memory (dims whose product overflows int64 included) is counted as this
# many bytes: more than any limit, and summed with what is in use without overflowing int64.
_LARGEST_REQUEST = 1 << 62


def install_ledgers(client: Any) -> None:
    """Give a new runtime Client's host pool and memories C ledgers with the same limits (before
    any buffer is counted: at client creation)."""
    pool = getattr(client, "host_pool", None)
    memories = getattr(client, "memories", ())
    if pool is None or any(not hasattr(m, "ledger") or m.ledger.counts()[0] for m in memories):
        return  # not the runtime's Client, or counting already: the C path has no ledgers
    pool_ledger = CLedger(pool.ledger.limit_bytes)
    pool.ledger = pool_ledger
    for memory in memories:
        memory.ledger = CLedger(memory.ledger.limit_bytes,
                                pool_ledger if memory.pool is pool else None)


# ---- storage of Python buffers ----------------------------------------------------------------

# storage address -> the payload it keeps alive (the buffer's contents C may read)
_python_storage: dict[int, Any] = {}
# make_readable and detach exclude each other: a buffer deleted in between must not end up
# readable again.
_storage_lock = threading.Lock()


def make_readable(ref: BufferRef, argument_address) -> None:
    """Let C read a Python buffer's contents from now on, when it is ready without error and
    ``argument_address`` (the plugin's ``NativeKernel.argument_address``) gives their
    address; otherwise nothing."""
    c = ref.c
    if c is None or c.storage != NULL:
        return
    with _storage_lock:
        buffer = ref.obj
        ready = buffer.ready
        if buffer.is_deleted or not ready.is_ready() or ready.error() is not None:
            return
        payload = buffer.payload
        if payload is None or c.storage != NULL:
            return
        address = argument_address(payload)
        if address is None:
            return
        storage = lib.pjrtkit_storage_new_python(ffi.cast("void*", address), buffer.nbytes)
        if storage == NULL:
            return
        _python_storage[int(ffi.cast("uintptr_t", storage))] = payload
        if not lib.pjrtkit_buffer_attach(ffi.cast("PJRT_Buffer*", c), storage):
            _forget(storage)
    _drain_released()


def detach(c: Any) -> None:
    """C may no longer read this buffer's contents (``c``: its struct): it is being deleted,
    donated or destroyed. Executions in C reading them meanwhile keep them alive."""
    if c.storage == NULL:
        return
    with _storage_lock:
        storage = lib.pjrtkit_buffer_detach(ffi.cast("PJRT_Buffer*", c))
    if storage != NULL and lib.pjrtkit_storage_unref(storage) == 0 and storage.python_owned:
        _forget(storage)


def detach_ref(ref: BufferRef | None) -> None:
    if ref is not None and ref.c is not None:
        detach(ref.c)


def _forget(storage: Any) -> None:
    _python_storage.pop(int(ffi.cast("uintptr_t", storage)), None)
    lib.pjrtkit_storage_free(storage)


def _drain_released() -> None:
    """Forget the Python storages whose last reference C dropped (an execution in C that
    outlived the buffer's detach)."""
    taken = ffi.new("pjrtkit_storage*[]", _RELEASED_BATCH)
    while True:
        count = lib.pjrtkit_take_released(taken, _RELEASED_BATCH)
        for i in range(count):
            _forget(taken[i])
        if count < _RELEASED_BATCH:
            return


def readable_storages() -> int:
    """Python buffers whose contents C may read now (tests: nothing leaks)."""
    _drain_released()
    return len(_python_storage)


# ---- outputs of the C path --------------------------------------------------------------------

_adopt_lock = threading.Lock()
_DONE = None  # the runtime's completed Event, made on first use (abi loads without the runtime)


def adopt(ptr: Any) -> BufferRef:
    """The Ref of a buffer the C execute path made, made now if Python has none yet: a runtime
    Buffer (counted by the memory's ledger from now on) whose payload is the plugin's payload
    for a NumPy array over C's memory, which it keeps alive."""
    global _DONE
    with _adopt_lock:
        c = ffi.cast(_BUFFER_PTR, ptr)
        if c.head.ref != NULL:
            return ffi.from_handle(c.head.ref)
        if c.native != 1 or c.storage == NULL:
            raise InvalidArgument("buffer handle is neither a live pjrtkit buffer nor one the C "
                                  "execute path made")
        from pjrtkit.runtime.buffer import Buffer  # abi must load without the runtime
        from pjrtkit.runtime.event import Event

        if _DONE is None:
            _DONE = Event.completed()
        device_ref = ffi.from_handle(ffi.cast(_HEAD, c.device).ref)
        memory = ffi.from_handle(ffi.cast(_HEAD, c.memory).ref).obj
        client_ref = device_ref.client
        device = device_ref.obj
        dtype = to_dtype(int(c.element_type))
        shape = tuple(int(c.dims[i]) for i in range(c.rank))
        nbytes = int(c.on_device_size_in_bytes)
        storage = c.storage
        # The payload's own reference to the storage; the handle keeps its own until destroy.
        lib.pjrtkit_storage_ref(storage)
        data = ffi.gc(ffi.cast("char*", storage.data), lib.pjrtkit_storage_unref_data,
                      size=nbytes)
        array = np.frombuffer(ffi.buffer(data, nbytes), dtype=dtype).reshape(shape)
        payload = client_ref.backend.transfer_to_device(array=array, device=device.spec,
                                                        memory_kind=memory.kind)
        # The Buffer counts the bytes from now on (Memory.freed at its destroy).
        lib.pjrtkit_storage_disown(storage)
        buffer = Buffer.computed(client_ref.obj, dtype, shape, nbytes, device, memory, payload,
                                 _DONE)
        ref = BufferRef(buffer, client_ref)
        ref.c = ffi.gc(c, lib.pjrtkit_free)  # the struct C allocated now belongs to the Ref
        handle = ffi.new_handle(ref)
        c.head.ref = handle
        c.native = 2
        BUFFERS.adopt(c, handle)
        lib.pjrtkit_native_buffers_adopted(1)
        return ref


handles.adopt_native_buffer = adopt


# ---- plans ------------------------------------------------------------------------------------

def shape_key(shape: tuple[int, ...]) -> int:
    """The shape as the one int64 C compares (``pjrtkit_buffer.shape_key``)."""
    return handles.shape_key(tuple(int(d) for d in shape))


class NativeState:
    """A loaded executable's relation to the C path, kept on its Ref: ``pending`` while the
    runtime may still give a plan, the installed ``plan`` (cdata, freed with this object) and
    what keeps the kernel alive."""

    __slots__ = ("pending", "plan", "argument_address", "keep")

    def __init__(self):
        self.pending = True
        self.plan = None
        self.argument_address = None
        self.keep = ()  # what C reads through the plan: kept as long as it

    def executions(self) -> int:
        """Executions C served (tests)."""
        return 0 if self.plan is None else int(self.plan.executions)


def after_python_execution(ref: LoadedExecutableRef, argument_refs: list) -> None:
    """After an execution Python served: install the executable's native plan once the runtime
    has one, then make the arguments readable so that the next call with them runs in C."""
    state = ref.native
    if state.pending:
        _try_install(ref, state)
    if state.plan is not None:
        address = state.argument_address
        for argument in argument_refs:
            if argument.c is not None and argument.c.storage == NULL:
                make_readable(argument, address)


def _try_install(ref: LoadedExecutableRef, state: NativeState) -> None:
    from pjrtkit.runtime.executable import NO_NATIVE_PLAN  # abi must load without the runtime

    plan = ref.obj.native_plan()
    if plan is None:
        return
    state.pending = False
    if plan is NO_NATIVE_PLAN:
        return
    outputs = []
    for dtype, shape, nbytes, memory in plan.outputs:
        ledger = getattr(memory.ledger, "c", None)
        if ledger is None:
            return  # a client without C ledgers: Python keeps counting everything
        outputs.append((dtype, shape, nbytes, ledger, ref.client.memory_ptr(memory)))
    c = ffi.new("pjrtkit_native_plan*")
    arguments = ffi.new("pjrtkit_native_value[]", max(1, len(plan.arguments)))
    for value, (dtype, shape) in zip(arguments, plan.arguments):
        _describe(value, dtype, shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    results = ffi.new("pjrtkit_native_value[]", max(1, len(outputs)))
    for value, (dtype, shape, nbytes, ledger, memory_ptr) in zip(results, outputs):
        _describe(value, dtype, shape, nbytes)
        value.memory = memory_ptr
        value.ledger = ledger
    kernel = plan.kernel
    c.kernel = ffi.cast("pjrtkit_native_kernel", kernel.address)
    c.context = ffi.cast("void*", kernel.context)
    c.device = ref.client.device_ptr(plan.device)
    c.num_arguments = len(plan.arguments)
    c.num_outputs = len(outputs)
    c.arguments = arguments
    c.outputs = results
    c.enabled = 1
    state.plan = c
    state.argument_address = kernel.argument_address
    state.keep = (arguments, results, kernel)
    ref.c.native = c  # from now on C serves the calls it can
    # The plugin runs kernels on host payloads there: C may make the host transfers into these
    # memories too (PJRT_Client_BufferFromHostBuffer; adopt gives them the plugin's payload).
    for _dtype, _shape, _nbytes, memory in plan.outputs:
        _open_memory(ref.client, memory, plan.device)


def open_host_memories(client_ref) -> None:
    """For a plugin whose payloads are host arrays (``PlatformInfo.host_payloads``): C may make
    the host transfers into every addressable device's default memory from now on, as it may
    into a memory an installed native plan writes (``_try_install``)."""
    backend = client_ref.backend
    if not getattr(getattr(backend, "platform", None), "host_payloads", False):
        return
    for device in client_ref.obj.addressable_devices:
        _open_memory(client_ref, device.default_memory, device)


def _open_memory(client_ref, memory, device) -> None:
    """C may make buffers in ``memory``, attached to ``device`` alone, counted in its C
    ledger (nothing when it has none or serves several devices)."""
    ledger = getattr(getattr(memory, "ledger", None), "c", None)
    devices = getattr(memory, "devices", ())
    if ledger is None or len(devices) != 1 or devices[0] is not device:
        return
    c_memory = ffi.cast("pjrtkit_memory*", client_ref.memory_ptr(memory))
    c_memory.device = client_ref.device_ptr(device)
    lib.pjrtkit_memory_open(c_memory, ledger)


def _describe(value: Any, dtype: np.dtype, shape: tuple[int, ...], nbytes: int) -> None:
    value.element_type = to_code(dtype)
    value.nbytes = nbytes
    value.shape_key = shape_key(shape)
    value.rank = len(shape)
    for i, d in enumerate(shape):
        value.dims[i] = int(d)


def disable(ref: LoadedExecutableRef) -> None:
    """The executable is deleted or destroyed: C declines its calls from now on."""
    state = ref.native
    state.pending = False
    if state.plan is not None:
        state.plan.enabled = 0
