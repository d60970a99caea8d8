"""PJRT_Buffer_* and the client functions that create buffers."""
from __future__ import annotations

from typing import Any

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import Args, int_list, string
from pjrtkit.abi.dtypes import to_code, to_dtype
from pjrtkit.abi import native
from pjrtkit.abi.errors import pjrt_function
from pjrtkit.abi.fn_client import client_of
from pjrtkit.abi.handles import (
    BUFFERS, BufferRef, DeviceRef, MemoryRef, deref, new_buffer, new_event,
)
from pjrtkit.abi.layouts import host_array, layout_order, require_dense
from pjrtkit.errors import ErrorCode, InvalidArgument, PjrtError, Unimplemented

NULL = ffi.NULL


def buffer_of(a: Args, field: str = "buffer") -> BufferRef:
    return deref(a.req(field), BufferRef, f"{a.name}.{field}")


def _optional_device(a: Args, field: str) -> Any:
    ptr = a.opt(field, NULL)
    return None if ptr == NULL else deref(ptr, DeviceRef, f"{a.name}.{field}").obj


def _optional_memory(a: Args, field: str) -> Any:
    ptr = a.opt(field, NULL)
    return None if ptr == NULL else deref(ptr, MemoryRef, f"{a.name}.{field}").obj


def _shape_spec(a: Args, dims: str, num_dims: str, element_type: str, layout: str | None):
    shape = tuple(int_list(a.req(dims), a.req(num_dims), f"{a.name}.{dims}"))
    dtype = to_dtype(a.req(element_type))
    if layout is not None:
        require_dense(a.opt(layout, NULL), shape, dtype.itemsize, f"{a.name}.{layout}")
    return shape, dtype


def _completed_event() -> Any:
    from pjrtkit.runtime.event import Event  # runtime is imported lazily: abi must load alone
    return Event.completed()


# ---- creation ---------------------------------------------------------------------------------

@pjrt_function("PJRT_Client_BufferFromHostBuffer")
def client_buffer_from_host_buffer(args: Any) -> None:
    a = Args(args)
    client = client_of(a)
    a.require_outputs("done_with_host_buffer", "buffer")
    shape, dtype = _shape_spec(a, "dims", "num_dims", "type", None)
    order = layout_order(a.opt("device_layout", NULL), shape, dtype.itemsize,
                         f"{a.name}.device_layout")
    strides_ptr, num_strides = a.req("byte_strides"), a.req("num_byte_strides")
    strides = None if strides_ptr == NULL or num_strides == 0 else int_list(
        strides_ptr, num_strides, f"{a.name}.byte_strides")
    device, memory = _optional_device(a, "device"), _optional_memory(a, "memory")
    if device is None and memory is None:
        raise InvalidArgument(f"{a.name}: device and memory are both NULL")
    # Past a memory limit, refused before a byte of the caller's data is read.
    client.obj.check_room(shape, dtype, device=device, memory=memory)
    # The copy is taken before returning, so every host_buffer_semantics is satisfied and the
    # host buffer is released at once.
    array = host_array(a.req("data"), shape, dtype, strides, f"{a.name}.data")
    buffer = client.obj.buffer_from_host(array, device=device, memory=memory)
    buffer.minor_to_major = order
    a.set("buffer", new_buffer(buffer, client))
    a.set("done_with_host_buffer", new_event(_completed_event()))


@pjrt_function("PJRT_Client_CreateUninitializedBuffer")
def client_create_uninitialized_buffer(args: Any) -> None:
    a = Args(args)
    client = client_of(a)
    a.require_outputs("buffer")
    shape, dtype = _shape_spec(a, "shape_dims", "shape_num_dims", "shape_element_type",
                               "shape_layout")
    device, memory = _optional_device(a, "device"), _optional_memory(a, "memory")
    buffer = client.obj.create_uninitialized_buffer(shape, dtype, device=device, memory=memory)
    a.set("buffer", new_buffer(buffer, client))


