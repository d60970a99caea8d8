"""Layer 1's context: one PJRT_Api driven through cffi exactly as a framework drives a plugin.

``AbiDriver.from_backend(backend)`` wraps the PJRT_Api pjrtkit builds for a backend;
``AbiDriver.from_library(path)`` dlopens any PJRT plugin (XLA's own CPU plugin, a vendor's) and
calls its ``GetPjrtApi``. Either way the driver knows only the C ABI: it fills Args structs with
their ``struct_size``, calls the table's function pointers, reads failures through
``PJRT_Error_GetCode``/``PJRT_Error_Message`` and frees them with ``PJRT_Error_Destroy``.

Before it uses a slot, the driver checks that the slot lies inside the plugin's declared
``PJRT_Api.struct_size`` (a plugin built against an older header has a shorter table): a function
beyond it raises ``Skipped``; a NULL slot inside it raises ``Unsupported``. A returned PJRT_Error
becomes the ``pjrtkit.errors.PjrtError`` subclass of its real code.

Everything a check creates through the driver (clients, buffers, executables, events) is
destroyed when the check's ``scope()`` ends, newest first; the shared client and executable the
driver caches live until ``close()``.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import (
    ErrorCode, FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange, PjrtError,
    ResourceExhausted, Unimplemented,
)
from pjrtkit.conformance.checks import Failed, Skipped, Unsupported

NULL = ffi.NULL
AWAIT_TIMEOUT = 60.0
# C callbacks and user_arg handles a plugin may still call after a wait timed out: never freed.
_LATE_CALLBACK_TARGETS: list[Any] = []

_ERROR_CLASSES: dict[int, type[PjrtError]] = {
    cls.code: cls for cls in (InvalidArgument, NotFound, FailedPrecondition, ResourceExhausted,
                              OutOfRange, Unimplemented, Internal)}

# PJRT_Buffer_Type <-> NumPy, written here from the ABI (the driver must not trust pjrtkit's own
# marshalling, which is what it measures).
BUFFER_TYPES: dict[str, tuple[int, np.dtype]] = {
    "pred": (1, np.dtype(np.bool_)), "s8": (2, np.dtype(np.int8)),
    "s16": (3, np.dtype(np.int16)), "s32": (4, np.dtype(np.int32)),
    "s64": (5, np.dtype(np.int64)), "u8": (6, np.dtype(np.uint8)),
    "u16": (7, np.dtype(np.uint16)), "u32": (8, np.dtype(np.uint32)),
    "u64": (9, np.dtype(np.uint64)), "f16": (10, np.dtype(np.float16)),
    "f32": (11, np.dtype(np.float32)), "f64": (12, np.dtype(np.float64)),
    "bf16": (13, np.dtype(ml_dtypes.bfloat16)), "c64": (14, np.dtype(np.complex64)),
    "c128": (15, np.dtype(np.complex128)),
}
_TYPE_OF_DTYPE = {dtype: code for code, dtype in BUFFER_TYPES.values()}
_DTYPE_OF_TYPE = {code: dtype for code, dtype in BUFFER_TYPES.values()}

# PJRT_HostBufferSemantics
IMMUTABLE_ONLY_DURING_CALL = 0
IMMUTABLE_UNTIL_TRANSFER_COMPLETES = 1
IMMUTABLE_ZERO_COPY = 2
MUTABLE_ZERO_COPY = 3


def buffer_type(dtype) -> int:
    return _TYPE_OF_DTYPE[np.dtype(dtype)]


def ptr_key(p: Any) -> int:
    """A handle as an int (for sets and dict keys)."""
    return int(ffi.cast("uintptr_t", p))


def error_for(code: int, message: str) -> PjrtError:
    try:
        code = ErrorCode(code)
    except ValueError:
        return PjrtError(f"(invalid PJRT error code {code}) {message}", code=ErrorCode.UNKNOWN)
    cls = _ERROR_CLASSES.get(code)
    return cls(message) if cls else PjrtError(message, code=code)


class AbiDriver:
    """One PJRT_Api, its declared version, and the objects a check made through it."""

    def __init__(self, api: Any, *, label: str, keepalive: Any = None):
        self.api = api
        self.label = label
        self._keepalive = keepalive
        self.major = int(api.pjrt_api_version.major_version)
        self.minor = int(api.pjrt_api_version.minor_version)
        self.struct_size = int(api.struct_size)
        self._scopes: list[list[Callable[[], None]]] = []
        self._client: Any = None
        self._cache: dict[Any, Any] = {}
        self._initialized = False
        self._wake: Any = None

    # ---- construction ---------------------------------------------------------------------

    @classmethod
    def from_backend(cls, backend: Any) -> AbiDriver:
        """The PJRT_Api pjrtkit builds for ``backend`` (a ``pjrtkit.backend.Backend``)."""
        from pjrtkit.abi.api import api_for_slot, register_backend

        _capsule, slot = register_backend(backend)
        return cls(api_for_slot(slot), label=f"pjrtkit backend {getattr(backend, 'name', backend)}")

    @classmethod
    def from_library(cls, path: str | os.PathLike) -> AbiDriver:
        """dlopen a PJRT plugin shared library and call its ``GetPjrtApi``."""
        path = os.fspath(path)
        library = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        try:
            get_api = library.GetPjrtApi
        except AttributeError:
            raise Failed(f"{path} exports no GetPjrtApi symbol", expected="GetPjrtApi",
                         actual="missing") from None
        get_api.restype = ctypes.c_void_p
        address = get_api()
        if not address:
            raise Failed(f"GetPjrtApi of {path} returned NULL", expected="a PJRT_Api*",
                         actual="NULL")
        return cls(ffi.cast("PJRT_Api*", address), label=path, keepalive=library)

    # ---- the table ------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether slot ``name`` lies within the plugin's table (its declared struct_size)."""
        try:
            field = dict(ffi.typeof("PJRT_Api").fields)[name]
        except KeyError:
            return False
        return field.offset + ffi.sizeof("void*") <= self.struct_size

    def function(self, name: str) -> Any:
        if not self.has(name):
            raise Skipped(f"{name} is beyond the plugin's PJRT_Api (minor {self.minor}, "
                          f"struct_size {self.struct_size})")
        fn = getattr(self.api, name)
        if fn == NULL:
            raise Unsupported(name, f"{name} is NULL in the plugin's PJRT_Api")
        return fn

    def require_minor(self, minor: int, what: str) -> None:
        if self.minor < minor:
            raise Skipped(f"{what} needs PJRT minor {minor}; the plugin declares {self.minor}")

    # ---- calls ----------------------------------------------------------------------------

    def new_args(self, name: str, **fields: Any) -> Any:
        """A zeroed ``<name>_Args`` with struct_size set, as a current caller passes it."""
        args = ffi.new(f"{name}_Args*")
        args.struct_size = ffi.sizeof(f"{name}_Args")
        for key, value in fields.items():
            setattr(args, key, value)
        return args

    def raw(self, name: str, args: Any) -> PjrtError | None:
        """Call ``name`` with ``args``; the returned PJRT_Error (read and freed) or None."""
        return self.take_error(self.function(name)(args))

    def invoke(self, name: str, args: Any) -> Any:
        """Call ``name``; raise the PjrtError it returned. Returns ``args`` for its outputs."""
        error = self.raw(name, args)
        if error is not None:
            raise error
        return args

    def call(self, name: str, **fields: Any) -> Any:
        return self.invoke(name, self.new_args(name, **fields))

    def expect_error(self, name: str, args: Any, codes: Sequence[ErrorCode], what: str
                     ) -> PjrtError:
        """Call ``name`` expecting a PJRT_Error with one of ``codes``; Failed otherwise."""
        error = self.raw(name, args)
        wanted = " or ".join(c.name for c in codes)
        if error is None:
            raise Failed(f"{what}: {name} succeeded", expected=f"PJRT_Error {wanted}",
                         actual="success (NULL error)")
        if error.code not in codes:
            raise Failed(f"{what}: {name} returned the wrong error code",
                         expected=wanted, actual=f"{error.code.name}: {error}")
        return error

    def take_error(self, error: Any) -> PjrtError | None:
        """Read a PJRT_Error through the plugin's Error_* functions, then destroy it."""
        if error == NULL:
            return None
        code_args = self.new_args("PJRT_Error_GetCode", error=error)
        status = self.function("PJRT_Error_GetCode")(code_args)
        code = int(code_args.code) if status == NULL else int(ErrorCode.UNKNOWN)
        message_args = self.new_args("PJRT_Error_Message", error=error)
        self.function("PJRT_Error_Message")(message_args)
        message = (ffi.unpack(message_args.message, message_args.message_size)
                   .decode("utf-8", "replace") if message_args.message != NULL else "")
        self.function("PJRT_Error_Destroy")(self.new_args("PJRT_Error_Destroy", error=error))
        return error_for(code, message)

    # ---- clean-up -------------------------------------------------------------------------

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Objects created inside are destroyed at exit, newest first."""
        self._scopes.append([])
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            # Every undo runs; the first clean-up failure is reported unless the check itself
            # already failed (its failure is the one a plugin author needs to see).
            first: BaseException | None = None
            for undo in reversed(self._scopes.pop()):
                try:
                    undo()
                except Exception as exc:  # noqa: BLE001
                    first = first or exc
            if first is not None and not failed:
                raise first

    def defer(self, undo: Callable[[], None]) -> None:
        if self._scopes:
            self._scopes[-1].append(undo)
        else:  # driver-lifetime objects (the shared client)
            self._cache.setdefault("__close__", []).append(undo)

    def keep(self, obj: Any) -> Any:
        """Keep ``obj`` (memory C reads) alive until the current scope ends."""
        self.defer(lambda: obj)
        return obj

    def close(self) -> None:
        """Destroy the shared client and cached executables (newest first)."""
        for undo in reversed(self._cache.pop("__close__", [])):
            undo()
        self._cache.clear()
        self._client = None

    def __enter__(self) -> AbiDriver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _destroyer(self, name: str, field: str, handle: Any) -> Callable[[], None]:
        def undo() -> None:
            error = self.raw(name, self.new_args(name, **{field: handle}))
            if error is not None:
                raise Failed(f"{name} failed while cleaning up", expected="success",
                             actual=f"{error.code.name}: {error}")
        return undo

    # ---- plugin and client ----------------------------------------------------------------

    def initialize(self) -> None:
        if not self._initialized:
            self.call("PJRT_Plugin_Initialize")
            self._initialized = True

    def plugin_attributes(self) -> dict[str, Any]:
        self.initialize()
        args = self.call("PJRT_Plugin_Attributes")
        return read_named_values(args.attributes, args.num_attributes)

    def stablehlo_target(self) -> str:
        """The StableHLO version to serialize for: min(plugin's current, jaxlib's current)."""
        from jaxlib.mlir.dialects import stablehlo

        ours = tuple(int(p) for p in stablehlo.get_current_version().split("."))
        published = self.plugin_attributes().get("stablehlo_current_version")
        if isinstance(published, list) and len(published) == 3:
            ours = min(ours, tuple(published))
        return ".".join(str(p) for p in ours)

    def create_client(self, options: Any = NULL, num_options: int = 0) -> Any:
        """A new client, destroyed when the current scope ends."""
        self.initialize()
        args = self.call("PJRT_Client_Create", create_options=options, num_options=num_options)
        if args.client == NULL:
            raise Failed("PJRT_Client_Create succeeded but returned no client",
                         expected="a PJRT_Client*", actual="NULL")
        self.defer(self._destroyer("PJRT_Client_Destroy", "client", args.client))
        return args.client

    @property
    def client(self) -> Any:
        """The client shared by the checks of this driver (created on first use)."""
        if self._client is None:
            scopes, self._scopes = self._scopes, []
            try:
                self._client = self.create_client()
            finally:
                self._scopes = scopes
        return self._client

    def devices(self) -> list[Any]:
        args = self.call("PJRT_Client_Devices", client=self.client)
        return [args.devices[i] for i in range(args.num_devices)]

    def addressable_devices(self) -> list[Any]:
        args = self.call("PJRT_Client_AddressableDevices", client=self.client)
        return [args.addressable_devices[i] for i in range(args.num_addressable_devices)]

    def device(self) -> Any:
        devices = self.addressable_devices()
        if not devices:
            raise Failed("the client has no addressable devices", expected=">= 1", actual=0)
        return devices[0]

    def description(self, device: Any) -> Any:
        return self.call("PJRT_Device_GetDescription", device=device).device_description

    def device_id(self, device: Any) -> int:
        return int(self.call("PJRT_DeviceDescription_Id",
                             device_description=self.description(device)).id)

    def device_memories(self, device: Any) -> list[Any]:
        args = self.call("PJRT_Device_AddressableMemories", device=device)
        return [args.memories[i] for i in range(args.num_memories)]

    def memory_kind(self, memory: Any) -> str:
        args = self.call("PJRT_Memory_Kind", memory=memory)
        return string(args.kind, args.kind_size)

    # ---- events ---------------------------------------------------------------------------

    def own_event(self, event: Any) -> Any:
        if event != NULL:
            self.defer(self._destroyer("PJRT_Event_Destroy", "event", event))
        return event

    def await_event(self, event: Any, timeout: float = AWAIT_TIMEOUT) -> PjrtError | None:
        """Await ``event`` (not destroyed here); the error it completed with, or None.

        A plugin whose event never completes must not hang the suite: the driver first waits
        (with a timeout) for an OnReady callback, then calls PJRT_Event_Await, which by then
        returns at once."""
        if not self.call("PJRT_Event_IsReady", event=event).is_ready:
            fired = threading.Event()
            handle = ffi.new_handle(fired)
            # C may call back even after a timeout: the handle lives as long as the driver.
            _LATE_CALLBACK_TARGETS.append(handle)
            self.call("PJRT_Event_OnReady", event=event, callback=self._wake_callback(),
                      user_arg=handle)
            if not fired.wait(timeout):
                raise Failed("an event never completed", expected=f"ready within {timeout:.0f} s",
                             actual="still pending")
        return self.raw("PJRT_Event_Await", self.new_args("PJRT_Event_Await", event=event))

    def _wake_callback(self) -> Any:
        if self._wake is None:
            def wake(error: Any, user_arg: Any) -> None:
                try:
                    if error != NULL:
                        self.function("PJRT_Error_Destroy")(
                            self.new_args("PJRT_Error_Destroy", error=error))
                finally:
                    ffi.from_handle(user_arg).set()
            self._wake = ffi.callback("void(PJRT_Error*, void*)", wake)
            _LATE_CALLBACK_TARGETS.append(self._wake)
        return self._wake

    # ---- buffers --------------------------------------------------------------------------

    def buffer_from_host(self, array: np.ndarray, *, device: Any = None, memory: Any = None,
                         semantics: int = IMMUTABLE_ONLY_DURING_CALL,
                         byte_strides: Sequence[int] | None = None,
                         wait: bool = True, struct_extra: int = 0) -> tuple[Any, Any]:
        """(buffer, args) of PJRT_Client_BufferFromHostBuffer; the buffer and its
        done_with_host_buffer event are destroyed (and the host data kept alive) until the
        scope ends. ``wait`` awaits done_with_host_buffer before returning."""
        array = np.asarray(array)
        dims = ffi.new("int64_t[]", list(array.shape) or [0])
        strides = ffi.new("int64_t[]", list(byte_strides)) if byte_strides is not None else NULL
        if device is None and memory is None:
            device = self.device()
        args = self.sized_args("PJRT_Client_BufferFromHostBuffer", struct_extra)
        args.client = self.client
        args.data = ffi.cast("void*", array.ctypes.data)
        args.type = buffer_type(array.dtype)
        args.dims = dims
        args.num_dims = array.ndim
        args.byte_strides = strides
        args.num_byte_strides = array.ndim if byte_strides is not None else 0
        args.host_buffer_semantics = semantics
        args.device = device if device is not None else NULL
        args.memory = memory if memory is not None else NULL
        self.keep((array, dims, strides))  # host data lives at least as long as the buffer
        self.invoke("PJRT_Client_BufferFromHostBuffer", args)
        if args.buffer == NULL:
            raise Failed("PJRT_Client_BufferFromHostBuffer returned no buffer",
                         expected="a PJRT_Buffer*", actual="NULL")
        self.own_buffer(args.buffer)
        done = self.own_event(args.done_with_host_buffer)
        if wait and done != NULL:
            error = self.await_event(done)
            if error is not None:
                raise error
        return args.buffer, args

    def sized_args(self, name: str, extra: int = 0) -> Any:
        """Zeroed ``<name>_Args`` with ``extra`` trailing bytes (struct_size counts them)."""
        size = ffi.sizeof(f"{name}_Args") + extra
        raw = ffi.new("unsigned char[]", size)
        args = ffi.cast(f"{name}_Args*", raw)
        args.struct_size = size
        self.keep(raw)
        return args

    def own_buffer(self, buffer: Any) -> Any:
        if buffer != NULL:
            self.defer(self._destroyer("PJRT_Buffer_Destroy", "buffer", buffer))
        return buffer

    def put(self, array, **kwargs) -> Any:
        return self.buffer_from_host(array, **kwargs)[0]

    def buffer_dtype(self, buffer: Any) -> np.dtype:
        code = int(self.call("PJRT_Buffer_ElementType", buffer=buffer).type)
        if code not in _DTYPE_OF_TYPE:
            raise Failed("PJRT_Buffer_ElementType returned a type the driver cannot read",
                         expected=sorted(_DTYPE_OF_TYPE), actual=code)
        return _DTYPE_OF_TYPE[code]

    def buffer_dims(self, buffer: Any) -> tuple[int, ...]:
        args = self.call("PJRT_Buffer_Dimensions", buffer=buffer)
        return tuple(int(args.dims[i]) for i in range(args.num_dims))

    def to_host(self, buffer: Any) -> np.ndarray:
        """ToHostBuffer's two-call protocol: ask the size (dst NULL), then copy and await."""
        dtype, dims = self.buffer_dtype(buffer), self.buffer_dims(buffer)
        size = self.call("PJRT_Buffer_ToHostBuffer", src=buffer, dst=NULL).dst_size
        expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        if size != expected:
            raise Failed("PJRT_Buffer_ToHostBuffer with dst NULL reported the wrong dst_size",
                         expected=expected, actual=int(size))
        out = np.empty(dims, dtype)
        args = self.call("PJRT_Buffer_ToHostBuffer", src=buffer,
                         dst=ffi.cast("void*", out.ctypes.data), dst_size=size)
        event = self.own_event(args.event)
        if event != NULL:
            error = self.await_event(event)
            if error is not None:
                raise error
        return out

    # ---- compile and execute --------------------------------------------------------------

    def artifact(self, fn: Callable, *example_args: Any, donate_argnums=()) -> bytes:
        """A StableHLO portable artifact of ``fn`` for the plugin's StableHLO version."""
        key = ("artifact", fn, tuple((np.shape(a), np.asarray(a).dtype.str) for a in example_args),
               donate_argnums)
        if key not in self._cache:
            import jax

            from pjrtkit import jax_compat

            text = jax.jit(fn, donate_argnums=donate_argnums).lower(*example_args).as_text()
            self._cache[key] = jax_compat.serialize_portable_artifact(
                text, self.stablehlo_target())
        return self._cache[key]

    def compile_options(self, num_replicas: int = 1) -> bytes:
        from jaxlib import xla_client

        options = xla_client.CompileOptions()
        options.num_replicas = num_replicas
        options.num_partitions = 1
        ids = [self.device_id(d) for d in self.addressable_devices()[:num_replicas]]
        options.device_assignment = xla_client.DeviceAssignment.create(
            np.array(ids, dtype=np.int32).reshape(num_replicas, 1))
        return options.SerializeAsString()

    def program(self, code: bytes, fmt: bytes = b"mlir") -> Any:
        code_buf = ffi.new("char[]", code)
        fmt_buf = ffi.new("char[]", fmt)
        program = ffi.new("PJRT_Program*")
        program.struct_size = ffi.sizeof("PJRT_Program")
        program.code = code_buf
        program.code_size = len(code)
        program.format = fmt_buf
        program.format_size = len(fmt)
        self.keep((code_buf, fmt_buf, program))
        return program

    def compile_args(self, code: bytes, options: bytes, fmt: bytes = b"mlir",
                     struct_extra: int = 0) -> Any:
        options_buf = ffi.new("char[]", options)
        self.keep(options_buf)
        args = self.sized_args("PJRT_Client_Compile", struct_extra)
        args.client = self.client
        args.program = self.program(code, fmt)
        args.compile_options = options_buf
        args.compile_options_size = len(options)
        return args

    def compile(self, fn: Callable, *example_args: Any, donate_argnums=(),
                struct_extra: int = 0) -> Any:
        """A loaded executable of ``fn``, destroyed when the scope ends."""
        args = self.compile_args(self.artifact(fn, *example_args, donate_argnums=donate_argnums),
                                 self.compile_options(), struct_extra=struct_extra)
        self.invoke("PJRT_Client_Compile", args)
        if args.executable == NULL:
            raise Failed("PJRT_Client_Compile succeeded but returned no executable",
                         expected="a PJRT_LoadedExecutable*", actual="NULL")
        self.defer(self._destroyer("PJRT_LoadedExecutable_Destroy", "executable",
                                   args.executable))
        return args.executable

    def executable_of(self, loaded: Any) -> Any:
        """PJRT_LoadedExecutable_GetExecutable; the PJRT_Executable is destroyed at scope end."""
        executable = self.call("PJRT_LoadedExecutable_GetExecutable",
                               loaded_executable=loaded).executable
        if executable == NULL:
            raise Failed("PJRT_LoadedExecutable_GetExecutable returned no executable",
                         expected="a PJRT_Executable*", actual="NULL")
        self.defer(self._destroyer("PJRT_Executable_Destroy", "executable", executable))
        return executable

    def shared(self, key: str, make: Callable[[], Any]) -> Any:
        """A value made once per driver; objects ``make`` creates live until ``close()``."""
        if key not in self._cache:
            scopes, self._scopes = self._scopes, []
            try:
                self._cache[key] = make()
            finally:
                self._scopes = scopes
        return self._cache[key]

    def execute_args(self, loaded: Any, argument_lists: Sequence[Sequence[Any]],
                     num_outputs: int, *, num_devices: int | None = None,
                     num_args: int | None = None, struct_extra: int = 0,
                     non_donatable: Sequence[int] = ()) -> Any:
        devices = len(argument_lists) if num_devices is None else num_devices
        width = max(num_outputs, 1)
        lists = [ffi.new("PJRT_Buffer*[]", list(a) or [NULL]) for a in argument_lists]
        lists += [ffi.new("PJRT_Buffer*[]", 1) for _ in range(devices - len(lists))]
        arg_lists = ffi.new("PJRT_Buffer**[]", lists or [NULL])
        outputs = [ffi.new("PJRT_Buffer*[]", width) for _ in range(max(devices, 1))]
        output_lists = ffi.new("PJRT_Buffer**[]", outputs)
        events = ffi.new("PJRT_Event*[]", max(devices, 1))
        options = ffi.new("PJRT_ExecuteOptions*")
        options.struct_size = ffi.sizeof("PJRT_ExecuteOptions")
        donate = ffi.new("int64_t[]", list(non_donatable) or [0])
        options.non_donatable_input_indices = donate
        options.num_non_donatable_input_indices = len(non_donatable)
        args = self.sized_args("PJRT_LoadedExecutable_Execute", struct_extra)
        args.executable = loaded
        args.options = options
        args.argument_lists = arg_lists
        args.num_devices = devices
        args.num_args = (len(argument_lists[0]) if argument_lists else 0) if num_args is None \
            else num_args
        args.output_lists = output_lists
        args.device_complete_events = events
        self.keep(
            (lists, arg_lists, outputs, output_lists, events, options, donate))
        return args

    def execute(self, loaded: Any, argument_lists: Sequence[Sequence[Any]], num_outputs: int,
                **kwargs: Any) -> tuple[list[list[Any]], list[Any]]:
        """Run; (outputs per device, completion events). All are destroyed at scope end."""
        args = self.execute_args(loaded, argument_lists, num_outputs, **kwargs)
        self.invoke("PJRT_LoadedExecutable_Execute", args)
        return self.collect_outputs(args, num_outputs)

    def collect_outputs(self, args: Any, num_outputs: int) -> tuple[list[list[Any]], list[Any]]:
        outputs = [[self.own_buffer(args.output_lists[d][i]) for i in range(num_outputs)]
                   for d in range(args.num_devices)]
        events = [self.own_event(args.device_complete_events[d]) for d in range(args.num_devices)]
        return outputs, events


