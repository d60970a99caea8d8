"""Queries answered in C from the handle structs, and the inline execute path, on the real cpu
backend through its PJRT_Api.

Each C answer must equal the Python answer (C answers off, ``handles.set_c_answers``) and must
not enter Python at all: a profile function counts every Python call made on this thread during
the C call (the extern "Python" callbacks are Python functions, so any fallback shows up).
"""
from __future__ import annotations

import contextlib
import pathlib
import sys

import numpy as np
import pytest

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.handles import COMPLETED_EVENT, set_c_answers
from pjrtkit.discovery import load_backend
from pjrtkit.errors import ErrorCode
from pjrtkit.conformance.abi_driver import AbiDriver


@pytest.fixture(scope="module")
def driver():
    with AbiDriver.from_backend(load_backend("cpu")) as d:
        yield d


@pytest.fixture
def scope(driver):
    with driver.scope():
        yield driver


ABI_DIR = str(pathlib.Path(sys.modules["pjrtkit.abi.handles"].__file__).parent)


@contextlib.contextmanager
def python_calls():
    """Records the pjrtkit.abi functions (every C callback lives there) and the test's own
    lambdas called on this thread while the block runs."""
    calls = []

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and (code.co_filename.startswith(ABI_DIR)
                                or code.co_name == "<lambda>"):
            calls.append(code.co_name)

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


@contextlib.contextmanager
def c_answers(enabled: bool):
    old = set_c_answers(enabled)
    try:
        yield
    finally:
        set_c_answers(old)


def _double_plus_one(x):
    return x * 2 + 1


def _answer(driver, name, handle_field, handle, outputs):
    """(values of ``outputs`` after calling ``name``, Python calls made during the C call)."""
    function = driver.function(name)
    args = driver.new_args(name, **{handle_field: handle})
    with python_calls() as calls:
        error = function(args)
    assert driver.take_error(error) is None
    values = []
    for field in outputs:
        value = getattr(args, field)
        if field == "kind":
            value = ffi.unpack(value, args.kind_size)
        elif isinstance(value, ffi.CData):
            value = int(ffi.cast("uintptr_t", value))
        values.append(value)
    return values, calls


def _queries(driver):
    device = driver.device()
    memory = driver.device_memories(device)[0]
    buffer, _ = driver.buffer_from_host(np.arange(6, dtype=np.int16).reshape(2, 3))
    executable = driver.executable_of(driver.compile(_double_plus_one, np.ones(3, np.float32)))
    description = driver.description(device)
    return [
        ("PJRT_Executable_NumReplicas", "executable", executable, ["num_replicas"]),
        ("PJRT_Executable_NumPartitions", "executable", executable, ["num_partitions"]),
        ("PJRT_Executable_NumOutputs", "executable", executable, ["num_outputs"]),
        ("PJRT_Buffer_Device", "buffer", buffer, ["device"]),
        ("PJRT_Buffer_Memory", "buffer", buffer, ["memory"]),
        ("PJRT_Buffer_ElementType", "buffer", buffer, ["type"]),
        ("PJRT_Buffer_OnDeviceSizeInBytes", "buffer", buffer, ["on_device_size_in_bytes"]),
        ("PJRT_Memory_Id", "memory", memory, ["id"]),
        ("PJRT_Memory_Kind", "memory", memory, ["kind", "kind_size"]),
        ("PJRT_Memory_Kind_Id", "memory", memory, ["kind_id"]),
        ("PJRT_Device_GetDescription", "device", device, ["device_description"]),
        ("PJRT_Device_DefaultMemory", "device", device, ["memory"]),
        ("PJRT_Device_IsAddressable", "device", device, ["is_addressable"]),
        ("PJRT_Device_LocalHardwareId", "device", device, ["local_hardware_id"]),
        ("PJRT_DeviceDescription_Id", "device_description", description, ["id"]),
        ("PJRT_DeviceDescription_ProcessIndex", "device_description", description,
         ["process_index"]),
    ]


