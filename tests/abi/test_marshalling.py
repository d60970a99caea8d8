"""Args marshalling through the C table, against duck-typed runtime objects.

Only ``pjrtkit.runtime.event.Event`` is taken from the real runtime (the ABI layer creates
completed events itself); everything else follows INTERFACE.md with fakes.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from abi_support import FakeClient, FakeLoaded, new_args, ok, take_error

from pjrtkit.abi import named_values
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.fn_executable import new_loaded_executable
from pjrtkit.abi.handles import BLOBS, CLIENTS, EVENTS, ClientRef, EventRef, deref
from pjrtkit.errors import ErrorCode, InvalidArgument

runtime_event = pytest.importorskip("pjrtkit.runtime.event", reason="needs the runtime's Event")
Event = runtime_event.Event


@pytest.fixture
def client(table):
    fake = FakeClient()
    ptr = CLIENTS.new(ClientRef(fake, backend=None))
    yield fake, ptr
    table.PJRT_Client_Destroy(new_args("PJRT_Client_Destroy", client=ptr))
    assert fake.destroyed


def _call(table, name, **fields):
    args = new_args(name, **fields)
    ok(table, getattr(table, name)(args))
    return args


def _text(ptr, size):
    return ffi.unpack(ptr, size).decode()


# ---- handles and strings ----------------------------------------------------------------------

def test_device_and_memory_handles_are_stable(table, client):
    fake, ptr = client
    first = _call(table, "PJRT_Client_Devices", client=ptr)
    second = _call(table, "PJRT_Client_Devices", client=ptr)
    assert first.num_devices == 2 and first.devices == second.devices
    devices = [first.devices[i] for i in range(2)]
    looked_up = _call(table, "PJRT_Client_LookupDevice", client=ptr, id=1).device
    assert looked_up == devices[1]
    desc = [_call(table, "PJRT_Device_GetDescription", device=devices[0]).device_description
            for _ in range(2)]
    assert desc[0] == desc[1], "a device's description handle must not change"
    assert _call(table, "PJRT_DeviceDescription_Id", device_description=desc[0]).id == 0
    memories = _call(table, "PJRT_Client_AddressableMemories", client=ptr)
    default = _call(table, "PJRT_Device_DefaultMemory", device=devices[0]).memory
    assert default == memories.addressable_memories[0]
    by_memory = _call(table, "PJRT_Memory_AddressableByDevices", memory=default)
    assert by_memory.num_devices == 1 and by_memory.devices[0] == devices[0]


def test_unknown_device_id_is_invalid_argument(table, client):
    _, ptr = client
    args = new_args("PJRT_Client_LookupDevice", client=ptr, id=-1)
    code, message = take_error(table, table.PJRT_Client_LookupDevice(args))
    assert code == ErrorCode.INVALID_ARGUMENT and "-1" in message


def test_strings_stay_at_the_same_address(table, client):
    fake, ptr = client
    a = _call(table, "PJRT_Client_PlatformName", client=ptr)
    b = _call(table, "PJRT_Client_PlatformName", client=ptr)
    assert a.platform_name == b.platform_name
    assert _text(a.platform_name, a.platform_name_size) == "pjrtkit_abi_test"
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[1]
    desc = _call(table, "PJRT_Device_GetDescription", device=device).device_description
    kind = _call(table, "PJRT_DeviceDescription_Kind", device_description=desc)
    assert _text(kind.device_kind, kind.device_kind_size) == "fake core"
    attrs = _call(table, "PJRT_DeviceDescription_Attributes", device_description=desc)
    assert named_values.read(attrs.attributes, attrs.num_attributes, "attrs") == {
        "coords": [1, 0, 0], "core_on_chip": 0}


def test_memory_stats_set_flags(table, client):
    fake, ptr = client
    from types import SimpleNamespace
    fake.devices[0].stats = SimpleNamespace(bytes_in_use=10, peak_bytes_in_use=20, num_allocs=None)
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    stats = _call(table, "PJRT_Device_MemoryStats", device=device)
    assert (stats.bytes_in_use, stats.peak_bytes_in_use, stats.peak_bytes_in_use_is_set) == (10, 20, True)
    assert not stats.num_allocs_is_set and not stats.bytes_limit_is_set


# ---- buffers ----------------------------------------------------------------------------------

def _from_host(table, client_ptr, device, host):
    dims = ffi.new("int64_t[]", list(host.shape))
    return _call(table, "PJRT_Client_BufferFromHostBuffer", client=client_ptr,
                 data=ffi.cast("void*", host.ctypes.data), type=lib.PJRT_Buffer_Type_F32,
                 dims=dims, num_dims=host.ndim, device=device)


def test_buffer_from_strided_host_memory(table, client):
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[::2, 1::2]  # non-contiguous: byte strides (48, 8)
    args = _from_host_view(table, ptr, device, view)
    stored = fake.host_arrays[-1]
    assert stored.flags.c_contiguous and stored.flags.owndata
    np.testing.assert_array_equal(stored, view)
    base[:] = -1  # the caller may reuse its memory at once: pjrtkit kept a copy
    np.testing.assert_array_equal(stored, np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2])
    ready = _call(table, "PJRT_Event_IsReady", event=args.done_with_host_buffer)
    assert ready.is_ready
    _call(table, "PJRT_Event_Destroy", event=args.done_with_host_buffer)
    _call(table, "PJRT_Buffer_Destroy", buffer=args.buffer)


def _from_host_view(table, client_ptr, device, view):
    dims = ffi.new("int64_t[]", list(view.shape))
    strides = ffi.new("int64_t[]", list(view.strides))
    return _call(table, "PJRT_Client_BufferFromHostBuffer", client=client_ptr,
                 data=ffi.cast("void*", view.ctypes.data), type=lib.PJRT_Buffer_Type_F32,
                 dims=dims, num_dims=view.ndim, byte_strides=strides, num_byte_strides=view.ndim,
                 device=device)


def test_buffer_metadata_arrays_live_with_the_buffer(table, client):
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[1]
    host = np.ones((2, 3, 4), np.float32)
    buffer = _from_host(table, ptr, device, host).buffer
    dims = _call(table, "PJRT_Buffer_Dimensions", buffer=buffer)
    assert ffi.unpack(dims.dims, dims.num_dims) == [2, 3, 4]
    again = _call(table, "PJRT_Buffer_Dimensions", buffer=buffer)
    assert again.dims == dims.dims
    layout_args = _call(table, "PJRT_Buffer_GetMemoryLayout", buffer=buffer)
    layout = layout_args.layout  # a view into layout_args, which must stay alive
    assert layout.type == lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    assert ffi.unpack(layout.tiled.minor_to_major, layout.tiled.minor_to_major_size) == [2, 1, 0]
    assert layout.tiled.num_tiles == 0
    assert _call(table, "PJRT_Buffer_ElementType", buffer=buffer).type == lib.PJRT_Buffer_Type_F32
    assert _call(table, "PJRT_Buffer_DynamicDimensionIndices", buffer=buffer).num_dynamic_dims == 0
    assert _call(table, "PJRT_Buffer_Device", buffer=buffer).device == device
    _call(table, "PJRT_Buffer_Destroy", buffer=buffer)


def test_to_host_buffer_two_calls(table, client):
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = _from_host(table, ptr, device, host).buffer
    size = _call(table, "PJRT_Buffer_ToHostBuffer", src=buffer).dst_size
    assert size == host.nbytes
    dst = ffi.new("char[]", size)
    args = _call(table, "PJRT_Buffer_ToHostBuffer", src=buffer, dst=dst, dst_size=size)
    _call(table, "PJRT_Event_Await", event=args.event)
    np.testing.assert_array_equal(np.frombuffer(ffi.buffer(dst, size), np.float32).reshape(2, 3), host)
    _call(table, "PJRT_Event_Destroy", event=args.event)
    _call(table, "PJRT_Buffer_Destroy", buffer=buffer)


def _tiled_layout(order, tiles=()):
    """A PJRT_Buffer_MemoryLayout (tiled) with minor_to_major ``order`` and ``tiles`` (each a
    tuple of tile dimensions); the arrays it points to are kept on the returned struct's owner."""
    layout = ffi.new("PJRT_Buffer_MemoryLayout*")
    keep = [ffi.new("int64_t[]", list(order))]
    layout.struct_size = ffi.sizeof("PJRT_Buffer_MemoryLayout")
    layout.type = lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    layout.tiled.minor_to_major, layout.tiled.minor_to_major_size = keep[0], len(order)
    if tiles:
        keep.append(ffi.new("int64_t[]", [d for tile in tiles for d in tile]))
        keep.append(ffi.new("size_t[]", [len(tile) for tile in tiles]))
        layout.tiled.tile_dims, layout.tiled.tile_dim_sizes = keep[1], keep[2]
        layout.tiled.num_tiles = len(tiles)
    return layout, keep