# ---- reading C values ------------------------------------------------------------------------

def string(chars: Any, size: int) -> str:
    if chars == NULL:
        return ""
    return ffi.unpack(chars, size).decode("utf-8", "replace")


def read_named_values(values: Any, count: int) -> dict[str, Any]:
    """PJRT_NamedValue[] as a dict; a repeated name raises Failed (names must be unique)."""
    out: dict[str, Any] = {}
    for i in range(count):
        nv = values[i]
        name = string(nv.name, nv.name_size)
        if nv.type == 0:
            value: Any = string(nv.string_value, nv.value_size)
        elif nv.type == 1:
            value = int(nv.int64_value)
        elif nv.type == 2:
            value = [int(nv.int64_array_value[j]) for j in range(nv.value_size)]
        elif nv.type == 3:
            value = float(nv.float_value)
        elif nv.type == 4:
            value = bool(nv.bool_value)
        else:
            raise Failed(f"named value {name!r} has an unknown type", expected="0..4",
                         actual=int(nv.type))
        if name in out:
            raise Failed(f"named value {name!r} appears twice", expected="unique names",
                         actual=name)
        out[name] = value
    return out


# ---- registering layer-1 checks --------------------------------------------------------------

def abi_check(check_id: str, *, mandatory: bool = True, capability: str | None = None):
    """``@check(..., layer="abi")`` whose body runs in a driver scope, so everything the check
    creates through the driver is destroyed when it returns or fails."""
    import functools

    from pjrtkit.conformance.checks import check

    def register(fn: Callable[[AbiDriver], str | None]):
        @functools.wraps(fn)
        def scoped(driver: AbiDriver) -> str | None:
            with driver.scope():
                return fn(driver)
        return check(check_id, layer="abi", mandatory=mandatory, capability=capability)(scoped)
    return register
