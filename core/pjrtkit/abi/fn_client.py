"""PJRT_Client_*: creation, identity, device and memory lists, compile."""
from __future__ import annotations

import logging
from typing import Any

from pjrtkit.abi import array_pool, named_values, native
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import Args, data, string, struct_array
from pjrtkit.abi.errors import pjrt_function
from pjrtkit.abi.fn_executable import new_loaded_executable
from pjrtkit.abi.handles import CLIENTS, NULL, ClientRef, deref
from pjrtkit.abi.slots import backend_for_slot
from pjrtkit.abi.kv_store import CallbackStore
from pjrtkit.bounded_calls import call_within
from pjrtkit.discovery import start_timeout_s
from pjrtkit.distributed.placement import placement_from_options, rendezvous_timeout_s
from pjrtkit.errors import FailedPrecondition, Internal, InvalidArgument

log = logging.getLogger("pjrtkit.abi")


def client_of(a: Args, field: str = "client") -> ClientRef:
    return deref(a.req(field), ClientRef, f"{a.name}.{field}")


@pjrt_function("PJRT_Client_Create")
def client_create(slot: int, args: Any) -> None:
    a = Args(args)
    a.require_outputs("client")
    options = named_values.read(a.req("create_options"), a.req("num_options"),
                                "PJRT_Client_Create_Args.create_options")
    # Under jax.distributed: node_id/num_nodes in the options and the job's key-value store
    # as three callbacks (pjrtkit.distributed; the client exchanges topologies over them).
    store = CallbackStore.from_create_args(a)
    backend = backend_for_slot(slot)
    from pjrtkit.runtime.client import Client  # runtime is imported lazily: abi must load alone
    array_pool.install()  # NumPy's allocator on the client's kernel threads (abi/array_pool.py)
    # The plugin's client hook may never return; JAX would wait for ever (bounded_calls). The
    # topology exchange of a multi-process job waits for the other processes on top of that.
    timeout = start_timeout_s()
    if placement_from_options(options, backend.platform_name) is not None:
        timeout += rendezvous_timeout_s()
    try:
        client = call_within(lambda: Client(backend, options, store=store,
                                        process_state=process_state),
                             f"creating a {backend.platform_name} client "
                             "(pjrtkit_client_topology)", timeout)
    except Exception as exc:
        # JAX registers pjrtkit platforms quietly (jax_compat.register_plugin): unless the
        # platform is asked for, it keeps this error to itself. Say it once here; a machine
        # without what the backend needs (FailedPrecondition) is expected, not worth a warning.
        if not isinstance(exc, FailedPrecondition):
            log.warning("pjrtkit backend %r: creating its %s client failed: %s: %s",
                        backend.name, backend.platform_name, type(exc).__name__, exc)
        raise
    native.install_ledgers(client)  # memory counts the C execute path shares (abi/native.py)
    ref = ClientRef(client, backend)
    native.open_host_memories(ref)  # host transfers answered in C (PlatformInfo.host_payloads)
    a.set("client", CLIENTS.new(ref))


@pjrt_function("PJRT_Client_Destroy", never_fails=True)
def client_destroy(args: Any) -> None:
    ref = CLIENTS.release(Args(args).req("client"))
    if ref is not None:
        ref.obj.destroy()
        if not len(CLIENTS):
            array_pool.release()  # the last client: its kernels' kept blocks go back


@pjrt_function("PJRT_Client_UpdateGlobalProcessInfo")
def client_update_global_process_info(args: Any) -> None:
    """Answered in C (pjrtkit_process_states.h: jaxlib's watcher thread must never wait for
    the GIL); Python sees only the calls C refused, and says what is wrong with them."""
    a = Args(args)
    client_of(a)
    infos = struct_array(a.req("process_infos"), a.req("num_process_infos"),
                         "PJRT_Client_UpdateGlobalProcessInfo_Args.process_infos")
    for info in infos:
        info.req("error_code")  # the struct must reach the fields C reads
        task = info.req("task_id")
        if not 0 <= task < lib.PJRTKIT_MAX_PROCESSES:
            raise InvalidArgument(f"{info.name}.task_id is {task}; pjrtkit keeps the states of "
                                  f"tasks 0..{lib.PJRTKIT_MAX_PROCESSES - 1}")
    raise Internal("PJRT_Client_UpdateGlobalProcessInfo: the C answer declined valid Args")