def test_queries_are_answered_in_c_with_the_python_answer_and_no_python_call(scope):
    queries = _queries(scope)
    answered_in_c = set()
    for name, field, handle, outputs in queries:
        with c_answers(True):
            from_c, c_calls = _answer(scope, name, field, handle, outputs)
        with c_answers(False):
            from_python, python_calls_made = _answer(scope, name, field, handle, outputs)
        assert from_c == from_python, name
        assert python_calls_made, f"{name}: the Python answer made no Python call (test broken?)"
        assert not c_calls, f"{name} entered Python: {c_calls}"
        answered_in_c.add(name)
    assert len(answered_in_c) == 16
    # The values are the runtime's, not just equal to each other.
    values = {name: _answer(scope, name, f, h, o)[0] for name, f, h, o in queries}
    assert values["PJRT_Executable_NumOutputs"] == [1]
    assert values["PJRT_Buffer_ElementType"] == [lib.PJRT_Buffer_Type_S16]
    assert values["PJRT_Buffer_OnDeviceSizeInBytes"] == [12]
    assert values["PJRT_Memory_Kind"][0] == b"device"


def _shape_answers(driver, buffer):
    """(dims, unpadded dims, dynamic dims, is_on_cpu) of ``buffer``, and the Python calls."""
    calls = []
    answers = []
    for name, read in (
            ("PJRT_Buffer_Dimensions", lambda a: list(a.dims[0:a.num_dims])),
            ("PJRT_Buffer_UnpaddedDimensions", lambda a: list(a.unpadded_dims[0:a.num_dims])),
            ("PJRT_Buffer_DynamicDimensionIndices",
             lambda a: list(a.dynamic_dim_indices[0:a.num_dynamic_dims])),
            ("PJRT_Buffer_IsOnCpu", lambda a: bool(a.is_on_cpu))):
        args = driver.new_args(name, buffer=buffer)
        with python_calls() as made:
            error = driver.function(name)(args)
        assert driver.take_error(error) is None
        calls += made
        answers.append(read(args))
    return answers, calls


@pytest.mark.parametrize("shape", [(2, 3), (), (5,), (1,) * 8, (1,) * 9])
def test_shape_queries_are_answered_in_c_up_to_rank_8(scope, shape):
    buffer, _ = scope.buffer_from_host(np.zeros(shape, np.float32))
    with c_answers(True):
        from_c, c_calls = _shape_answers(scope, buffer)
    with c_answers(False):
        from_python, python_calls_made = _shape_answers(scope, buffer)
    assert from_c == from_python == [list(shape), list(shape), [], False]
    assert python_calls_made
    assert (c_calls == []) == (len(shape) <= 8), c_calls  # rank 9: Python answers


def test_destroying_no_error_is_answered_in_c(scope):
    with python_calls() as calls:
        scope.function("PJRT_Error_Destroy")(scope.new_args("PJRT_Error_Destroy",
                                                             error=ffi.NULL))
    assert calls == []


def _row_major_layout(rank, struct_size):
    """A row-major tiled PJRT_Buffer_MemoryLayout as jaxlib passes one: only ``type`` and the
    tiled member set, ``struct_size`` whatever its stack held."""
    layout = ffi.new("PJRT_Buffer_MemoryLayout*")
    layout.struct_size = struct_size
    layout.type = lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    minor_to_major = ffi.new("int64_t[]", list(range(rank - 1, -1, -1)) or [0])
    layout.tiled.minor_to_major = minor_to_major
    layout.tiled.minor_to_major_size = rank
    layout.tiled.num_tiles = 0
    return layout, minor_to_major


@pytest.mark.parametrize("struct_size", [0, 2, 0x7FFFFFFF])
def test_reading_a_readable_buffer_row_major_is_answered_in_c_whatever_the_layouts_struct_size(
        scope, struct_size):
    # jaxlib (ConvertToBufferMemoryLayoutData) never sets the layout's struct_size, so C must
    # not judge the layout by it: a C answer that did fell back to Python at random (0.12 CI).
    from pjrtkit.abi import native
    from pjrtkit_cpu.fusion.whole import dense_address
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    with c_answers(False):  # a buffer Python made, made readable to C
        buffer, _ = scope.buffer_from_host(host)
    native.make_readable(ffi.from_handle(ffi.cast("pjrtkit_head*", buffer).ref), dense_address)
    assert ffi.cast("pjrtkit_buffer*", buffer).storage != ffi.NULL
    layout, keep = _row_major_layout(2, struct_size)
    dst = np.zeros_like(host)
    args = scope.new_args("PJRT_Buffer_ToHostBuffer", src=buffer, host_layout=layout,
                          dst=ffi.cast("void*", dst.ctypes.data), dst_size=dst.nbytes)
    with python_calls() as calls:
        error = scope.function("PJRT_Buffer_ToHostBuffer")(args)
    assert scope.take_error(error) is None
    assert calls == [], calls
    assert args.event == COMPLETED_EVENT
    np.testing.assert_array_equal(dst, host)