@pjrt_function("PJRT_Client_CreateErrorBuffer")
def client_create_error_buffer(args: Any) -> None:
    a = Args(args)
    client = client_of(a)
    a.require_outputs("buffer")
    shape, dtype = _shape_spec(a, "shape_dims", "shape_num_dims", "shape_element_type",
                               "shape_layout")
    message = string(a.req("error_message"), a.req("error_message_size"), f"{a.name}.error_message")
    try:
        code = ErrorCode(a.req("error_code"))
    except ValueError:
        code = ErrorCode.UNKNOWN
    memory = _optional_memory(a, "memory")
    buffer = client.obj.create_error_buffer(PjrtError(message, code=code), shape, dtype,
                                            memory=memory)
    a.set("buffer", new_buffer(buffer, client))


# ---- identity and metadata --------------------------------------------------------------------

@pjrt_function("PJRT_Buffer_Destroy", never_fails=True)
def buffer_destroy(args: Any) -> None:
    ptr = Args(args).req("buffer")
    if ptr != NULL:
        c = ffi.cast(_BUFFER_STRUCT, ptr)
        if c.head.kind == BufferRef.KIND and c.head.ref == NULL and c.native == 1:
            lib.pjrtkit_native_buffer_destroy(ptr)  # an output of the C path (C answers off)
            return
    ref = BUFFERS.release(ptr)
    if ref is not None:
        native.detach(ref.c)
        ref.obj.destroy()


_BUFFER_STRUCT = ffi.typeof("pjrtkit_buffer*")


@pjrt_function("PJRT_Buffer_ElementType")
def buffer_element_type(args: Any) -> None:
    a = Args(args)
    a.set("type", to_code(buffer_of(a).obj.dtype))


def _dims(ref: BufferRef) -> tuple[Any, int]:
    # C keeps the dims pointer as long as the buffer lives.
    shape = ref.obj.shape
    return ref.cached("dims", lambda: (ffi.new("int64_t[]", list(shape) or [0]), len(shape)))


@pjrt_function("PJRT_Buffer_Dimensions")
def buffer_dimensions(args: Any) -> None:
    a = Args(args)
    dims, n = _dims(buffer_of(a))
    a.set_outputs(dims=dims, num_dims=n)


@pjrt_function("PJRT_Buffer_UnpaddedDimensions")
def buffer_unpadded_dimensions(args: Any) -> None:
    a = Args(args)
    dims, n = _dims(buffer_of(a))  # pjrtkit never pads
    a.set_outputs(unpadded_dims=dims, num_dims=n)