def process_state(task: int) -> tuple[int, int] | None:
    """(PJRT_ProcessState, error code) jaxlib last reported for ``task``, or None."""
    state, code = ffi.new("int*"), ffi.new("int*")
    if not lib.pjrtkit_process_state(task, state, code):
        return None
    return state[0], code[0]


@pjrt_function("PJRT_Client_PlatformName")
def client_platform_name(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    chars, size = ref.cstr("platform_name", ref.obj.platform_name)
    a.set_outputs(platform_name=chars, platform_name_size=size)


@pjrt_function("PJRT_Client_PlatformVersion")
def client_platform_version(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    chars, size = ref.cstr("platform_version", ref.obj.platform_version)
    a.set_outputs(platform_version=chars, platform_version_size=size)


@pjrt_function("PJRT_Client_ProcessIndex")
def client_process_index(args: Any) -> None:
    a = Args(args)
    a.set("process_index", client_of(a).obj.process_index)


@pjrt_function("PJRT_Client_TopologyDescription")
def client_topology_description(args: Any) -> None:
    a = Args(args)
    a.set_outputs(topology=client_of(a).topology_ptr())


@pjrt_function("PJRT_Client_Devices")
def client_devices(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    array, count = ref.device_array("all", ref.obj.devices)
    a.set_outputs(devices=array, num_devices=count)


@pjrt_function("PJRT_Client_AddressableDevices")
def client_addressable_devices(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    array, count = ref.device_array("addressable", ref.obj.addressable_devices)
    a.set_outputs(addressable_devices=array, num_addressable_devices=count)


@pjrt_function("PJRT_Client_AddressableMemories")
def client_addressable_memories(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    array, count = ref.memory_array("addressable", ref.obj.memories)
    a.set_outputs(addressable_memories=array, num_addressable_memories=count)


@pjrt_function("PJRT_Client_LookupDevice")
def client_lookup_device(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    a.set_outputs(device=ref.device_ptr(ref.obj.lookup_device(a.req("id"))))


@pjrt_function("PJRT_Client_LookupAddressableDevice")
def client_lookup_addressable_device(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    a.require_outputs("addressable_device")
    device = ref.obj.lookup_addressable_device(a.req("local_hardware_id"))
    a.set("addressable_device", ref.device_ptr(device))


@pjrt_function("PJRT_Client_DefaultDeviceAssignment")
def client_default_device_assignment(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    replicas, partitions = a.req("num_replicas"), a.req("num_partitions")
    assignment = ref.obj.default_device_assignment(replicas, partitions)
    flat = [device_id for row in assignment for device_id in row]
    if a.req("default_assignment_size") < len(flat):
        raise InvalidArgument(f"{a.name}.default_assignment_size is "
                              f"{a.req('default_assignment_size')}; {replicas} replica(s) x "
                              f"{partitions} partition(s) need {len(flat)} entries")
    out = a.req("default_assignment")
    if out == NULL:
        raise InvalidArgument(f"{a.name}.default_assignment is NULL")
    for i, device_id in enumerate(flat):
        out[i] = device_id


def read_program(ptr: Any, what: str) -> tuple[bytes, str]:
    program = Args(ptr, what)
    code = data(program.req("code"), program.req("code_size"), f"{what}.code")
    fmt = string(program.req("format"), program.req("format_size"), f"{what}.format")
    return code, fmt


@pjrt_function("PJRT_Client_Compile")
def client_compile(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    a.require_outputs("executable")
    code, fmt = read_program(a.req("program"), "PJRT_Client_Compile_Args.program")
    options = data(a.req("compile_options"), a.req("compile_options_size"),
                   "PJRT_Client_Compile_Args.compile_options")
    loaded = ref.obj.compile(code, fmt, options)
    a.set("executable", new_loaded_executable(loaded, ref))


@pjrt_function("PJRT_Executable_DeserializeAndLoad")
def executable_deserialize_and_load(args: Any) -> None:
    a = Args(args)
    ref = client_of(a)
    a.require_outputs("loaded_executable")
    blob = data(a.req("serialized_executable"), a.req("serialized_executable_size"),
                "PJRT_Executable_DeserializeAndLoad_Args.serialized_executable")
    # Absent for callers older than the field, and size 0 when there is no override.
    override_size = a.opt("overridden_serialized_compile_options_size", 0)
    override = data(a.req("overridden_serialized_compile_options"), override_size,
                    "PJRT_Executable_DeserializeAndLoad_Args.overridden_serialized_compile_options"
                    ) if override_size else None
    loaded = ref.obj.deserialize_executable(blob, override)
    a.set("loaded_executable", new_loaded_executable(loaded, ref))