@pytest.mark.parametrize("name, field", [
    ("PJRT_Executable_NumReplicas", "executable"),
    ("PJRT_Buffer_Device", "buffer"),
    ("PJRT_Memory_Kind", "memory"),
    ("PJRT_DeviceDescription_Id", "device_description"),
])
def test_null_and_wrong_kind_handles_still_get_python_errors(scope, name, field):
    null = scope.raw(name, scope.new_args(name, **{field: ffi.NULL}))
    assert null.code == ErrorCode.INVALID_ARGUMENT and "is NULL" in str(null)
    # A client handle where another kind is expected: C declines, Python names both kinds.
    wrong = scope.raw(name, scope.new_args(name, **{field: ffi.cast(
        ffi.typeof(getattr(scope.new_args(name), field)), scope.client)}))
    assert wrong.code == ErrorCode.INVALID_ARGUMENT
    assert "ClientRef handle" in str(wrong), wrong


def test_a_struct_too_small_for_the_output_is_refused_not_written(scope):
    buffer, _ = scope.buffer_from_host(np.ones(4, np.float32))
    args = scope.sized_args("PJRT_Buffer_Device")
    args.buffer = buffer
    args.struct_size = ffi.offsetof("PJRT_Buffer_Device_Args", "device")  # an older caller
    error = scope.raw("PJRT_Buffer_Device", args)
    assert error.code == ErrorCode.INVALID_ARGUMENT and "device is missing" in str(error)
    assert args.device == ffi.NULL


def test_a_cheap_execution_runs_inline_and_returns_the_static_completed_event(scope):
    loaded = scope.compile(_double_plus_one, np.ones(3, np.float32))
    x, _ = scope.buffer_from_host(np.arange(3, dtype=np.float32))
    (outputs,), (event,) = scope.execute(loaded, [[x]], 1)
    assert event == COMPLETED_EVENT
    np.testing.assert_array_equal(scope.to_host(outputs[0]), [1, 3, 5])
    # Every call on it is answered in C, OnReady's callback runs at once with no error.
    fired = []
    callback = ffi.callback("void(PJRT_Error*, void*)",
                            lambda error, arg: fired.append(error == ffi.NULL))
    with python_calls() as calls:
        ready = scope.new_args("PJRT_Event_IsReady", event=event)
        assert scope.function("PJRT_Event_IsReady")(ready) == ffi.NULL
        for name in ("PJRT_Event_Await", "PJRT_Event_Error", "PJRT_Event_Destroy",
                     "PJRT_Event_Destroy"):
            assert scope.function(name)(scope.new_args(name, event=event)) == ffi.NULL
        on_ready = scope.new_args("PJRT_Event_OnReady", event=event, callback=callback)
        assert scope.function("PJRT_Event_OnReady")(on_ready) == ffi.NULL
    assert ready.is_ready
    assert fired == [True]
    assert calls == ["<lambda>"], calls  # only the test's own callback ran Python
    # With C answers off, the same calls reach Python and give the same answers.
    with c_answers(False):
        assert scope.await_event(event) is None
        assert scope.call("PJRT_Event_IsReady", event=event).is_ready


def test_inline_results_are_ordinary_buffers(scope):
    loaded = scope.compile(_double_plus_one, np.ones(3, np.float32))
    x, _ = scope.buffer_from_host(np.arange(3, dtype=np.float32))
    (outputs,), _ = scope.execute(loaded, [[x]], 1)
    y = outputs[0]
    # A result feeds the next execution, and deleting the input afterwards changes nothing.
    (again,), _ = scope.execute(loaded, [[y]], 1)
    scope.call("PJRT_Buffer_Delete", buffer=y)
    assert scope.call("PJRT_Buffer_IsDeleted", buffer=y).is_deleted
    np.testing.assert_array_equal(scope.to_host(again[0]), [3, 7, 11])
    # A deleted input is refused (by the general path) with the runtime's error.
    error = scope.raw("PJRT_LoadedExecutable_Execute", scope.execute_args(loaded, [[y]], 1))
    assert error.code == ErrorCode.FAILED_PRECONDITION and "deleted" in str(error)


