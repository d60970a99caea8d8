"""Layer 1: compile, executable queries and execute, driven through the C ABI.

The programs are real JAX programs serialized as StableHLO portable artifacts for the plugin's
published StableHLO version (what jaxlib sends), compiled with jaxlib's CompileOptions.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import ErrorCode
from pjrtkit.conformance.abi_driver import (
    NULL, AbiDriver, abi_check, buffer_type, ptr_key, read_named_values, string,
)
from pjrtkit.conformance.checks import expect, expect_equal

INVALID = (ErrorCode.INVALID_ARGUMENT,)
# "Use of a deleted buffer": XLA answers INVALID_ARGUMENT, others FAILED_PRECONDITION; both say
# "the caller's argument is not usable", which is the contract.
UNUSABLE = (ErrorCode.INVALID_ARGUMENT, ErrorCode.FAILED_PRECONDITION)

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.int32(4)


def two_outputs(x, y):
    return x * 2 + 1, y + 3


def add_one(v):
    return v + 1


def expected_outputs():
    return X * 2 + 1, np.int32(Y + 3)


def _loaded(d: AbiDriver):
    """The shared executable of ``two_outputs`` (compiled once per driver)."""
    return d.shared("two_outputs", lambda: d.compile(two_outputs, X, Y))


def _executable(d: AbiDriver):
    return d.executable_of(_loaded(d))


def _run(d: AbiDriver, loaded=None):
    loaded = loaded if loaded is not None else _loaded(d)
    outputs, events = d.execute(loaded, [[d.put(X), d.put(Y)]], 2)
    return outputs[0], events


def _check_results(d: AbiDriver, outputs, what: str) -> None:
    want = expected_outputs()
    for i, (buffer, expected) in enumerate(zip(outputs, want)):
        got = d.to_host(buffer)
        expect(got.shape == np.shape(expected) and np.array_equal(got, expected),
               f"{what}: output {i}", expected=np.asarray(expected).tolist(),
               actual=got.tolist())


# ---- compile ---------------------------------------------------------------------------------

@abi_check("abi.compile.mlir")
def compile_mlir(d: AbiDriver):
    """Client_Compile accepts a StableHLO portable artifact with jaxlib's CompileOptions."""
    loaded = d.compile(add_one, X)
    expect(loaded != NULL, "an executable is returned", expected="non-NULL", actual="NULL")
    return f"StableHLO {d.stablehlo_target()}"


@abi_check("abi.compile.bad_program_format")
def compile_bad_format(d: AbiDriver):
    """A program whose format is neither mlir nor hlo is INVALID_ARGUMENT."""
    args = d.compile_args(d.artifact(add_one, X), d.compile_options(), fmt=b"invalid")
    d.expect_error("PJRT_Client_Compile", args, INVALID, "program format 'invalid'")


@abi_check("abi.compile.bad_compile_options")
def compile_bad_options(d: AbiDriver):
    """Compile options that are not a CompileOptionsProto are INVALID_ARGUMENT."""
    args = d.compile_args(d.artifact(add_one, X), b"invalid compile options")
    d.expect_error("PJRT_Client_Compile", args, INVALID, "unparsable compile options")


@abi_check("abi.compile.unparsable_program")
def compile_unparsable_program(d: AbiDriver):
    """An mlir program that does not parse is refused with an error (not a crash, not success)."""
    args = d.compile_args(b"this is not a StableHLO module", d.compile_options())
    error = d.raw("PJRT_Client_Compile", args)
    expect(error is not None, "compiling garbage fails", expected="a PJRT_Error",
           actual="success")
    return f"{error.code.name}"


# ---- executable queries ----------------------------------------------------------------------

@abi_check("abi.executable.get_executable")
def executable_get(d: AbiDriver):
    """LoadedExecutable_GetExecutable gives a PJRT_Executable that can be destroyed."""
    executable = d.call("PJRT_LoadedExecutable_GetExecutable",
                        loaded_executable=_loaded(d)).executable
    expect(executable != NULL, "an executable is returned", expected="non-NULL", actual="NULL")
    d.call("PJRT_Executable_Destroy", executable=executable)


@abi_check("abi.executable.name")
def executable_name(d: AbiDriver):
    """Executable_Name is non-empty."""
    args = d.call("PJRT_Executable_Name", executable=_executable(d))
    name = string(args.executable_name, args.executable_name_size)
    expect(bool(name), "the executable has a name", expected="a name", actual=repr(name))
    return name


