"""Layer 1: buffers (transfers, queries, deletion, reference counts) and events (OnReady with
and without error), driven through the C ABI."""
from __future__ import annotations

import threading

import numpy as np

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import ErrorCode
from pjrtkit.conformance.abi_driver import (
    BUFFER_TYPES, IMMUTABLE_ONLY_DURING_CALL, IMMUTABLE_UNTIL_TRANSFER_COMPLETES,
    IMMUTABLE_ZERO_COPY, MUTABLE_ZERO_COPY, NULL, AbiDriver, abi_check, buffer_type, ptr_key,
)
from pjrtkit.conformance.checks import Skipped, expect, expect_equal

INVALID = (ErrorCode.INVALID_ARGUMENT,)
UNUSABLE = (ErrorCode.INVALID_ARGUMENT, ErrorCode.FAILED_PRECONDITION)
DATA = np.arange(41, 45, dtype=np.float32)  # XLA's own test buffer: f32[4] = 41..44
WAIT_SECONDS = 30.0


def _same(d: AbiDriver, buffer, expected: np.ndarray, what: str) -> None:
    got = d.to_host(buffer)
    expect(got.dtype == expected.dtype and got.shape == expected.shape
           and got.tobytes() == np.ascontiguousarray(expected).tobytes(),
           f"{what}: bytes read back", expected=f"{expected.dtype}{list(expected.shape)} "
           f"{expected.tolist()}", actual=f"{got.dtype}{list(got.shape)} {got.tolist()}")


# ---- BufferFromHostBuffer --------------------------------------------------------------------

@abi_check("abi.buffer.from_host_immutable_only_during_call")
def from_host_only_during_call(d: AbiDriver):
    """kImmutableOnlyDuringCall copies: changing the host array afterwards changes nothing."""
    host = DATA.copy()
    buffer, _args = d.buffer_from_host(host, semantics=IMMUTABLE_ONLY_DURING_CALL)
    host[:] = -1
    _same(d, buffer, DATA, "after the host array was overwritten")


@abi_check("abi.buffer.from_host_until_transfer_completes")
def from_host_until_transfer_completes(d: AbiDriver):
    """kImmutableUntilTransferCompletes: done_with_host_buffer completes; the data arrives."""
    host = DATA.copy()
    buffer, args = d.buffer_from_host(host, semantics=IMMUTABLE_UNTIL_TRANSFER_COMPLETES,
                                      wait=False)
    if args.done_with_host_buffer != NULL:
        error = d.await_event(args.done_with_host_buffer)
        expect(error is None, "done_with_host_buffer completes without error", expected="OK",
               actual=error and f"{error.code.name}: {error}")
        ready = d.call("PJRT_Event_IsReady", event=args.done_with_host_buffer).is_ready
        expect(ready, "done_with_host_buffer is ready after Await", expected=True,
               actual=False)
    host[:] = -1  # allowed once the transfer is done
    _same(d, buffer, DATA, "after done_with_host_buffer")


@abi_check("abi.buffer.from_host_immutable_zero_copy")
def from_host_zero_copy(d: AbiDriver):
    """kImmutableZeroCopy: the buffer reads back the host data (aliased or copied)."""
    host = np.empty(16 + DATA.size, np.float32)[16:]  # 64-byte offset: aligned as XLA likes
    host[:] = DATA
    # done_with_host_buffer of an aliased buffer fires only when the buffer is gone: no wait.
    buffer, _args = d.buffer_from_host(host, semantics=IMMUTABLE_ZERO_COPY, wait=False)
    _same(d, buffer, DATA, "zero-copy buffer")


@abi_check("abi.buffer.from_host_mutable_zero_copy", mandatory=False,
           capability="mutable_zero_copy")
def from_host_mutable_zero_copy(d: AbiDriver):
    """kMutableZeroCopy: the buffer reads back the host data."""
    host = DATA.copy()
    buffer, _args = d.buffer_from_host(host, semantics=MUTABLE_ZERO_COPY, wait=False)
    _same(d, buffer, DATA, "mutable zero-copy buffer")