@pjrt_function("PJRT_Buffer_DynamicDimensionIndices")
def buffer_dynamic_dimension_indices(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    empty = ref.cached("dynamic_dims", lambda: ffi.new("size_t[]", 1))  # all shapes are static
    a.set_outputs(dynamic_dim_indices=empty, num_dynamic_dims=0)


@pjrt_function("PJRT_Buffer_GetMemoryLayout")
def buffer_get_memory_layout(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    rank = len(ref.obj.shape)
    layout_of = ref.obj.minor_to_major or range(rank - 1, -1, -1)
    order = ref.cached("minor_to_major", lambda: ffi.new("int64_t[]", list(layout_of) or [0]))
    a.require_outputs("layout")
    layout = a.p.layout
    layout.struct_size = ffi.sizeof("PJRT_Buffer_MemoryLayout")
    layout.extension_start = NULL
    layout.type = lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    tiled = layout.tiled
    tiled.struct_size = ffi.sizeof("PJRT_Buffer_MemoryLayout_Tiled")
    tiled.extension_start = NULL
    tiled.minor_to_major = order
    tiled.minor_to_major_size = rank
    tiled.tile_dims = NULL
    tiled.tile_dim_sizes = NULL
    tiled.num_tiles = 0


@pjrt_function("PJRT_Buffer_OnDeviceSizeInBytes")
def buffer_on_device_size_in_bytes(args: Any) -> None:
    a = Args(args)
    a.set("on_device_size_in_bytes", int(buffer_of(a).obj.on_device_size_in_bytes))


@pjrt_function("PJRT_Buffer_Device")
def buffer_device(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    a.set_outputs(device=ref.client.device_ptr(ref.obj.device))


@pjrt_function("PJRT_Buffer_Memory")
def buffer_memory(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    a.set_outputs(memory=ref.client.memory_ptr(ref.obj.memory))


@pjrt_function("PJRT_Buffer_Delete")
def buffer_delete(args: Any) -> None:
    ref = buffer_of(Args(args))
    native.detach(ref.c)
    ref.obj.delete()


@pjrt_function("PJRT_Buffer_IsDeleted")
def buffer_is_deleted(args: Any) -> None:
    a = Args(args)
    a.set("is_deleted", bool(buffer_of(a).obj.is_deleted))


@pjrt_function("PJRT_Buffer_IsOnCpu")
def buffer_is_on_cpu(args: Any) -> None:
    a = Args(args)
    a.set("is_on_cpu", bool(buffer_of(a).obj.is_on_cpu))


@pjrt_function("PJRT_Buffer_ReadyEvent")
def buffer_ready_event(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    a.set_outputs(event=new_event(ref.obj.ready))


# ---- data movement ----------------------------------------------------------------------------

@pjrt_function("PJRT_Buffer_CopyToDevice")
def buffer_copy_to_device(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    dst = deref(a.req("dst_device"), DeviceRef, f"{a.name}.dst_device")
    a.set_outputs(dst_buffer=new_buffer(ref.obj.copy_to_device(dst.obj), dst.client))


@pjrt_function("PJRT_Buffer_CopyToMemory")
def buffer_copy_to_memory(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a)
    dst = deref(a.req("dst_memory"), MemoryRef, f"{a.name}.dst_memory")
    a.set_outputs(dst_buffer=new_buffer(ref.obj.copy_to_memory(dst.obj), dst.client))


@pjrt_function("PJRT_Buffer_ToHostBuffer")
def buffer_to_host_buffer(args: Any) -> None:
    a = Args(args)
    ref = buffer_of(a, "src")
    buffer = ref.obj
    nbytes = int(buffer.dtype.itemsize) * _element_count(buffer.shape)
    host_order = layout_order(a.req("host_layout"), buffer.shape, buffer.dtype.itemsize,
                              f"{a.name}.host_layout")
    dst = a.req("dst")
    if dst == NULL:
        # First of two calls: the caller asks how much to allocate.
        a.set("dst_size", nbytes)
        return
    a.require_outputs("event")
    if a.req("dst_size") < nbytes:
        raise InvalidArgument(
            f"{a.name}.dst_size is {a.req('dst_size')} bytes, the buffer needs {nbytes}")
    # The runtime may fill dst after we return; the caller keeps dst alive until the event fires.
    a.set("event", new_event(buffer.to_host(memoryview(ffi.buffer(dst, nbytes)), host_order)))


@pjrt_function("PJRT_Buffer_CopyRawToHost")
def buffer_copy_raw_to_host(args: Any) -> None:
    a = Args(args)
    buffer = buffer_of(a).obj
    a.require_outputs("event")
    offset, size = int(a.req("offset")), int(a.req("transfer_size"))
    dst = a.req("dst")
    if dst == NULL and size:
        raise InvalidArgument(f"{a.name}.dst is NULL for a transfer of {size} bytes")
    # As for ToHostBuffer: the caller keeps dst alive until the event fires.
    target = memoryview(ffi.buffer(dst, size)) if size else memoryview(bytearray(0))
    a.set("event", new_event(buffer.copy_raw_to_host(target, offset, size)))


def _element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


# ---- raw access (CPU-resident buffers only) ---------------------------------------------------

@pjrt_function("PJRT_Buffer_UnsafePointer")
def buffer_unsafe_pointer(args: Any) -> None:
    a = Args(args)
    a.set("buffer_pointer", int(buffer_of(a).obj.unsafe_pointer()))


@pjrt_function("PJRT_Buffer_OpaqueDeviceMemoryDataPointer")
def buffer_opaque_device_memory_data_pointer(args: Any) -> None:
    a = Args(args)
    buffer = buffer_of(a).obj
    if not buffer.is_on_cpu:
        raise Unimplemented("PJRT_Buffer_OpaqueDeviceMemoryDataPointer is only implemented by "
                            "pjrtkit for buffers that live in host memory")
    a.set("device_memory_ptr", ffi.cast("void*", int(buffer.unsafe_pointer())))


@pjrt_function("PJRT_Buffer_IncreaseExternalReferenceCount")
def buffer_increase_external_reference_count(args: Any) -> None:
    buffer_of(Args(args)).obj.increase_external_reference()


@pjrt_function("PJRT_Buffer_DecreaseExternalReferenceCount")
def buffer_decrease_external_reference_count(args: Any) -> None:
    buffer_of(Args(args)).obj.decrease_external_reference()