# ---- PJRT_Buffer_Destroy queued in C -----------------------------------------------------------

def _bytes_in_use(driver) -> int:
    return int(driver.call("PJRT_Device_MemoryStats", device=driver.device()).bytes_in_use)


def _new_buffer(driver, array):
    """A buffer Python makes (C answers off: the cpu client's host transfers are C's)."""
    with c_answers(False):
        return _host_transfer(driver, array)


def _host_transfer(driver, array, calls=None):
    """PJRT_Client_BufferFromHostBuffer of ``array``; ``calls``: a list that gets the Python
    calls of the transfer itself (``python_calls``)."""
    args = driver.new_args("PJRT_Client_BufferFromHostBuffer", client=driver.client,
                           data=ffi.cast("void*", array.ctypes.data), type=lib.PJRT_Buffer_Type_F32,
                           dims=ffi.new("int64_t[]", list(array.shape)), num_dims=array.ndim,
                           host_buffer_semantics=0, device=driver.device())
    with python_calls() as seen:
        driver.invoke("PJRT_Client_BufferFromHostBuffer", args)
    if calls is not None:
        calls.extend(seen)
    scope_event = args.done_with_host_buffer
    driver.call("PJRT_Event_Destroy", event=scope_event)
    return args.buffer


def test_a_small_buffer_destroy_is_queued_in_c_and_finished_at_the_next_entry(driver):
    from pjrtkit.abi.handles import BUFFERS
    base_bytes, base_handles = _bytes_in_use(driver), len(BUFFERS)
    buffer = _new_buffer(driver, np.ones(1000, np.float32))
    assert _bytes_in_use(driver) == base_bytes + 4000
    destroy = driver.new_args("PJRT_Buffer_Destroy", buffer=buffer)
    with python_calls() as calls:
        assert driver.function("PJRT_Buffer_Destroy")(destroy) == ffi.NULL
    assert not calls
    assert len(BUFFERS) == base_handles + 1  # queued, not yet released
    # Any entry into Python finishes it first, so statistics never see it pending.
    assert _bytes_in_use(driver) == base_bytes
    assert len(BUFFERS) == base_handles