@abi_check("abi.executable.num_replicas_partitions")
def executable_replicas_partitions(d: AbiDriver):
    """A program compiled for one device has 1 replica and 1 partition."""
    executable = _executable(d)
    expect_equal(int(d.call("PJRT_Executable_NumReplicas", executable=executable).num_replicas),
                 1, "Executable_NumReplicas")
    expect_equal(int(d.call("PJRT_Executable_NumPartitions",
                            executable=executable).num_partitions), 1,
                 "Executable_NumPartitions")


@abi_check("abi.executable.num_outputs")
def executable_num_outputs(d: AbiDriver):
    """Executable_NumOutputs counts the program's two results."""
    expect_equal(int(d.call("PJRT_Executable_NumOutputs",
                            executable=_executable(d)).num_outputs), 2,
                 "Executable_NumOutputs of (f32[2,3], s32[])")


@abi_check("abi.executable.output_element_types")
def executable_output_types(d: AbiDriver):
    """Executable_OutputElementTypes is [F32, S32]."""
    args = d.call("PJRT_Executable_OutputElementTypes", executable=_executable(d))
    got = [int(args.output_types[i]) for i in range(args.num_output_types)]
    expect_equal(got, [buffer_type(np.float32), buffer_type(np.int32)],
                 "output element types (PJRT_Buffer_Type)")


@abi_check("abi.executable.output_dimensions")
def executable_output_dimensions(d: AbiDriver):
    """Executable_OutputDimensions is [[2, 3], []]."""
    args = d.call("PJRT_Executable_OutputDimensions", executable=_executable(d))
    dims, at = [], 0
    for i in range(args.num_outputs):
        n = int(args.dim_sizes[i])
        dims.append([int(args.dims[at + j]) for j in range(n)])
        at += n
    expect_equal(dims, [[2, 3], []], "output dimensions")


@abi_check("abi.executable.output_memory_kinds", mandatory=False,
           capability="output_memory_kinds")
def executable_output_memory_kinds(d: AbiDriver):
    """Executable_OutputMemoryKinds gives a non-empty kind per output, each a kind of the device."""
    args = d.call("PJRT_Executable_OutputMemoryKinds", executable=_executable(d))
    expect_equal(int(args.num_outputs), 2, "number of output memory kinds")
    kinds = [string(args.memory_kinds[i], args.memory_kind_sizes[i]) for i in range(2)]
    device_kinds = {d.memory_kind(m) for m in d.device_memories(d.device())}
    expect(all(k in device_kinds for k in kinds), "output memory kinds are kinds of the device",
           expected=sorted(device_kinds), actual=kinds)


@abi_check("abi.executable.fingerprint")
def executable_fingerprint(d: AbiDriver):
    """Executable_Fingerprint is deterministic: the same program compiled twice agrees."""
    def fingerprint(loaded) -> str:
        args = d.call("PJRT_Executable_Fingerprint", executable=d.executable_of(loaded))
        return string(args.executable_fingerprint, args.executable_fingerprint_size)
    first = fingerprint(_loaded(d))
    again = fingerprint(d.compile(two_outputs, X, Y))
    expect_equal(again, first, "fingerprint of the same program compiled again")
    other = fingerprint(d.compile(add_one, X))
    expect(not first or other != first, "different programs have different fingerprints",
           expected=f"!= {first!r}", actual=other)


@abi_check("abi.executable.size_of_generated_code", mandatory=False,
           capability="generated_code_size")
def executable_code_size(d: AbiDriver):
    """Executable_SizeOfGeneratedCodeInBytes is >= 0 (or -1: unknown)."""
    size = d.call("PJRT_Executable_SizeOfGeneratedCodeInBytes",
                  executable=_executable(d)).size_in_bytes
    expect(size >= -1, "generated code size", expected=">= -1", actual=int(size))


@abi_check("abi.executable.cost_analysis", mandatory=False, capability="cost_analysis")
def executable_cost_analysis(d: AbiDriver):
    """GetCostAnalysis gives unique, numeric properties including a non-negative 'flops'."""
    args = d.call("PJRT_Executable_GetCostAnalysis", executable=_executable(d))
    properties = read_named_values(args.properties, args.num_properties)
    expect("flops" in properties, "cost analysis reports flops", expected="'flops'",
           actual=sorted(properties))
    bad = {k: v for k, v in properties.items()
           if not isinstance(v, (int, float)) or isinstance(v, bool)}
    expect(not bad, "cost properties are numbers", expected="float/int64", actual=bad)
    expect(properties["flops"] >= 0, "flops >= 0", expected=">= 0", actual=properties["flops"])