def test_to_host_buffer_writes_the_layout_asked_for(table, client):
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = _from_host(table, ptr, device, host).buffer
    layout, _keep = _tiled_layout([0, 1])  # column-major
    dst = ffi.new("char[]", 24)
    args = _call(table, "PJRT_Buffer_ToHostBuffer", src=buffer, host_layout=layout, dst=dst,
                 dst_size=24)
    _call(table, "PJRT_Event_Await", event=args.event)
    np.testing.assert_array_equal(np.frombuffer(ffi.buffer(dst, 24), np.float32),
                                  host.T.reshape(-1))
    _call(table, "PJRT_Event_Destroy", event=args.event)
    _call(table, "PJRT_Buffer_Destroy", buffer=buffer)


def test_a_buffer_made_column_major_reports_its_layout(table, client):
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    layout, _keep = _tiled_layout([0, 1])
    dims = ffi.new("int64_t[]", [2, 3])
    buffer = _call(table, "PJRT_Client_BufferFromHostBuffer", client=ptr,
                   data=ffi.cast("void*", host.ctypes.data), type=lib.PJRT_Buffer_Type_F32,
                   dims=dims, num_dims=2, device=device, device_layout=layout).buffer
    np.testing.assert_array_equal(fake.host_arrays[-1], host)  # the payload is the values
    reported = _call(table, "PJRT_Buffer_GetMemoryLayout", buffer=buffer)
    assert ffi.unpack(reported.layout.tiled.minor_to_major,
                      reported.layout.tiled.minor_to_major_size) == [0, 1]
    _call(table, "PJRT_Buffer_Destroy", buffer=buffer)