@abi_check("abi.buffer.from_host_byte_strides")
def from_host_byte_strides(d: AbiDriver):
    """byte_strides describe a non-contiguous host array (a transpose); it arrives in order."""
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = base.T  # shape (3, 2), byte strides (4, 12)
    buffer, _args = d.buffer_from_host(view, byte_strides=view.strides)
    _same(d, buffer, np.ascontiguousarray(view), "transposed host input")


@abi_check("abi.buffer.from_host_to_memory")
def from_host_to_memory(d: AbiDriver):
    """BufferFromHostBuffer into a memory (device NULL) lands in that memory."""
    device = d.device()
    memory = d.call("PJRT_Device_DefaultMemory", device=device).memory
    buffer, _args = d.buffer_from_host(DATA, device=None, memory=memory)
    got = d.call("PJRT_Buffer_Memory", buffer=buffer).memory
    expect(got == memory, "Buffer_Memory is the memory asked for",
           expected=d.memory_kind(memory), actual=d.memory_kind(got))
    _same(d, buffer, DATA, "buffer placed by memory")


@abi_check("abi.buffer.scalar_and_zero_size")
def buffer_scalar_and_zero_size(d: AbiDriver):
    """A scalar (rank 0) and a zero-size f32[0, 3] round-trip."""
    _same(d, d.put(np.float32(7.5)), np.asarray(np.float32(7.5)), "scalar")
    empty = np.zeros((0, 3), np.float32)
    buffer = d.put(empty)
    expect_equal(d.buffer_dims(buffer), (0, 3), "dimensions of a zero-size buffer")
    _same(d, buffer, empty, "zero-size buffer")


def _round_trip_check(name: str, dtype: np.dtype):
    def round_trip(d: AbiDriver):
        rng = np.random.default_rng(len(name))
        if dtype == np.bool_:
            host = rng.integers(0, 2, (3, 5)).astype(np.bool_)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            host = rng.integers(info.min, info.max, (3, 5), dtype=dtype, endpoint=True)
        elif dtype.kind == "c":
            host = (rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))).astype(dtype)
        else:
            host = rng.standard_normal((3, 5)).astype(dtype)
        buffer = d.put(host)
        expect_equal(d.call("PJRT_Buffer_ElementType", buffer=buffer).type, buffer_type(dtype),
                     f"Buffer_ElementType of a {name} buffer")
        _same(d, buffer, host, f"{name}[3, 5]")
    round_trip.__doc__ = f"A {name}[3, 5] buffer round-trips bit-exactly with its element type."
    mandatory = name in ("f32", "s32")
    abi_check(f"abi.buffer.round_trip_{name}", mandatory=mandatory,
              capability=None if mandatory else f"dtype_{name}")(round_trip)


for _name, (_code, _dtype) in BUFFER_TYPES.items():
    _round_trip_check(_name, _dtype)


# ---- queries ---------------------------------------------------------------------------------

@abi_check("abi.buffer.element_type_and_dimensions")
def buffer_type_and_dims(d: AbiDriver):
    """ElementType, Dimensions, UnpaddedDimensions and DynamicDimensionIndices of f32[2, 3]."""
    buffer = d.put(np.zeros((2, 3), np.float32))
    expect_equal(d.buffer_dtype(buffer), np.dtype(np.float32), "Buffer_ElementType")
    expect_equal(d.buffer_dims(buffer), (2, 3), "Buffer_Dimensions")
    args = d.call("PJRT_Buffer_UnpaddedDimensions", buffer=buffer)
    expect_equal(tuple(int(args.unpadded_dims[i]) for i in range(args.num_dims)), (2, 3),
                 "Buffer_UnpaddedDimensions")
    args = d.call("PJRT_Buffer_DynamicDimensionIndices", buffer=buffer)
    expect_equal(int(args.num_dynamic_dims), 0, "a static buffer has no dynamic dimensions")