def test_big_buffers_and_a_full_queue_are_destroyed_by_python_at_once(driver):
    from pjrtkit.abi.handles import BUFFERS
    base_bytes, base_handles = _bytes_in_use(driver), len(BUFFERS)
    big = _new_buffer(driver, np.ones(lib.PJRTKIT_DEFERRED_DESTROY_BYTES // 4 + 1, np.float32))
    with python_calls() as calls:
        driver.function("PJRT_Buffer_Destroy")(driver.new_args("PJRT_Buffer_Destroy", buffer=big))
    assert calls and len(BUFFERS) == base_handles
    count = lib.PJRTKIT_DESTROY_QUEUE_SIZE + 5
    small = [_new_buffer(driver, np.full(4, i, np.float32)) for i in range(count)]
    entered = []
    for buffer in small:
        with python_calls() as calls:
            driver.function("PJRT_Buffer_Destroy")(
                driver.new_args("PJRT_Buffer_Destroy", buffer=buffer))
        entered.append(bool(calls))
    # The one that found the queue full went to Python, whose entry drained the queue.
    assert entered == [False] * lib.PJRTKIT_DESTROY_QUEUE_SIZE + [True] + [False] * 4
    assert _bytes_in_use(driver) == base_bytes
    assert len(BUFFERS) == base_handles


def test_a_queued_destroy_of_an_input_of_queued_work_keeps_the_contents(driver):
    """The destroy is finished (in Python) while an execution that reads the buffer waits
    behind other work on the worker: the execution still reads the contents (its hold)."""
    import threading

    from pjrtkit.abi.handles import ClientRef, deref
    with driver.scope():
        loaded = driver.compile(_double_plus_one, np.ones(3, np.float32))
        x = _new_buffer(driver, np.arange(3, dtype=np.float32))
        gate = threading.Event()
        deref(driver.client, ClientRef, "client").obj.executor.submit(lambda: gate.wait(60))
        try:
            (outputs,), (event,) = driver.execute(loaded, [[x]], 1)
            assert event != COMPLETED_EVENT  # queued behind the gate, not run inline
            with python_calls() as calls:
                driver.function("PJRT_Buffer_Destroy")(
                    driver.new_args("PJRT_Buffer_Destroy", buffer=x))
            assert not calls
            _bytes_in_use(driver)  # an entry into Python: the destroy is finished now
            assert not driver.call("PJRT_Event_IsReady", event=event).is_ready
        finally:
            gate.set()
        assert driver.await_event(event) is None
        np.testing.assert_array_equal(driver.to_host(outputs[0]), [1, 3, 5])


def test_destroyed_output_handles_are_reused_for_later_outputs_with_fresh_contents(driver,
                                                                                   monkeypatch):
    # Outputs of Python's executions: without the elementwise VM this program has no native
    # plan in ten calls (its outputs would be C's, tests/jax/test_native_execute.py)
    from pjrtkit_cpu.fusion import whole

    monkeypatch.setattr(whole, "VM_ENABLED", False)
    with driver.scope():
        loaded = driver.compile(_double_plus_one, np.ones(3, np.float32))
        pointers = []
        for i in range(10):
            with c_answers(False):  # an input of Python's: the execution is Python's too
                x, _ = driver.buffer_from_host(np.full(3, i, np.float32))
            args = driver.execute_args(loaded, [[x]], 1)
            driver.invoke("PJRT_LoadedExecutable_Execute", args)
            out = args.output_lists[0][0]
            pointers.append(int(ffi.cast("uintptr_t", out)))
            np.testing.assert_array_equal(driver.to_host(out), np.full(3, 2 * i + 1))
            assert driver.call("PJRT_Buffer_Device", buffer=out).device == driver.device()
            driver.call("PJRT_Buffer_Destroy", buffer=out)
        # The handle destroyed in C came back for the next output (same struct, new contents).
        assert len(set(pointers)) < len(pointers)


def test_python_and_c_key_a_shape_alike():
    # The C execute path compares an argument's shape by one int64: Python keys the buffers
    # it makes, C the ones it makes (host transfers), and both must agree on every shape.
    from pjrtkit.abi.handles import shape_key

    rng = np.random.default_rng(0)
    shapes = [(), (0,), (1,), (3,), (1000,), (2, 3), (3, 2), (1, 1, 1), (2**40, 3),
              tuple(int(d) for d in rng.integers(0, 2**31, 8))]
    shapes += [tuple(int(d) for d in rng.integers(0, 64, rng.integers(0, 9))) for _ in range(200)]
    for shape in shapes:
        dims = ffi.new("int64_t[]", list(shape) or [0])
        assert shape_key(shape) == lib.pjrtkit_shape_key(len(shape), dims), shape
    assert len({shape_key(s) for s in [(2, 3), (3, 2), (6,), (6, 1), (1, 6)]}) == 5


def test_a_cpu_client_answers_host_transfers_in_c_from_its_start():
    """pjrtkit_cpu's payloads are host arrays (``PlatformInfo.host_payloads``): its devices'
    memories are open to C when the client is made, before any native plan is installed (the
    transfers of an eager loop's first calls), and the buffer C makes serves Python's paths."""
    with AbiDriver.from_backend(load_backend("cpu")) as fresh, fresh.scope():
        base = _bytes_in_use(fresh)
        host = np.arange(6, dtype=np.float32).reshape(2, 3)
        calls = []
        buffer = _host_transfer(fresh, host, calls)
        assert calls == [], calls
        assert ffi.cast("pjrtkit_buffer*", buffer).native == 1
        assert _bytes_in_use(fresh) == base + host.nbytes
        np.testing.assert_array_equal(fresh.to_host(buffer), host)
        loaded = fresh.compile(_double_plus_one, host)
        (outputs,), (event,) = fresh.execute(loaded, [[buffer]], 1)
        # Python adopted C's buffer and ran the program inline (pjrtkit_adopt_buffers): done
        # on return, as the buffers Python makes allow; not queued to the device's worker.
        assert event == COMPLETED_EVENT
        assert fresh.await_event(event) is None
        np.testing.assert_array_equal(fresh.to_host(outputs[0]), host * 2 + 1)
        fresh.call("PJRT_Buffer_Destroy", buffer=buffer)
        fresh.call("PJRT_Buffer_Destroy", buffer=outputs[0])
        assert _bytes_in_use(fresh) == base