def test_to_host_buffer_refuses_a_tiled_layout(table, client):
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    buffer = _from_host(table, ptr, device, np.zeros((2, 3), np.float32)).buffer
    layout, _keep = _tiled_layout([1, 0], tiles=[(8, 128)])
    dst = ffi.new("char[]", 24)
    args = new_args("PJRT_Buffer_ToHostBuffer", src=buffer, host_layout=layout, dst=dst, dst_size=24)
    code, message = take_error(table, table.PJRT_Buffer_ToHostBuffer(args))
    assert code == ErrorCode.UNIMPLEMENTED and "1 tile(s)" in message
    _call(table, "PJRT_Buffer_Destroy", buffer=buffer)


@pytest.mark.parametrize("garbage", [0, 3, 1 << 40])
def test_to_host_buffer_reads_a_layout_whose_struct_size_jaxlib_left_unset(table, client, garbage):
    # jaxlib's ConvertToBufferMemoryLayoutData fills a layout's type and member but never its
    # struct_size, so whatever the stack held arrives: the layout must be read by its type.
    fake, ptr = client
    device = _call(table, "PJRT_Client_Devices", client=ptr).devices[0]
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = _from_host(table, ptr, device, host).buffer
    layout = ffi.new("PJRT_Buffer_MemoryLayout*")
    order = ffi.new("int64_t[]", [1, 0])
    layout.struct_size = garbage
    layout.type = lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    layout.tiled.minor_to_major, layout.tiled.minor_to_major_size = order, 2
    dst = ffi.new("char[]", 24)
    args = _call(table, "PJRT_Buffer_ToHostBuffer", src=buffer, host_layout=layout, dst=dst,
                 dst_size=24)
    _call(table, "PJRT_Event_Await", event=args.event)
    np.testing.assert_array_equal(np.frombuffer(ffi.buffer(dst, 24), np.float32).reshape(2, 3), host)
    _call(table, "PJRT_Event_Destroy", event=args.event)
    _call(table, "PJRT_Buffer_Destroy", buffer=buffer)