@abi_check("abi.executable.compiled_memory_stats", mandatory=False,
           capability="compiled_memory_stats")
def executable_memory_stats(d: AbiDriver):
    """GetCompiledMemoryStats counts at least the program's argument and output bytes."""
    args = d.call("PJRT_Executable_GetCompiledMemoryStats", executable=_executable(d))
    minimum = X.nbytes + np.dtype(np.int32).itemsize  # both programs' in and out: 24 + 4
    expect(args.argument_size_in_bytes >= minimum, "argument_size_in_bytes",
           expected=f">= {minimum}", actual=int(args.argument_size_in_bytes))
    expect(args.output_size_in_bytes >= minimum, "output_size_in_bytes",
           expected=f">= {minimum}", actual=int(args.output_size_in_bytes))
    expect(args.temp_size_in_bytes >= 0, "temp_size_in_bytes", expected=">= 0",
           actual=int(args.temp_size_in_bytes))


@abi_check("abi.executable.optimized_program", mandatory=False, capability="optimized_program")
def executable_optimized_program(d: AbiDriver):
    """OptimizedProgram's two calls: code NULL asks the size, then the code is copied out."""
    executable = _executable(d)
    program = ffi.new("PJRT_Program*")
    program.struct_size = ffi.sizeof("PJRT_Program")
    d.call("PJRT_Executable_OptimizedProgram", executable=executable, program=program)
    size = int(program.code_size)
    expect(size > 0, "the optimized program has a size", expected="> 0", actual=size)
    fmt = string(program.format, program.format_size)
    expect(bool(fmt), "the optimized program names its format", expected="a format",
           actual=repr(fmt))
    code = ffi.new("char[]", size)
    program.code = code
    d.call("PJRT_Executable_OptimizedProgram", executable=executable, program=program)
    expect_equal(int(program.code_size), size, "code_size of the second call")
    expect(any(bytes(ffi.buffer(code, size))), "the program bytes were written",
           expected="non-zero bytes", actual="all zero")
    return f"{fmt}, {size} bytes"


def _serialize(d: AbiDriver, executable) -> bytes:
    args = d.call("PJRT_Executable_Serialize", executable=executable)
    try:
        expect(args.serialized_bytes_size > 0 and args.serialized_bytes != NULL,
               "Executable_Serialize returns bytes", expected="> 0 bytes",
               actual=int(args.serialized_bytes_size))
        return bytes(ffi.buffer(args.serialized_bytes, args.serialized_bytes_size))
    finally:
        if args.serialized_executable_deleter != NULL:
            args.serialized_executable_deleter(args.serialized_executable)


@abi_check("abi.executable.serialize_round_trip", mandatory=False, capability="serialize")
def executable_serialize_round_trip(d: AbiDriver):
    """Serialize, DeserializeAndLoad on the same client, and the result runs correctly."""
    blob = _serialize(d, _executable(d))
    data = d.keep(ffi.new("char[]", blob))
    loaded = d.call("PJRT_Executable_DeserializeAndLoad", client=d.client,
                    serialized_executable=data, serialized_executable_size=len(blob)
                    ).loaded_executable
    expect(loaded != NULL, "DeserializeAndLoad returns an executable", expected="non-NULL",
           actual="NULL")
    d.defer(lambda: d.call("PJRT_LoadedExecutable_Destroy", executable=loaded))
    outputs, _events = _run(d, loaded)
    _check_results(d, outputs, "the deserialized executable's results")
    return f"{len(blob)} bytes"


@abi_check("abi.executable.get_compile_options", mandatory=False, capability="compile_options")
def executable_get_compile_options(d: AbiDriver):
    """Executable_GetCompileOptions returns a CompileOptionsProto that parses (PJRT 0.90)."""
    from jaxlib import xla_client

    d.require_minor(90, "PJRT_Executable_GetCompileOptions")
    args = d.call("PJRT_Executable_GetCompileOptions", executable=_executable(d))
    try:
        blob = bytes(ffi.buffer(args.serialized_bytes, args.serialized_bytes_size))
    finally:
        if args.serialized_compile_options_deleter != NULL:
            args.serialized_compile_options_deleter(args.serialized_compile_options)
    options = xla_client.CompileOptions()
    options.ParseFromString(blob)
    expect_equal(options.num_replicas, 1, "num_replicas of the returned compile options")