@abi_check("abi.buffer.to_host_two_call")
def buffer_to_host_two_call(d: AbiDriver):
    """ToHostBuffer with dst NULL reports dst_size; the second call copies and its event fires."""
    buffer = d.put(DATA)
    args = d.call("PJRT_Buffer_ToHostBuffer", src=buffer, dst=NULL)
    expect_equal(int(args.dst_size), DATA.nbytes, "dst_size reported for f32[4]")
    out = np.zeros_like(DATA)
    args = d.call("PJRT_Buffer_ToHostBuffer", src=buffer, dst=ffi.cast("void*", out.ctypes.data),
                  dst_size=out.nbytes)
    event = d.own_event(args.event)
    expect(event != NULL, "the copy returns an event", expected="an event", actual="NULL")
    error = d.await_event(event)
    expect(error is None, "the copy's event completes without error", expected="OK",
           actual=error and f"{error.code.name}: {error}")
    expect(np.array_equal(out, DATA), "bytes copied to the host", expected=DATA.tolist(),
           actual=out.tolist())


@abi_check("abi.buffer.to_host_dst_too_small")
def buffer_to_host_too_small(d: AbiDriver):
    """ToHostBuffer into a dst smaller than the buffer is INVALID_ARGUMENT, nothing written."""
    buffer = d.put(DATA)
    out = np.full(2, -1, np.float32)
    args = d.new_args("PJRT_Buffer_ToHostBuffer", src=buffer,
                      dst=ffi.cast("void*", out.ctypes.data), dst_size=out.nbytes)
    d.expect_error("PJRT_Buffer_ToHostBuffer", args, INVALID, "dst_size 8 for 16 bytes")
    d.own_event(args.event)


@abi_check("abi.buffer.on_device_size")
def buffer_on_device_size(d: AbiDriver):
    """OnDeviceSizeInBytes of f32[4] is at least its 16 bytes."""
    size = d.call("PJRT_Buffer_OnDeviceSizeInBytes", buffer=d.put(DATA)).on_device_size_in_bytes
    expect(size >= DATA.nbytes, "on-device size", expected=f">= {DATA.nbytes}", actual=int(size))


@abi_check("abi.buffer.device_and_memory")
def buffer_device_and_memory(d: AbiDriver):
    """A buffer put on a device reports that device, and a memory of that device (default)."""
    device = d.device()
    buffer = d.put(DATA, device=device)
    on = d.call("PJRT_Buffer_Device", buffer=buffer).device
    expect(on == device, "Buffer_Device", expected=hex(ptr_key(device)), actual=hex(ptr_key(on)))
    memory = d.call("PJRT_Buffer_Memory", buffer=buffer).memory
    default = d.call("PJRT_Device_DefaultMemory", device=device).memory
    expect(memory == default, "a buffer put on a device is in its default memory",
           expected=d.memory_kind(default), actual=d.memory_kind(memory))


@abi_check("abi.buffer.memory_layout", mandatory=False, capability="memory_layout")
def buffer_memory_layout(d: AbiDriver):
    """GetMemoryLayout of f32[2, 3] is row-major: tiled with minor_to_major [1, 0], or strides."""
    args = d.call("PJRT_Buffer_GetMemoryLayout", buffer=d.put(np.zeros((2, 3), np.float32)))
    layout = args.layout
    if layout.type == 0:
        tiled = layout.tiled
        order = [int(tiled.minor_to_major[i]) for i in range(tiled.minor_to_major_size)]
        expect_equal(order, [1, 0], "minor_to_major of a row-major f32[2, 3]")
    else:
        strides = [int(layout.strides.byte_strides[i])
                   for i in range(layout.strides.num_byte_strides)]
        expect_equal(strides, [12, 4], "byte strides of a row-major f32[2, 3]")