# ---- executables ------------------------------------------------------------------------------

@pytest.fixture
def loaded(table, client):
    fake, ptr = client
    exe = FakeLoaded(fake)
    handle = new_loaded_executable(exe, deref(ptr, ClientRef, "client"))
    yield exe, handle
    _call(table, "PJRT_LoadedExecutable_Destroy", executable=handle)
    assert exe.destroyed


def test_device_assignment_is_a_serialized_proto_with_deleter(table, loaded):
    from jaxlib import xla_client
    exe, handle = loaded
    blobs = len(BLOBS)
    args = _call(table, "PJRT_LoadedExecutable_GetDeviceAssignment", executable=handle)
    got = ffi.unpack(args.serialized_bytes, args.serialized_bytes_size)
    assert got == xla_client.DeviceAssignment.create(np.array([[0, 1]])).serialize()
    assert len(BLOBS) == blobs + 1
    args.serialized_device_assignment_deleter(args.serialized_device_assignment)
    assert len(BLOBS) == blobs


def test_executable_metadata(table, loaded):
    exe, handle = loaded
    executable = _call(table, "PJRT_LoadedExecutable_GetExecutable", loaded_executable=handle).executable
    types = _call(table, "PJRT_Executable_OutputElementTypes", executable=executable)
    assert list(types.output_types[0:types.num_output_types]) == [
        lib.PJRT_Buffer_Type_F32, lib.PJRT_Buffer_Type_S8]
    dims = _call(table, "PJRT_Executable_OutputDimensions", executable=executable)
    assert list(dims.dim_sizes[0:2]) == [2, 0] and list(dims.dims[0:2]) == [2, 3]
    assert _call(table, "PJRT_Executable_OutputDimensions", executable=executable).dims == dims.dims
    kinds = _call(table, "PJRT_Executable_OutputMemoryKinds", executable=executable)
    assert [_text(kinds.memory_kinds[i], kinds.memory_kind_sizes[i]) for i in range(2)] == [
        "device", "pinned_host"]
    assert _call(table, "PJRT_Executable_NumPartitions", executable=executable).num_partitions == 2
    name = _call(table, "PJRT_Executable_Name", executable=executable)
    assert _text(name.executable_name, name.executable_name_size) == "jit_fake"
    ser = _call(table, "PJRT_Executable_Serialize", executable=executable)
    assert ffi.unpack(ser.serialized_bytes, ser.serialized_bytes_size) == b"serialized-executable"
    ser.serialized_executable_deleter(ser.serialized_executable)
    _call(table, "PJRT_Executable_Destroy", executable=executable)


def test_execute_fills_outputs_and_events(table, client, loaded):
    fake, ptr = client
    exe, handle = loaded
    devices = _call(table, "PJRT_Client_Devices", client=ptr).devices
    inputs = [_from_host(table, ptr, devices[d], np.full((2,), d, np.float32)).buffer for d in range(2)]
    rows = [ffi.new("PJRT_Buffer*[]", [inputs[d]]) for d in range(2)]
    argument_lists = ffi.new("PJRT_Buffer**[]", rows)
    outs = [ffi.new("PJRT_Buffer*[]", 2) for _ in range(2)]
    output_lists = ffi.new("PJRT_Buffer**[]", outs)
    events = ffi.new("PJRT_Event*[]", 2)
    options = ffi.new("PJRT_ExecuteOptions*")
    options.struct_size = ffi.sizeof("PJRT_ExecuteOptions")
    keep = ffi.new("int64_t[]", [0])
    options.non_donatable_input_indices, options.num_non_donatable_input_indices = keep, 1
    _call(table, "PJRT_LoadedExecutable_Execute", executable=handle, options=options,
          argument_lists=ffi.cast("PJRT_Buffer* const* const*", argument_lists), num_devices=2,
          num_args=1, output_lists=ffi.cast("PJRT_Buffer** const*", output_lists),
          device_complete_events=events)
    (arguments, device, non_donatable), = exe.calls
    assert [[b.shape for b in row] for row in arguments] == [[(2,)], [(2,)]]
    assert device is None and non_donatable == frozenset({0})
    for d in range(2):
        assert _call(table, "PJRT_Buffer_Dimensions", buffer=outs[d][0]).num_dims == 2
        assert _call(table, "PJRT_Event_IsReady", event=events[d]).is_ready
        _call(table, "PJRT_Event_Destroy", event=events[d])
        for buffer in (outs[d][0], outs[d][1], inputs[d]):
            _call(table, "PJRT_Buffer_Destroy", buffer=buffer)


