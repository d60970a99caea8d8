"""PJRT_Executable_*, PJRT_LoadedExecutable_* and PJRT_ExecuteContext_*."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pjrtkit import jax_compat
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import Args, int_list
from pjrtkit.abi.dtypes import to_code
from pjrtkit.abi.errors import error_from_exception, note_failure, pjrt_function
from pjrtkit.abi.handles import (
    BUFFERS, EXECUTABLES, EXECUTE_CONTEXTS, LOADED_EXECUTABLES, BufferRef, ClientRef, DeviceRef,
    ExecutableRef, ExecuteContextRef, LoadedExecutableRef, deref, new_blob, new_buffer, new_event,
)
from pjrtkit.abi import native
from pjrtkit.abi.named_values import NamedValues
from pjrtkit.errors import InvalidArgument, Unimplemented

NULL = ffi.NULL


def serialized_device_assignment(assignment: list[list[int]]) -> bytes:
    """DeviceAssignmentProto bytes for a replica x partition table of device ids."""
    return jax_compat.serialized_device_assignment(assignment)


def new_loaded_executable(loaded: Any, client: ClientRef) -> Any:
    # Everything LoadedExecutable_GetDeviceAssignment hands out is computed here, where failing
    # is still allowed: an error from GetDeviceAssignment aborts the process.
    assignment = serialized_device_assignment(loaded.device_assignment)
    ref = LoadedExecutableRef(loaded, client, assignment)
    ref.native = native.NativeState()
    return LOADED_EXECUTABLES.new(ref)


def executable_of(a: Args) -> ExecutableRef:
    return deref(a.req("executable"), ExecutableRef, f"{a.name}.executable")


def loaded_of(a: Args, field: str = "executable") -> LoadedExecutableRef:
    return deref(a.req(field), LoadedExecutableRef, f"{a.name}.{field}")


def _string_out(a: Args, ref: Any, field: str, value: str) -> None:
    chars, size = ref.cstr(field, value)
    a.require_outputs(field, f"{field}_size")
    a.set(field, chars)
    a.set(f"{field}_size", size)


def blob_out(a: Args, data: bytes, handle_field: str, deleter_field: str, ctype: str) -> None:
    a.require_outputs("serialized_bytes", "serialized_bytes_size", handle_field, deleter_field)
    handle, chars, size = new_blob(data)
    a.set("serialized_bytes", chars)
    a.set("serialized_bytes_size", size)
    a.set(handle_field, ffi.cast(f"{ctype}*", handle))
    a.set(deleter_field, getattr(lib, f"pjrtkit_guarded_free_{ctype}"))


# ---- Executable (compiled, not loaded) --------------------------------------------------------

@pjrt_function("PJRT_Executable_Destroy", never_fails=True)
def executable_destroy(args: Any) -> None:
    # The runtime Executable belongs to its LoadedExecutable (or to nobody after PJRT_Compile);
    # dropping the handle is all there is to do.
    EXECUTABLES.release(Args(args).req("executable"))


@pjrt_function("PJRT_Executable_Name")
def executable_name(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    _string_out(a, ref, "executable_name", ref.obj.name)


@pjrt_function("PJRT_Executable_NumReplicas")
def executable_num_replicas(args: Any) -> None:
    a = Args(args)
    a.set("num_replicas", executable_of(a).obj.num_replicas)


@pjrt_function("PJRT_Executable_NumPartitions")
def executable_num_partitions(args: Any) -> None:
    a = Args(args)
    a.set("num_partitions", executable_of(a).obj.num_partitions)


@pjrt_function("PJRT_Executable_NumOutputs")
def executable_num_outputs(args: Any) -> None:
    a = Args(args)
    a.set("num_outputs", executable_of(a).obj.num_outputs)


@pjrt_function("PJRT_Executable_SizeOfGeneratedCodeInBytes")
def executable_size_of_generated_code(args: Any) -> None:
    a = Args(args)
    a.set("size_in_bytes", int(executable_of(a).obj.size_of_generated_code))


@pjrt_function("PJRT_Executable_Fingerprint")
def executable_fingerprint(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    _string_out(a, ref, "executable_fingerprint", ref.obj.fingerprint)


@pjrt_function("PJRT_Executable_GetCostAnalysis")
def executable_get_cost_analysis(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    values = ref.cached("cost_analysis", lambda: NamedValues(
        {name: float(v) for name, v in ref.obj.cost_analysis().items()}))
    a.set_outputs(properties=values.array, num_properties=values.count)


@pjrt_function("PJRT_Executable_OutputElementTypes")
def executable_output_element_types(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    def make():
        codes = [to_code(dt) for dt in ref.obj.output_dtypes]
        return ffi.new("PJRT_Buffer_Type[]", codes or [0]), len(codes)
    types, n = ref.cached("output_types", make)
    a.set_outputs(output_types=types, num_output_types=n)


@pjrt_function("PJRT_Executable_OutputDimensions")
def executable_output_dimensions(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    def make():
        shapes = [tuple(s) for s in ref.obj.output_shapes]
        flat = [int(d) for s in shapes for d in s]
        sizes = [len(s) for s in shapes]
        return ffi.new("int64_t[]", flat or [0]), ffi.new("size_t[]", sizes or [0]), len(shapes)
    dims, sizes, n = ref.cached("output_dims", make)
    a.set_outputs(num_outputs=n, dims=dims, dim_sizes=sizes)


@pjrt_function("PJRT_Executable_OutputMemoryKinds")
def executable_output_memory_kinds(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    def make():
        kinds = [k.encode() for k in ref.obj.output_memory_kinds]
        chars = [ffi.new("char[]", k) for k in kinds]
        sizes = [len(k) for k in kinds]
        return (ffi.new("const char*[]", chars or [NULL]), ffi.new("size_t[]", sizes or [0]),
                len(kinds), chars)
    kinds, sizes, n, _ = ref.cached("output_memory_kinds", make)
    a.set_outputs(num_outputs=n, memory_kinds=kinds, memory_kind_sizes=sizes)


@pjrt_function("PJRT_Executable_OptimizedProgram")
def executable_optimized_program(args: Any) -> None:
    a = Args(args)
    ref = executable_of(a)
    program = Args(a.req("program"), f"{a.name}.program")
    text = ref.cached("optimized_program", lambda: _as_bytes(ref.obj.optimized_program()))
    fmt, fmt_size = ref.cstr("optimized_program_format", "mlir")
    program.set("format", fmt)
    program.set("format_size", fmt_size)
    code = program.req("code")
    if code == NULL:
        program.set("code_size", len(text))  # first call: the caller asks for the size
        return
    if program.req("code_size") < len(text):
        raise InvalidArgument(f"{a.name}.program.code_size is {program.req('code_size')} bytes, "
                              f"the optimized program needs {len(text)}")
    ffi.memmove(code, text, len(text))
    program.set("code_size", len(text))


def _as_bytes(program: bytes | str) -> bytes:
    return program.encode() if isinstance(program, str) else bytes(program)


@pjrt_function("PJRT_Executable_GetCompiledMemoryStats")
def executable_get_compiled_memory_stats(args: Any) -> None:
    a = Args(args)
    stats = executable_of(a).obj.compiled_memory_stats()
    # A mapping or a record with the Args field names; a stat the runtime omits is 0.
    get = stats.get if isinstance(stats, Mapping) else (lambda name, d: getattr(stats, name, d))
    for name, _ in ffi.typeof("PJRT_Executable_GetCompiledMemoryStats_Args").fields[3:]:
        if a.has(name):
            a.set(name, int(get(name, 0) or 0))


@pjrt_function("PJRT_Executable_Serialize")
def executable_serialize(args: Any) -> None:
    a = Args(args)
    data = executable_of(a).obj.serialize()
    blob_out(a, data, "serialized_executable", "serialized_executable_deleter",
              "PJRT_SerializedExecutable")


@pjrt_function("PJRT_Executable_GetCompileOptions")
def executable_get_compile_options(args: Any) -> None:
    a = Args(args)
    data = executable_of(a).obj.compile_options
    blob_out(a, data, "serialized_compile_options", "serialized_compile_options_deleter",
              "PJRT_SerializedCompileOptions")


# ---- LoadedExecutable -------------------------------------------------------------------------

@pjrt_function("PJRT_LoadedExecutable_Destroy", never_fails=True)
def loaded_executable_destroy(args: Any) -> None:
    ref = LOADED_EXECUTABLES.release(Args(args).req("executable"))
    if ref is not None:
        _stop_native(ref)
        ref.output_handles.clear()
        ref.obj.destroy()


def _stop_native(ref: LoadedExecutableRef) -> None:
    if ref.native is not None:
        native.disable(ref)


@pjrt_function("PJRT_LoadedExecutable_GetExecutable", never_fails=True)
def loaded_executable_get_executable(args: Any) -> None:
    a = Args(args)
    ref = loaded_of(a, "loaded_executable")
    # A new handle per call: the caller destroys it with PJRT_Executable_Destroy.
    a.set("executable", EXECUTABLES.new(ExecutableRef(ref.obj.executable)))


@pjrt_function("PJRT_LoadedExecutable_GetDeviceAssignment", never_fails=True)
def loaded_executable_get_device_assignment(args: Any) -> None:
    a = Args(args)
    blob_out(a, loaded_of(a).device_assignment, "serialized_device_assignment",
              "serialized_device_assignment_deleter", "PJRT_DeviceAssignmentSerialized")


@pjrt_function("PJRT_LoadedExecutable_AddressableDevices")
def loaded_executable_addressable_devices(args: Any) -> None:
    a = Args(args)
    ref = loaded_of(a)
    def make():
        ptrs = [ref.client.device_ptr(d) for d in ref.obj.addressable_devices]
        return ffi.new("PJRT_Device*[]", ptrs or [NULL]), len(ptrs)
    array, n = ref.cached("addressable_devices", make)
    a.set_outputs(addressable_devices=array, num_addressable_devices=n)


@pjrt_function("PJRT_LoadedExecutable_Delete")
def loaded_executable_delete(args: Any) -> None:
    ref = loaded_of(Args(args))
    _stop_native(ref)
    ref.obj.delete()


@pjrt_function("PJRT_LoadedExecutable_IsDeleted")
def loaded_executable_is_deleted(args: Any) -> None:
    a = Args(args)
    a.set("is_deleted", bool(loaded_of(a).obj.is_deleted))


@pjrt_function("PJRT_LoadedExecutable_Fingerprint")
def loaded_executable_fingerprint(args: Any) -> None:
    a = Args(args)
    ref = loaded_of(a)
    _string_out(a, ref, "executable_fingerprint", ref.obj.executable.fingerprint)


def _execute_options(ptr: Any, what: str) -> frozenset[int]:
    if ptr == NULL:
        return frozenset()
    o = Args(ptr, what)
    if o.opt("num_send_ops", 0) or o.opt("num_recv_ops", 0):
        raise Unimplemented(f"{what}: send/recv callbacks (host transfers) are not implemented "
                            "by pjrtkit")
    # launch_id and context matter only for multi-process collectives and FFI execution
    # contexts, which pjrtkit does not have; they are accepted and ignored.
    indices = int_list(o.opt("non_donatable_input_indices", NULL),
                       o.opt("num_non_donatable_input_indices", 0),
                       f"{what}.non_donatable_input_indices")
    return frozenset(int(i) for i in indices)


# PJRT_Buffer_Destroy calls queued in C (pjrtkit_fast_paths.h) are finished here: they travel
# with the next Execute, or arrive at the start of any other Python entry.
@ffi.def_extern(name="pjrtkit_drain_destroyed")
def drain_destroyed(buffers: Any, count: int) -> None:
    """Finish the PJRT_Buffer_Destroy calls C queued (small buffers, pjrtkit_fast_paths.h).
    Runs at the start of any Python entry while the queue is not empty; never raises."""
    for i in range(count):
        try:
            ptr = buffers[i]
            handle = BUFFERS.release_handle(ptr)
            if handle is None:
                continue
            ref = ffi.from_handle(handle)
            native.detach(ref.c)
            ref.obj.destroy()
            if ref.recycle is not None:
                ref.recycle[0].give_back(ref, handle, ptr)
        except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
            note_failure("PJRT_Buffer_Destroy", exc, fatal_if_returned=True)


_EXECUTE_ARGS_SIZE = ffi.sizeof("PJRT_LoadedExecutable_Execute_Args")
_OPTIONS_SIZE = ffi.sizeof("PJRT_ExecuteOptions")
_BUFFER_KIND = BufferRef.KIND
_HEAD = ffi.typeof("pjrtkit_head*")


def _run_inline(ref: LoadedExecutableRef, buffers: list, outputs_ptr: Any, events_ptr: Any
                ) -> bool:
    """Run through the runtime's ``execute_inline``; False (nothing done) when it declines.
    Non-donatable indices matter only for donation, and execute_inline refuses programs that
    donate, so they are not read."""
    done = ref.inline(buffers)
    if done is None:
        return False
    outputs, event = done  # (a failed run raised its error: the call's own, see execute_inline)
    handles = ref.output_handles
    for o, buffer in enumerate(outputs):
        outputs_ptr[o] = handles.new(o, buffer)
    if events_ptr != NULL:
        events_ptr[0] = new_event(event)
    return True


@ffi.def_extern(name="pjrtkit_prepare_native")
def prepare_native(loaded: Any, buffers: Any, num_args: int) -> int:
    """Called by C when the C execute path declined a call of an executable with a native plan
    (pjrtkit_fast_paths.h): make every argument's contents readable by C where they are not yet
    (``native.make_readable``). 1 when that made some readable and every argument is readable
    now, so C may try again (0 when all were already: C declined for another reason)."""
    try:
        state = ffi.from_handle(loaded).native
        if state is None or state.plan is None:
            return 0
        address = state.argument_address
        made = 0
        for i in range(num_args):
            c = ffi.cast(_BUFFER_PTR, buffers[i])
            if c == NULL or c.head.kind != _BUFFER_KIND:
                return 0
            if c.storage != NULL:
                continue
            if c.head.ref == NULL:
                return 0
            native.make_readable(ffi.from_handle(c.head.ref), address)
            if c.storage == NULL:
                return 0
            made = 1
        return made
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
        note_failure("PJRT_LoadedExecutable_Execute", exc, fatal_if_returned=False)
        return 0


_BUFFER_PTR = ffi.typeof("pjrtkit_buffer*")


@ffi.def_extern(name="pjrtkit_adopt_buffers")
def adopt_buffers(buffers: Any, count: int) -> int:
    """Called by C before the inline execute path (pjrtkit_fast_paths.h) when some arguments
    are buffers C made that have no Python object yet (a host transfer answered in C, an
    output of the C execute path): adopt them (``native.adopt``). 1 when every argument has
    one now, so C may hand the call to ``execute_inline_from_c``; 0: the general path serves
    it (and reports whatever is wrong)."""
    try:
        for i in range(count):
            c = ffi.cast(_BUFFER_PTR, buffers[i])
            if c == NULL or c.head.kind != _BUFFER_KIND:
                return 0
            if c.head.ref == NULL:
                if c.native != 1:
                    return 0
                native.adopt(buffers[i])
        return 1
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
        note_failure("PJRT_LoadedExecutable_Execute", exc, fatal_if_returned=False)
        return 0


@ffi.def_extern(name="pjrtkit_execute_inline")
def execute_inline_from_c(loaded: Any, refs: Any, num_args: int, outputs_ptr: Any,
                          events_ptr: Any, destroyed: Any, num_destroyed: int,
                          declined: Any) -> Any:
    """PJRT_LoadedExecutable_Execute when C has checked the shape of the call
    (pjrtkit_fast_paths.h): ``refs`` are the input buffers' Refs; ``destroyed`` the buffer
    destroys queued in C meanwhile, finished first. Sets ``*declined`` (and does nothing else)
    when the runtime cannot run it inline; the general callback then serves it."""
    if num_destroyed:
        drain_destroyed(destroyed, num_destroyed)
    try:
        ref = ffi.from_handle(loaded)
        buffer_refs = [ffi.from_handle(refs[i]) for i in range(num_args)]
        buffers = [r.obj for r in buffer_refs]
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
        note_failure("PJRT_LoadedExecutable_Execute", exc, fatal_if_returned=False)
        return NULL  # *declined is still 1: the general path reports the problem
    try:
        if _run_inline(ref, buffers, outputs_ptr, events_ptr):
            declined[0] = 0
            state = ref.native
            if state is not None and (state.pending or state.plan is not None):
                native.after_python_execution(ref, buffer_refs)
        return NULL
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
        declined[0] = 0
        note_failure("PJRT_LoadedExecutable_Execute", exc, fatal_if_returned=False)
        return error_from_exception(exc, "PJRT_LoadedExecutable_Execute")


def _execute_inline(args: Any, ref: LoadedExecutableRef) -> bool:
    """The same as the C check plus ``execute_inline_from_c``, for when C answers are off
    (tracing, profiling): the profile then shows the path calls really take."""
    if args.struct_size < _EXECUTE_ARGS_SIZE or args.num_devices != 1:
        return False
    options = args.options
    if options != NULL and (options.struct_size < _OPTIONS_SIZE or options.num_send_ops
                            or options.num_recv_ops):
        return False
    lists, outputs_ptr = args.argument_lists, args.output_lists
    if args.execute_device != NULL or outputs_ptr == NULL or outputs_ptr[0] == NULL:
        return False
    buffers = []
    if args.num_args:
        if lists == NULL or lists[0] == NULL:
            return False
        row = lists[0]
        for i in range(args.num_args):
            ptr = row[i]
            if ptr == NULL:
                return False
            head = ffi.cast(_HEAD, ptr)
            if head.kind != _BUFFER_KIND or head.ref == NULL:  # (NULL: the general path adopts)
                return False
            buffers.append(ffi.from_handle(head.ref).obj)
    return _run_inline(ref, buffers, outputs_ptr[0], args.device_complete_events)


@pjrt_function("PJRT_LoadedExecutable_Execute")
def loaded_executable_execute(args: Any) -> None:
    if args != NULL and args.struct_size >= _EXECUTE_ARGS_SIZE:
        ptr = args.executable
        if ptr != NULL and ffi.cast(_HEAD, ptr).kind == LoadedExecutableRef.KIND:
            ref = ffi.from_handle(ffi.cast(_HEAD, ptr).ref)
            if ref.inline is not None and _execute_inline(args, ref):
                return
    a = Args(args)
    ref = loaded_of(a)
    non_donatable = _execute_options(a.req("options"), f"{a.name}.options")
    num_devices, num_args = a.req("num_devices"), a.req("num_args")
    lists, outputs_ptr = a.req("argument_lists"), a.req("output_lists")
    if num_devices and (lists == NULL and num_args or outputs_ptr == NULL):
        raise InvalidArgument(f"{a.name}: argument_lists or output_lists is NULL")
    argument_refs = [
        [deref(lists[d][i], BufferRef, f"{a.name}.argument_lists[{d}][{i}]")
         for i in range(num_args)]
        for d in range(num_devices)
    ]
    arguments = [[r.obj for r in row] for row in argument_refs]
    device_ptr = a.opt("execute_device", NULL)
    device = None if device_ptr == NULL else deref(
        device_ptr, DeviceRef, f"{a.name}.execute_device").obj
    events_ptr = a.req("device_complete_events")
    outputs, events = ref.obj.execute(arguments, execute_device=device, non_donatable=non_donatable)
    for row in argument_refs:  # donated ones read as deleted now: C must not read them either
        for r in row:
            if r.c is not None and r.c.storage != NULL and r.obj.is_deleted:
                native.detach(r.c)
    if len(outputs) != num_devices or len(events) != num_devices:
        raise InvalidArgument(f"{a.name}: the runtime returned {len(outputs)} output lists and "
                              f"{len(events)} events for {num_devices} devices")
    for d, row in enumerate(outputs):
        out = outputs_ptr[d]
        for o, buffer in enumerate(row):
            out[o] = new_buffer(buffer, ref.client)
    if events_ptr != NULL:
        for d, event in enumerate(events):
            events_ptr[d] = new_event(event)
    state = ref.native
    if num_devices == 1 and state is not None and state.pending:
        # (arguments C made, such as host transfers, come this way until the plan is in)
        native.after_python_execution(ref, argument_refs[0])


# ---- ExecuteContext: accepted and carried, pjrtkit keeps nothing in it -------------------------

@pjrt_function("PJRT_ExecuteContext_Create")
def execute_context_create(slot: int, args: Any) -> None:
    a = Args(args)
    a.set("context", EXECUTE_CONTEXTS.new(ExecuteContextRef(None)))


@pjrt_function("PJRT_ExecuteContext_Destroy", never_fails=True)
def execute_context_destroy(args: Any) -> None:
    EXECUTE_CONTEXTS.release(Args(args).req("context"))