@abi_check("abi.buffer.ready_event")
def buffer_ready_event(d: AbiDriver):
    """Buffer_ReadyEvent awaits without error and is ready afterwards."""
    event = d.own_event(d.call("PJRT_Buffer_ReadyEvent", buffer=d.put(DATA)).event)
    expect(event != NULL, "a ready event is returned", expected="an event", actual="NULL")
    error = d.await_event(event)
    expect(error is None, "the ready event completes without error", expected="OK",
           actual=error and f"{error.code.name}: {error}")
    expect(d.call("PJRT_Event_IsReady", event=event).is_ready, "IsReady after Await",
           expected=True, actual=False)


@abi_check("abi.buffer.delete_is_deleted")
def buffer_delete(d: AbiDriver):
    """IsDeleted is false, then true after Buffer_Delete; Destroy still works afterwards."""
    buffer = d.put(DATA)
    args = d.new_args("PJRT_Buffer_IsDeleted", buffer=buffer, is_deleted=True)
    expect(not d.invoke("PJRT_Buffer_IsDeleted", args).is_deleted, "a new buffer",
           expected=False, actual=True)
    d.call("PJRT_Buffer_Delete", buffer=buffer)
    expect(d.invoke("PJRT_Buffer_IsDeleted", args).is_deleted, "IsDeleted after Delete",
           expected=True, actual=False)


def _to_host_error(d: AbiDriver, buffer) -> object:
    """Read ``buffer`` (at most 64 bytes) to the host; the error it fails with, directly or
    through its event, or None."""
    out = d.keep(np.zeros(64, np.uint8))
    args = d.new_args("PJRT_Buffer_ToHostBuffer", src=buffer,
                      dst=ffi.cast("void*", out.ctypes.data), dst_size=out.nbytes)
    error = d.raw("PJRT_Buffer_ToHostBuffer", args)
    if error is None and args.event != NULL:
        error = d.await_event(d.own_event(args.event))
    return error


@abi_check("abi.buffer.use_after_delete")
def buffer_use_after_delete(d: AbiDriver):
    """Reading a deleted buffer fails (the error may come directly or through the event)."""
    buffer = d.put(DATA)
    d.call("PJRT_Buffer_Delete", buffer=buffer)
    error = _to_host_error(d, buffer)
    expect(error is not None and error.code in UNUSABLE, "ToHostBuffer of a deleted buffer",
           expected="INVALID_ARGUMENT or FAILED_PRECONDITION",
           actual="success" if error is None else f"{error.code.name}: {error}")


@abi_check("abi.buffer.external_reference_count", mandatory=False,
           capability="external_references")