def test_execute_with_send_callbacks_is_unimplemented(table, loaded):
    exe, handle = loaded
    options = ffi.new("PJRT_ExecuteOptions*")
    options.struct_size = ffi.sizeof("PJRT_ExecuteOptions")
    options.num_send_ops = 1
    args = new_args("PJRT_LoadedExecutable_Execute", executable=handle, options=options)
    code, message = take_error(table, table.PJRT_LoadedExecutable_Execute(args))
    assert code == ErrorCode.UNIMPLEMENTED and "send/recv" in message
    assert not exe.calls


# ---- events -----------------------------------------------------------------------------------

def test_on_ready_runs_the_c_callback_on_the_completing_thread(table):
    event = Event()
    handle = EVENTS.new(EventRef(event))
    seen = []
    done = threading.Event()

    @ffi.callback("void(PJRT_Error*, void*)")
    def on_ready(err, user_arg):
        seen.append((take_error(table, err), int(ffi.cast("uintptr_t", user_arg)),
                     threading.current_thread().name))
        done.set()

    _call(table, "PJRT_Event_OnReady", event=handle, callback=on_ready, user_arg=ffi.cast("void*", 77))
    assert not seen
    worker = threading.Thread(target=event.set, args=(InvalidArgument("bad input"),), name="completer")
    worker.start()
    worker.join()
    assert done.wait(5)
    assert seen == [((ErrorCode.INVALID_ARGUMENT, "bad input"), 77, "completer")]
    code, message = take_error(table, table.PJRT_Event_Error(new_args("PJRT_Event_Error", event=handle)))
    assert (code, message) == (ErrorCode.INVALID_ARGUMENT, "bad input")
    _call(table, "PJRT_Event_Destroy", event=handle)


def test_await_releases_the_gil(table):
    event = Event()
    handle = EVENTS.new(EventRef(event))
    threading.Timer(0.2, event.set).start()  # needs the GIL while the main thread awaits
    start = time.monotonic()
    _call(table, "PJRT_Event_Await", event=handle)
    assert time.monotonic() - start < 5
    _call(table, "PJRT_Event_Destroy", event=handle)


# ---- named values -----------------------------------------------------------------------------

def test_named_values_round_trip():
    values = {"s": "text", "i": -5, "f": 0.5, "b": False, "l": [3, 4, 5], "empty": []}
    array = named_values.NamedValues(values)
    assert named_values.read(array.array, array.count, "options") == values


def test_client_create_passes_options(table, monkeypatch):
    from abi_support import FAKE
    client_module = pytest.importorskip("pjrtkit.runtime.client")
    created = []

    class RecordingClient(FakeClient):
        def __init__(self, backend, options, *, store=None, process_state=None):
            super().__init__()
            created.append((backend, options, store))

    monkeypatch.setattr(client_module, "Client", RecordingClient)
    options = named_values.NamedValues({"num_devices": 4, "name": "x"})
    args = _call(table, "PJRT_Client_Create", create_options=options.array, num_options=options.count)
    # No key-value callbacks: no store (a single-process client).
    assert created == [(FAKE, {"num_devices": 4, "name": "x"}, None)]
    table.PJRT_Client_Destroy(new_args("PJRT_Client_Destroy", client=args.client))