# ---- loaded executables ----------------------------------------------------------------------

@abi_check("abi.loaded.addressable_devices")
def loaded_addressable_devices(d: AbiDriver):
    """LoadedExecutable_AddressableDevices is the one device it was compiled for."""
    args = d.call("PJRT_LoadedExecutable_AddressableDevices", executable=_loaded(d))
    devices = [args.addressable_devices[i] for i in range(args.num_addressable_devices)]
    expect(devices == [d.device()], "the executable runs on the assigned device",
           expected=[hex(ptr_key(d.device()))], actual=[hex(ptr_key(p)) for p in devices])


def _parse_device_assignment(blob: bytes) -> tuple[int, int, list[list[int]]]:
    """(replica_count, computation_count, ids per computation) of a DeviceAssignmentProto."""
    from pjrtkit.runtime.compile_options import read_device_assignment
    return read_device_assignment(blob)


@abi_check("abi.loaded.device_assignment")
def loaded_device_assignment(d: AbiDriver):
    """GetDeviceAssignment is a DeviceAssignmentProto of 1 replica x 1 computation on the device."""
    args = d.call("PJRT_LoadedExecutable_GetDeviceAssignment", executable=_loaded(d))
    try:
        blob = bytes(ffi.buffer(args.serialized_bytes, args.serialized_bytes_size))
    finally:
        if args.serialized_device_assignment_deleter != NULL:
            args.serialized_device_assignment_deleter(args.serialized_device_assignment)
    try:
        parsed = _parse_device_assignment(blob)
    except (ValueError, IndexError) as exc:
        parsed = f"unparsable: {exc}"
    expect_equal(parsed, (1, 1, [[d.device_id(d.device())]]),
                 "DeviceAssignmentProto (replica_count, computation_count, device ids)")


@abi_check("abi.loaded.delete")
def loaded_delete(d: AbiDriver):
    """LoadedExecutable_Delete succeeds; an executable that then reports IsDeleted must refuse
    to execute. (XLA's CPU plugin keeps a deleted executable runnable and IsDeleted false, so
    IsDeleted staying false is allowed.)"""
    loaded = d.compile(add_one, X)
    args = d.new_args("PJRT_LoadedExecutable_IsDeleted", executable=loaded, is_deleted=True)
    expect(not d.invoke("PJRT_LoadedExecutable_IsDeleted", args).is_deleted,
           "a fresh executable is not deleted", expected=False, actual=True)
    d.call("PJRT_LoadedExecutable_Delete", executable=loaded)
    if not d.invoke("PJRT_LoadedExecutable_IsDeleted", args).is_deleted:
        return "IsDeleted stays false after Delete"
    run = d.execute_args(loaded, [[d.put(X)]], 1)
    error = d.raw("PJRT_LoadedExecutable_Execute", run)
    if error is None:
        d.collect_outputs(run, 1)
    expect(error is not None, "executing an executable that reports IsDeleted fails",
           expected="a PJRT_Error", actual="success")


# ---- execute ---------------------------------------------------------------------------------

@abi_check("abi.execute.results")
def execute_results(d: AbiDriver):
    """Execute computes (x*2+1, y+3) and the outputs read back exactly."""
    outputs, _events = _run(d)
    _check_results(d, outputs, "Execute")


@abi_check("abi.execute.complete_events")
def execute_complete_events(d: AbiDriver):
    """Execute hands out one completion event per device; it completes without error."""
    _outputs, events = _run(d)
    expect(events[0] != NULL, "device_complete_events[0] is set", expected="an event",
           actual="NULL")
    error = d.await_event(events[0])
    expect(error is None, "the completion event completes without error", expected="OK",
           actual=error and f"{error.code.name}: {error}")
    ready = d.call("PJRT_Event_IsReady", event=events[0]).is_ready
    expect(ready, "the completion event is ready after Await", expected=True, actual=False)