def buffer_external_references(d: AbiDriver):
    """Increase then Decrease succeed; a Decrease at zero is INVALID_ARGUMENT."""
    buffer = d.put(DATA)
    d.call("PJRT_Buffer_IncreaseExternalReferenceCount", buffer=buffer)
    d.call("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)
    d.expect_error("PJRT_Buffer_DecreaseExternalReferenceCount",
                   d.new_args("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer),
                   INVALID, "decrease of a zero external reference count")


@abi_check("abi.buffer.unsafe_pointer_on_cpu", mandatory=False, capability="zero_copy_host_view")
def buffer_unsafe_pointer(d: AbiDriver):
    """A buffer that IsOnCpu exposes its bytes through UnsafePointer (JAX reads it zero-copy)."""
    buffer = d.put(DATA)
    if not d.call("PJRT_Buffer_IsOnCpu", buffer=buffer).is_on_cpu:
        raise Skipped("Buffer_IsOnCpu is false: JAX reads results with ToHostBuffer instead")
    d.await_event(d.own_event(d.call("PJRT_Buffer_ReadyEvent", buffer=buffer).event))
    d.call("PJRT_Buffer_IncreaseExternalReferenceCount", buffer=buffer)
    try:
        address = d.call("PJRT_Buffer_UnsafePointer", buffer=buffer).buffer_pointer
        expect(address != 0, "UnsafePointer of an on-CPU buffer", expected="an address",
               actual=0)
        got = bytes(ffi.buffer(ffi.cast("char*", address), DATA.nbytes))
        expect(got == DATA.tobytes(), "the bytes at UnsafePointer", expected=DATA.tolist(),
               actual=np.frombuffer(got, np.float32).tolist())
    finally:
        d.call("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)


@abi_check("abi.buffer.copy_to_device", mandatory=False, capability="copy_to_device")
def buffer_copy_to_device(d: AbiDriver):
    """Buffer_CopyToDevice to the last addressable device gives an equal buffer there."""
    target = d.addressable_devices()[-1]
    copy = d.own_buffer(d.call("PJRT_Buffer_CopyToDevice", buffer=d.put(DATA),
                               dst_device=target).dst_buffer)
    on = d.call("PJRT_Buffer_Device", buffer=copy).device
    expect(on == target, "the copy is on the target device", expected=hex(ptr_key(target)),
           actual=hex(ptr_key(on)))
    _same(d, copy, DATA, "copy on the target device")


@abi_check("abi.buffer.copy_to_memory", mandatory=False, capability="copy_to_memory")
def buffer_copy_to_memory(d: AbiDriver):
    """Buffer_CopyToMemory into every memory of the device round-trips the data there."""
    source = d.put(DATA)
    kinds = []
    for memory in d.device_memories(d.device()):
        copy = d.own_buffer(d.call("PJRT_Buffer_CopyToMemory", buffer=source,
                                   dst_memory=memory).dst_buffer)
        got = d.call("PJRT_Buffer_Memory", buffer=copy).memory
        expect(got == memory, "the copy is in the memory asked for",
               expected=d.memory_kind(memory), actual=d.memory_kind(got))
        _same(d, copy, DATA, f"copy in {d.memory_kind(memory)}")
        kinds.append(d.memory_kind(memory))
    return ", ".join(kinds)


@abi_check("abi.buffer.copy_raw_to_host", mandatory=False, capability="copy_raw_to_host")
def buffer_copy_raw_to_host(d: AbiDriver):
    """CopyRawToHost of bytes [4, 12) of f32[4] gives elements 1 and 2."""
    out = np.zeros(2, np.float32)
    args = d.call("PJRT_Buffer_CopyRawToHost", buffer=d.put(DATA),
                  dst=ffi.cast("void*", out.ctypes.data), offset=4, transfer_size=8)
    if args.event != NULL:
        error = d.await_event(d.own_event(args.event))
        if error is not None:
            raise error
    expect(np.array_equal(out, DATA[1:3]), "raw bytes copied", expected=DATA[1:3].tolist(),
           actual=out.tolist())


@abi_check("abi.buffer.create_uninitialized", mandatory=False,
           capability="uninitialized_buffers")
def buffer_create_uninitialized(d: AbiDriver):
    """CreateUninitializedBuffer gives a buffer of the asked type and shape on the device."""
    dims = d.keep(ffi.new("int64_t[]", [2, 3]))
    device = d.device()
    buffer = d.own_buffer(d.call(
        "PJRT_Client_CreateUninitializedBuffer", client=d.client, shape_dims=dims,
        shape_num_dims=2, shape_element_type=buffer_type(np.float32), device=device,
        memory=d.call("PJRT_Device_DefaultMemory", device=device).memory).buffer)
    expect_equal(d.buffer_dims(buffer), (2, 3), "dimensions of the uninitialized buffer")
    expect_equal(d.buffer_dtype(buffer), np.dtype(np.float32), "its element type")


# ---- events ----------------------------------------------------------------------------------

class OnReadyProbe:
    """A real C callback for PJRT_Event_OnReady that records (calls, error code, message).

    The plugin may call it on any thread; the error it receives is owned by the callback, which
    reads and destroys it through the plugin's own functions.
    """

    def __init__(self, d: AbiDriver):
        self.d = d
        self.calls = 0
        self.error = None
        self.fired = threading.Event()
        self.callback = ffi.callback("void(PJRT_Error*, void*)", self._on_ready)
        d.keep(self)  # C may call back until the event fires; stay alive until the scope ends

    def _on_ready(self, error, _user_arg) -> None:
        try:
            self.error = self.d.take_error(error)
        except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
            self.error = exc
        self.calls += 1
        self.fired.set()

    def register(self, event) -> None:
        self.d.call("PJRT_Event_OnReady", event=event, callback=self.callback, user_arg=NULL)

    def wait(self) -> None:
        expect(self.fired.wait(WAIT_SECONDS), "the OnReady callback is called",
               expected=f"a call within {WAIT_SECONDS:.0f} s", actual="no call")


@abi_check("abi.event.on_ready_success")
def event_on_ready_success(d: AbiDriver):
    """OnReady on a successful event calls the callback exactly once, with no error."""
    event = d.own_event(d.call("PJRT_Buffer_ReadyEvent", buffer=d.put(DATA)).event)
    probe = OnReadyProbe(d)
    probe.register(event)
    probe.wait()
    d.await_event(event)
    expect(probe.error is None, "the callback's error", expected="NULL",
           actual=repr(probe.error))
    expect_equal(probe.calls, 1, "number of callback calls")


@abi_check("abi.event.error_none_when_ok")
def event_error_none(d: AbiDriver):
    """Event_Error of a completed successful event returns no error."""
    event = d.own_event(d.call("PJRT_Buffer_ReadyEvent", buffer=d.put(DATA)).event)
    d.await_event(event)
    error = d.raw("PJRT_Event_Error", d.new_args("PJRT_Event_Error", event=event))
    expect(error is None, "Event_Error of a successful event", expected="NULL",
           actual=error and f"{error.code.name}: {error}")


def _error_event(d: AbiDriver):
    """(event, expected code, how): an event that completes with an error, from whatever the
    plugin supports: PJRT_Event_Create/Set (0.90), an error buffer's ready event (0.90), or
    reading a deleted buffer when the failure is reported through the event."""
    if d.has("PJRT_Event_Create") and d.has("PJRT_Event_Set"):
        d.initialize()
        event = d.own_event(d.call("PJRT_Event_Create").event)
        message = d.keep(ffi.new("char[]", b"conformance: set with DATA_LOSS"))
        d.call("PJRT_Event_Set", event=event, error_code=int(ErrorCode.DATA_LOSS),
               error_message=message, error_message_size=len(b"conformance: set with DATA_LOSS"))
        return event, (ErrorCode.DATA_LOSS,), "PJRT_Event_Set"
    if d.has("PJRT_Client_CreateErrorBuffer"):
        buffer = _error_buffer(d, ErrorCode.DATA_LOSS)
        event = d.own_event(d.call("PJRT_Buffer_ReadyEvent", buffer=buffer).event)
        return event, (ErrorCode.DATA_LOSS,), "Client_CreateErrorBuffer"
    buffer = d.put(DATA)
    d.call("PJRT_Buffer_Delete", buffer=buffer)
    out = d.keep(np.zeros(4, np.float32))
    args = d.new_args("PJRT_Buffer_ToHostBuffer", src=buffer,
                      dst=ffi.cast("void*", out.ctypes.data), dst_size=out.nbytes)
    error = d.raw("PJRT_Buffer_ToHostBuffer", args)
    if error is not None or args.event == NULL:
        raise Skipped("no way to make an event that fails: no Event_Create/Set or "
                      "CreateErrorBuffer (PJRT 0.90), and reading a deleted buffer fails "
                      "directly rather than through its event")
    return d.own_event(args.event), UNUSABLE, "ToHostBuffer of a deleted buffer"


def _error_buffer(d: AbiDriver, code: ErrorCode):
    dims = d.keep(ffi.new("int64_t[]", [4]))
    message = d.keep(ffi.new("char[]", b"conformance error buffer"))
    device = d.device()
    return d.own_buffer(d.call(
        "PJRT_Client_CreateErrorBuffer", client=d.client, error_code=int(code),
        error_message=message, error_message_size=len(b"conformance error buffer"),
        shape_dims=dims, shape_num_dims=1, shape_element_type=buffer_type(np.float32),
        memory=d.call("PJRT_Device_DefaultMemory", device=device).memory).buffer)


@abi_check("abi.event.on_ready_error")
def event_on_ready_error(d: AbiDriver):
    """OnReady on a failing event passes the callback that error (with its code), once."""
    event, codes, how = _error_event(d)
    probe = OnReadyProbe(d)
    probe.register(event)
    probe.wait()
    error = probe.error
    expect(error is not None and getattr(error, "code", None) in codes,
           f"the callback's error ({how})", expected=" or ".join(c.name for c in codes),
           actual=repr(error))
    expect_equal(probe.calls, 1, "number of callback calls")
    return how


@abi_check("abi.event.await_and_error_report_failure")
def event_await_error(d: AbiDriver):
    """Await and Event_Error of a failing event both return its error code."""
    event, codes, how = _error_event(d)
    awaited = d.await_event(event)
    expect(awaited is not None and awaited.code in codes, f"Event_Await ({how})",
           expected=" or ".join(c.name for c in codes), actual=repr(awaited))
    expect(d.call("PJRT_Event_IsReady", event=event).is_ready, "IsReady of a failed event",
           expected=True, actual=False)
    error = d.raw("PJRT_Event_Error", d.new_args("PJRT_Event_Error", event=event))
    expect(error is not None and error.code in codes, f"Event_Error ({how})",
           expected=" or ".join(c.name for c in codes), actual=repr(error))
    return how


@abi_check("abi.event.create_set_pending", mandatory=False, capability="host_events")
def event_create_set(d: AbiDriver):
    """Event_Create gives a pending event; OnReady waits for Event_Set (PJRT 0.90)."""
    d.require_minor(90, "PJRT_Event_Create / PJRT_Event_Set")
    d.initialize()
    event = d.own_event(d.call("PJRT_Event_Create").event)
    expect(not d.call("PJRT_Event_IsReady", event=event).is_ready, "a created event is pending",
           expected=False, actual=True)
    probe = OnReadyProbe(d)
    probe.register(event)
    expect_equal(probe.calls, 0, "callback calls before Event_Set")
    d.call("PJRT_Event_Set", event=event, error_code=0)
    probe.wait()
    expect(probe.error is None, "the callback's error after a successful Set", expected="NULL",
           actual=repr(probe.error))
    expect_equal(probe.calls, 1, "number of callback calls")


@abi_check("abi.buffer.error_buffer", mandatory=False, capability="error_buffers")
def buffer_error_buffer(d: AbiDriver):
    """A buffer from CreateErrorBuffer fails to read with the code it was made with (0.90)."""
    d.require_minor(90, "PJRT_Client_CreateErrorBuffer")
    buffer = _error_buffer(d, ErrorCode.ABORTED)
    expect_equal(d.buffer_dims(buffer), (4,), "dimensions of the error buffer")
    error = _to_host_error(d, buffer)
    expect(error is not None and error.code == ErrorCode.ABORTED,
           "reading an error buffer", expected="ABORTED",
           actual="success" if error is None else f"{error.code.name}: {error}")


@abi_check("abi.struct_size.larger_buffer_from_host")
def struct_larger_buffer_from_host(d: AbiDriver):
    """BufferFromHostBuffer with a larger Args struct (newer caller) transfers correctly."""
    buffer, _args = d.buffer_from_host(DATA, struct_extra=64)
    _same(d, buffer, DATA, "buffer made through a larger struct")