@abi_check("abi.execute.output_buffers")
def execute_output_buffers(d: AbiDriver):
    """Outputs live on the executing device with the program's element types and shapes."""
    outputs, _events = _run(d)
    device = d.device()
    for buffer, (dtype, dims) in zip(outputs, [(np.float32, (2, 3)), (np.int32, ())]):
        expect(buffer != NULL, "an output buffer is returned", expected="non-NULL",
               actual="NULL")
        on = d.call("PJRT_Buffer_Device", buffer=buffer).device
        expect(on == device, "output on the executing device", expected=hex(ptr_key(device)),
               actual=hex(ptr_key(on)))
        expect_equal(d.buffer_dtype(buffer), np.dtype(dtype), "output element type")
        expect_equal(d.buffer_dims(buffer), dims, "output dimensions")


@abi_check("abi.execute.wrong_num_devices")
def execute_wrong_num_devices(d: AbiDriver):
    """Two argument lists for a one-device executable are INVALID_ARGUMENT."""
    x, y = d.put(X), d.put(Y)
    args = d.execute_args(_loaded(d), [[x, y], [x, y]], 2)
    d.expect_error("PJRT_LoadedExecutable_Execute", args, INVALID, "2 argument lists, 1 device")


@abi_check("abi.execute.wrong_num_args")
def execute_wrong_num_args(d: AbiDriver):
    """One argument for a two-parameter program is INVALID_ARGUMENT."""
    args = d.execute_args(_loaded(d), [[d.put(X)]], 2)
    d.expect_error("PJRT_LoadedExecutable_Execute", args, INVALID, "1 argument, 2 parameters")


@abi_check("abi.execute.deleted_argument")
def execute_deleted_argument(d: AbiDriver):
    """Executing with a deleted buffer is refused (INVALID_ARGUMENT or FAILED_PRECONDITION)."""
    x = d.put(X)
    d.call("PJRT_Buffer_Delete", buffer=x)
    args = d.execute_args(_loaded(d), [[x, d.put(Y)]], 2)
    error = d.raw("PJRT_LoadedExecutable_Execute", args)
    if error is None:  # the failure may also arrive through the completion event
        _outputs, events = d.collect_outputs(args, 2)
        error = d.await_event(events[0]) if events[0] != NULL else None
    expect(error is not None and error.code in UNUSABLE, "execute with a deleted argument",
           expected="INVALID_ARGUMENT or FAILED_PRECONDITION",
           actual="success" if error is None else f"{error.code.name}: {error}")


@abi_check("abi.execute.donation", mandatory=False, capability="donation")
def execute_donation(d: AbiDriver):
    """A donated argument is consumed (IsDeleted); one listed non-donatable is kept."""
    loaded = d.compile(add_one, X, donate_argnums=(0,))
    donated = d.put(X)
    outputs, _ = d.execute(loaded, [[donated]], 1)
    got = d.to_host(outputs[0][0])
    expect(np.array_equal(got, X + 1), "result of the donating program",
           expected=(X + 1).tolist(), actual=got.tolist())
    expect(d.call("PJRT_Buffer_IsDeleted", buffer=donated).is_deleted,
           "a donated argument is deleted after Execute", expected=True, actual=False)
    kept = d.put(X)
    d.execute(loaded, [[kept]], 1, non_donatable=[0])
    expect(not d.call("PJRT_Buffer_IsDeleted", buffer=kept).is_deleted,
           "an argument in non_donatable_input_indices is not consumed", expected=False,
           actual=True)
    expect(np.array_equal(d.to_host(kept), X), "the kept argument still reads back",
           expected=X.tolist(), actual=d.to_host(kept).tolist())


# ---- struct_size on the big calls ------------------------------------------------------------

@abi_check("abi.struct_size.larger_compile")
def struct_larger_compile(d: AbiDriver):
    """Client_Compile with a larger Args struct (newer caller) compiles."""
    loaded = d.compile(add_one, X, struct_extra=64)
    expect(loaded != NULL, "an executable is returned", expected="non-NULL", actual="NULL")


@abi_check("abi.struct_size.larger_execute")
def struct_larger_execute(d: AbiDriver):
    """LoadedExecutable_Execute with a larger Args struct runs correctly."""
    outputs, _events = d.execute(_loaded(d), [[d.put(X), d.put(Y)]], 2, struct_extra=64)
    _check_results(d, outputs[0], "Execute through a larger struct")
