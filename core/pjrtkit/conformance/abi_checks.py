"""Layer 1, the C ABI: the table, plugin, errors, client, devices, memories and struct_size.

Modelled on XLA's ``xla/pjrt/c/pjrt_c_api_test.cc``: each check drives the PJRT_Api through an
``AbiDriver`` exactly as a framework does. Importing this module registers every layer-1 check
(the compile/execute and buffer/event checks live in ``abi_checks_exec`` and
``abi_checks_buffers``, imported at the bottom).

``mandatory=True`` marks functions JAX calls to start a client, compile and execute (see
PJRT_NOTES.md, "What JAX calls"); UNIMPLEMENTED there is a FAIL. Optional capabilities carry a
``capability`` name and come out UNSUPPORTED when the plugin answers UNIMPLEMENTED.
"""
from __future__ import annotations

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import ErrorCode
from pjrtkit.conformance.abi_driver import (
    NULL, AbiDriver, abi_check, ptr_key, read_named_values, string,
)
from pjrtkit.conformance.checks import Unsupported, expect, expect_equal

INVALID = (ErrorCode.INVALID_ARGUMENT,)

# Every function JAX calls to start a client, compile and execute (PJRT_NOTES.md).
JAX_REQUIRED_FUNCTIONS = (
    "PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode", "PJRT_Plugin_Initialize",
    "PJRT_Plugin_Attributes", "PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Await",
    "PJRT_Event_OnReady", "PJRT_Event_Error", "PJRT_Client_Create", "PJRT_Client_Destroy",
    "PJRT_Client_PlatformName", "PJRT_Client_PlatformVersion", "PJRT_Client_Devices",
    "PJRT_Client_AddressableDevices", "PJRT_Client_AddressableMemories",
    "PJRT_Client_LookupDevice", "PJRT_Client_Compile", "PJRT_Client_BufferFromHostBuffer",
    "PJRT_DeviceDescription_Id", "PJRT_DeviceDescription_ProcessIndex",
    "PJRT_DeviceDescription_Attributes", "PJRT_Device_GetDescription",
    "PJRT_Device_IsAddressable", "PJRT_Device_AddressableMemories", "PJRT_Memory_Kind",
    "PJRT_Memory_AddressableByDevices", "PJRT_Executable_Destroy", "PJRT_Executable_Name",
    "PJRT_Executable_NumReplicas", "PJRT_Executable_NumPartitions", "PJRT_Executable_NumOutputs",
    "PJRT_Executable_OutputElementTypes", "PJRT_Executable_OutputDimensions",
    "PJRT_Executable_Fingerprint", "PJRT_LoadedExecutable_Destroy",
    "PJRT_LoadedExecutable_GetExecutable", "PJRT_LoadedExecutable_AddressableDevices",
    "PJRT_LoadedExecutable_GetDeviceAssignment", "PJRT_LoadedExecutable_Execute",
    "PJRT_Buffer_Destroy", "PJRT_Buffer_ElementType", "PJRT_Buffer_Dimensions",
    "PJRT_Buffer_Device", "PJRT_Buffer_Memory", "PJRT_Buffer_ToHostBuffer",
    "PJRT_Buffer_ReadyEvent", "PJRT_Buffer_Delete", "PJRT_Buffer_IsDeleted",
)


# ---- the table -------------------------------------------------------------------------------

@abi_check("abi.api.version")
def api_version(d: AbiDriver):
    """PJRT_Api declares major version 0 and a table covering its declared minor version."""
    expect_equal(d.major, 0, "PJRT_Api.pjrt_api_version.major_version")
    expect(d.minor >= 1, "PJRT_Api.pjrt_api_version.minor_version is positive",
           expected=">= 1", actual=d.minor)
    version_size = int(d.api.pjrt_api_version.struct_size)
    expect(version_size >= ffi.sizeof("PJRT_Api_Version"),
           "PJRT_Api_Version.struct_size covers major and minor", expected=f">= "
           f"{ffi.sizeof('PJRT_Api_Version')}", actual=version_size)
    # A plugin at our header's minor or newer must have at least our whole table.
    if d.minor >= 90:
        expect(d.struct_size >= ffi.sizeof("PJRT_Api"),
               f"PJRT_Api.struct_size of a minor-{d.minor} plugin covers every 0.90 slot",
               expected=f">= {ffi.sizeof('PJRT_Api')}", actual=d.struct_size)
    return f"PJRT {d.major}.{d.minor}, PJRT_Api.struct_size {d.struct_size}"


@abi_check("abi.api.jax_functions_present")
def api_jax_functions_present(d: AbiDriver):
    """Every function JAX calls to start a client, compile and execute is in the table, non-NULL."""
    missing = [name for name in JAX_REQUIRED_FUNCTIONS
               if not d.has(name) or getattr(d.api, name) == NULL]
    expect(not missing, "functions JAX needs are missing or NULL", expected="all present",
           actual=missing)


# ---- plugin ----------------------------------------------------------------------------------

@abi_check("abi.plugin.initialize")
def plugin_initialize(d: AbiDriver):
    """PJRT_Plugin_Initialize succeeds (jaxlib calls it once, before anything else)."""
    d.call("PJRT_Plugin_Initialize")


@abi_check("abi.plugin.attributes_unique")
def plugin_attributes_unique(d: AbiDriver):
    """PJRT_Plugin_Attributes returns well-typed named values with unique names."""
    attributes = d.plugin_attributes()  # read_named_values fails on duplicates and bad types
    return ", ".join(sorted(attributes)) or "(none)"


@abi_check("abi.plugin.xla_version", mandatory=False, capability="version_attributes")
def plugin_xla_version(d: AbiDriver):
    """The plugin publishes xla_version as a non-negative int64 (XLA's plugins all do)."""
    attributes = d.plugin_attributes()
    if "xla_version" not in attributes:
        raise Unsupported("version_attributes", "no xla_version plugin attribute")
    value = attributes["xla_version"]
    expect(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
           "xla_version is a non-negative int64", expected="int64 >= 0", actual=value)


@abi_check("abi.plugin.stablehlo_version_range", mandatory=False,
           capability="version_attributes")
def plugin_stablehlo_range(d: AbiDriver):
    """stablehlo_current_version / stablehlo_minimum_version are 3-int lists, minimum <= current."""
    attributes = d.plugin_attributes()
    names = ("stablehlo_current_version", "stablehlo_minimum_version")
    if not all(n in attributes for n in names):
        raise Unsupported("version_attributes", "no StableHLO version range plugin attributes")
    current, minimum = (attributes[n] for n in names)
    for name, value in zip(names, (current, minimum)):
        expect(isinstance(value, list) and len(value) == 3 and all(v >= 0 for v in value),
               f"{name} is an int64 list [major, minor, patch]", expected="3 ints >= 0",
               actual=value)
    expect(tuple(minimum) <= tuple(current), "stablehlo_minimum_version <= current",
           expected=f"<= {current}", actual=minimum)
    return f"StableHLO {minimum} .. {current}"


# ---- errors ----------------------------------------------------------------------------------

@abi_check("abi.error.code_and_message")
def error_code_and_message(d: AbiDriver):
    """A returned PJRT_Error has a valid code (GetCode) and a non-empty message."""
    args = d.new_args("PJRT_Client_LookupDevice", client=d.client, id=-1)
    error = d.function("PJRT_Client_LookupDevice")(args)
    expect(error != NULL, "LookupDevice(-1) returns a PJRT_Error", expected="an error",
           actual="NULL")
    code_args = d.new_args("PJRT_Error_GetCode", error=error)
    status = d.function("PJRT_Error_GetCode")(code_args)
    message_args = d.new_args("PJRT_Error_Message", error=error)
    d.function("PJRT_Error_Message")(message_args)
    message = string(message_args.message, message_args.message_size)
    d.function("PJRT_Error_Destroy")(d.new_args("PJRT_Error_Destroy", error=error))
    expect(status == NULL, "PJRT_Error_GetCode succeeds on a valid error", expected="NULL",
           actual="an error")
    expect(1 <= code_args.code <= 16, "the code is a PJRT_Error_Code other than OK",
           expected="1..16", actual=int(code_args.code))
    expect(bool(message.strip()), "the error message is non-empty", expected="a message",
           actual=repr(message))


# ---- client ----------------------------------------------------------------------------------

@abi_check("abi.client.create_destroy")
def client_create_destroy(d: AbiDriver):
    """A second client can be created and destroyed beside the first."""
    d.initialize()
    args = d.call("PJRT_Client_Create")
    expect(args.client != NULL, "PJRT_Client_Create returns a client", expected="non-NULL",
           actual="NULL")
    expect(args.client != d.client, "a new client is a new handle",
           expected="distinct handles", actual="the shared client's handle")
    d.call("PJRT_Client_Destroy", client=args.client)


@abi_check("abi.client.platform_name")
def client_platform_name(d: AbiDriver):
    """PJRT_Client_PlatformName is a non-empty string."""
    args = d.call("PJRT_Client_PlatformName", client=d.client)
    name = string(args.platform_name, args.platform_name_size)
    expect(bool(name), "platform name is non-empty", expected="a name", actual=repr(name))
    return name


@abi_check("abi.client.platform_version")
def client_platform_version(d: AbiDriver):
    """PJRT_Client_PlatformVersion returns a readable string (pointer non-NULL when size > 0)."""
    args = d.call("PJRT_Client_PlatformVersion", client=d.client)
    expect(args.platform_version_size == 0 or args.platform_version != NULL,
           "platform_version points at platform_version_size bytes", expected="non-NULL",
           actual="NULL")
    return string(args.platform_version, args.platform_version_size)


@abi_check("abi.client.process_index")
def client_process_index(d: AbiDriver):
    """A single-process client reports process index 0."""
    args = d.new_args("PJRT_Client_ProcessIndex", client=d.client, process_index=-1)
    expect_equal(d.invoke("PJRT_Client_ProcessIndex", args).process_index, 0,
                 "PJRT_Client_ProcessIndex of a single-process client")


@abi_check("abi.client.devices")
def client_devices(d: AbiDriver):
    """Client_Devices is non-empty, and its devices have distinct non-negative ids."""
    devices = d.devices()
    expect(len(devices) > 0, "the client has devices", expected=">= 1", actual=0)
    ids = [d.device_id(dev) for dev in devices]
    expect(all(i >= 0 for i in ids), "device ids are non-negative", expected=">= 0", actual=ids)
    expect(len(set(ids)) == len(ids), "device ids are unique", expected="unique", actual=ids)
    return f"{len(devices)} device(s)"


@abi_check("abi.client.addressable_devices")
def client_addressable_devices(d: AbiDriver):
    """Addressable devices are a non-empty subset of Client_Devices (same handles)."""
    devices = {ptr_key(p) for p in d.devices()}
    addressable = d.addressable_devices()
    expect(len(addressable) > 0, "a client has addressable devices", expected=">= 1", actual=0)
    strangers = [hex(ptr_key(p)) for p in addressable if ptr_key(p) not in devices]
    expect(not strangers, "every addressable device is one of Client_Devices",
           expected="a subset", actual=strangers)


@abi_check("abi.client.lookup_device")
def client_lookup_device(d: AbiDriver):
    """LookupDevice(id) returns the very device handle that has that id."""
    for device in d.devices():
        device_id = d.device_id(device)
        found = d.call("PJRT_Client_LookupDevice", client=d.client, id=device_id).device
        expect(found == device, f"LookupDevice({device_id}) returns that device's handle",
               expected=hex(ptr_key(device)), actual=hex(ptr_key(found)))


@abi_check("abi.client.lookup_device_negative")
def client_lookup_device_negative(d: AbiDriver):
    """LookupDevice(-1) is INVALID_ARGUMENT."""
    d.expect_error("PJRT_Client_LookupDevice",
                   d.new_args("PJRT_Client_LookupDevice", client=d.client, id=-1), INVALID,
                   "a negative device id")


@abi_check("abi.client.lookup_device_out_of_range")
def client_lookup_device_out_of_range(d: AbiDriver):
    """LookupDevice(max id + 1) is INVALID_ARGUMENT."""
    beyond = max(d.device_id(dev) for dev in d.devices()) + 1
    d.expect_error("PJRT_Client_LookupDevice",
                   d.new_args("PJRT_Client_LookupDevice", client=d.client, id=beyond), INVALID,
                   f"device id {beyond}, beyond every device")


@abi_check("abi.client.lookup_addressable_device", mandatory=False,
           capability="lookup_addressable_device")
def client_lookup_addressable_device(d: AbiDriver):
    """LookupAddressableDevice(local_hardware_id) returns the device with that hardware id."""
    for device in d.addressable_devices():
        hw = d.call("PJRT_Device_LocalHardwareId", device=device).local_hardware_id
        found = d.call("PJRT_Client_LookupAddressableDevice", client=d.client,
                       local_hardware_id=hw).addressable_device
        expect(found == device, f"LookupAddressableDevice({hw}) returns that device",
               expected=hex(ptr_key(device)), actual=hex(ptr_key(found)))


@abi_check("abi.client.addressable_memories")
def client_addressable_memories(d: AbiDriver):
    """Client_AddressableMemories is non-empty and contains every device's memories."""
    args = d.call("PJRT_Client_AddressableMemories", client=d.client)
    memories = {ptr_key(args.addressable_memories[i])
                for i in range(args.num_addressable_memories)}
    expect(len(memories) > 0, "the client has addressable memories", expected=">= 1", actual=0)
    for device in d.addressable_devices():
        for memory in d.device_memories(device):
            expect(ptr_key(memory) in memories,
                   "a device's addressable memory is among the client's",
                   expected="listed by Client_AddressableMemories", actual=d.memory_kind(memory))


@abi_check("abi.client.default_device_assignment", mandatory=False,
           capability="default_device_assignment")
def client_default_device_assignment(d: AbiDriver):
    """DefaultDeviceAssignment(1 replica, 1 partition) names one of the client's devices."""
    out = ffi.new("int[1]", [-1])
    d.call("PJRT_Client_DefaultDeviceAssignment", client=d.client, num_replicas=1,
           num_partitions=1, default_assignment_size=1, default_assignment=out)
    ids = [d.device_id(dev) for dev in d.devices()]
    expect(out[0] in ids, "the assigned device is a device of the client", expected=ids,
           actual=out[0])


@abi_check("abi.client.default_device_assignment_too_small", mandatory=False,
           capability="default_device_assignment")
def client_default_device_assignment_too_small(d: AbiDriver):
    """DefaultDeviceAssignment into a buffer smaller than replicas x partitions is an error."""
    out = ffi.new("int[7]")
    args = d.new_args("PJRT_Client_DefaultDeviceAssignment", client=d.client, num_replicas=4,
                      num_partitions=2, default_assignment_size=7, default_assignment=out)
    error = d.raw("PJRT_Client_DefaultDeviceAssignment", args)
    if error is not None and error.code == ErrorCode.UNIMPLEMENTED:
        raise error
    expect(error is not None and error.code in (ErrorCode.FAILED_PRECONDITION,
                                                ErrorCode.INVALID_ARGUMENT),
           "a 7-entry buffer for 4 x 2 is refused",
           expected="FAILED_PRECONDITION or INVALID_ARGUMENT",
           actual="success" if error is None else f"{error.code.name}: {error}")


@abi_check("abi.client.topology", mandatory=False, capability="client_topology")
def client_topology(d: AbiDriver):
    """Client_TopologyDescription names the client's platform and describes its devices."""
    topology = d.call("PJRT_Client_TopologyDescription", client=d.client).topology
    expect(topology != NULL, "a topology is returned", expected="non-NULL", actual="NULL")
    name_args = d.call("PJRT_Client_PlatformName", client=d.client)
    platform = string(name_args.platform_name, name_args.platform_name_size)
    args = d.call("PJRT_TopologyDescription_PlatformName", topology=topology)
    expect_equal(string(args.platform_name, args.platform_name_size), platform,
                 "the topology's platform name is the client's")
    descriptions = d.call("PJRT_TopologyDescription_GetDeviceDescriptions", topology=topology)
    expect_equal(int(descriptions.num_descriptions), len(d.devices()),
                 "the topology describes as many devices as the client has")


# ---- devices ---------------------------------------------------------------------------------

@abi_check("abi.device.description_process_index")
def device_process_index(d: AbiDriver):
    """DeviceDescription_ProcessIndex of a single-process client's devices is 0."""
    for device in d.addressable_devices():
        args = d.new_args("PJRT_DeviceDescription_ProcessIndex",
                          device_description=d.description(device), process_index=-1)
        expect_equal(d.invoke("PJRT_DeviceDescription_ProcessIndex", args).process_index, 0,
                     "process index of an addressable device")


@abi_check("abi.device.description_strings")
def device_description_strings(d: AbiDriver):
    """Kind, DebugString and ToString of every device are non-empty."""
    for device in d.devices():
        description = d.description(device)
        for name, field in (("PJRT_DeviceDescription_Kind", "device_kind"),
                            ("PJRT_DeviceDescription_DebugString", "debug_string"),
                            ("PJRT_DeviceDescription_ToString", "to_string")):
            args = d.call(name, device_description=description)
            text = string(getattr(args, field), getattr(args, f"{field}_size"))
            expect(bool(text), f"{name} is non-empty", expected="text", actual=repr(text))


@abi_check("abi.device.description_attributes")
def device_description_attributes(d: AbiDriver):
    """DeviceDescription_Attributes are well-typed named values with unique names."""
    for device in d.devices():
        args = d.call("PJRT_DeviceDescription_Attributes",
                      device_description=d.description(device))
        read_named_values(args.attributes, args.num_attributes)


@abi_check("abi.device.is_addressable")
def device_is_addressable(d: AbiDriver):
    """Device_IsAddressable is true for every addressable device."""
    for device in d.addressable_devices():
        args = d.new_args("PJRT_Device_IsAddressable", device=device, is_addressable=False)
        expect(d.invoke("PJRT_Device_IsAddressable", args).is_addressable,
               "an addressable device says it is addressable", expected=True, actual=False)


@abi_check("abi.device.local_hardware_id")
def device_local_hardware_id(d: AbiDriver):
    """Addressable devices have distinct, non-negative local hardware ids."""
    ids = []
    for device in d.addressable_devices():
        args = d.new_args("PJRT_Device_LocalHardwareId", device=device, local_hardware_id=-1)
        ids.append(int(d.invoke("PJRT_Device_LocalHardwareId", args).local_hardware_id))
    expect(all(i >= 0 for i in ids) and len(set(ids)) == len(ids),
           "local hardware ids are distinct and >= 0", expected="distinct, >= 0", actual=ids)


@abi_check("abi.device.addressable_memories")
def device_addressable_memories(d: AbiDriver):
    """Every addressable device has at least one memory, each with a non-empty kind."""
    for device in d.addressable_devices():
        memories = d.device_memories(device)
        expect(len(memories) > 0, "a device has addressable memories", expected=">= 1",
               actual=0)
        kinds = [d.memory_kind(m) for m in memories]
        expect(all(kinds), "memory kinds are non-empty", expected="non-empty", actual=kinds)


@abi_check("abi.device.default_memory")
def device_default_memory(d: AbiDriver):
    """Device_DefaultMemory is one of the device's addressable memories."""
    for device in d.addressable_devices():
        default = d.call("PJRT_Device_DefaultMemory", device=device).memory
        expect(default in d.device_memories(device),
               "the default memory is among the device's memories", expected="listed",
               actual="not listed")


@abi_check("abi.device.memory_stats", mandatory=False, capability="memory_stats")
def device_memory_stats(d: AbiDriver):
    """Device_MemoryStats: bytes_in_use >= 0 and set limits/peaks are consistent."""
    args = d.call("PJRT_Device_MemoryStats", device=d.device())
    expect(args.bytes_in_use >= 0, "bytes_in_use >= 0", expected=">= 0",
           actual=int(args.bytes_in_use))
    if args.peak_bytes_in_use_is_set:
        expect(args.peak_bytes_in_use >= args.bytes_in_use, "peak_bytes_in_use >= bytes_in_use",
               expected=f">= {args.bytes_in_use}", actual=int(args.peak_bytes_in_use))


# ---- memories --------------------------------------------------------------------------------

def _all_memories(d: AbiDriver) -> list:
    args = d.call("PJRT_Client_AddressableMemories", client=d.client)
    return [args.addressable_memories[i] for i in range(args.num_addressable_memories)]


@abi_check("abi.memory.ids_unique", mandatory=False, capability="memory_ids")
def memory_ids_unique(d: AbiDriver):
    """Memory_Id is distinct for distinct memories."""
    ids = [int(d.call("PJRT_Memory_Id", memory=m).id) for m in _all_memories(d)]
    expect(len(set(ids)) == len(ids), "memory ids are unique", expected="unique", actual=ids)


@abi_check("abi.memory.kind")
def memory_kind(d: AbiDriver):
    """Every memory has a non-empty kind; Memory_Kind_Id is stable for a memory."""
    for memory in _all_memories(d):
        kind = d.memory_kind(memory)
        expect(bool(kind), "memory kind is non-empty", expected="a kind", actual=repr(kind))
        if d.has("PJRT_Memory_Kind_Id"):
            first = d.call("PJRT_Memory_Kind_Id", memory=memory).kind_id
            again = d.call("PJRT_Memory_Kind_Id", memory=memory).kind_id
            expect_equal(again, first, "Memory_Kind_Id is stable")


@abi_check("abi.memory.addressable_by_devices")
def memory_addressable_by_devices(d: AbiDriver):
    """A device's memory lists that device among the devices that can address it."""
    for device in d.addressable_devices():
        for memory in d.device_memories(device):
            args = d.call("PJRT_Memory_AddressableByDevices", memory=memory)
            devices = [args.devices[i] for i in range(args.num_devices)]
            expect(device in devices, "Memory_AddressableByDevices includes the device that "
                   "lists the memory", expected="listed", actual=len(devices))


@abi_check("abi.memory.strings", mandatory=False, capability="memory_strings")
def memory_strings(d: AbiDriver):
    """Memory_DebugString and Memory_ToString are non-empty."""
    for memory in _all_memories(d):
        for name, field in (("PJRT_Memory_DebugString", "debug_string"),
                            ("PJRT_Memory_ToString", "to_string")):
            args = d.call(name, memory=memory)
            text = string(getattr(args, field), getattr(args, f"{field}_size"))
            expect(bool(text), f"{name} is non-empty", expected="text", actual=repr(text))


# ---- topology (compile-only) -----------------------------------------------------------------

@abi_check("abi.topology.create", mandatory=False, capability="compile_only_topology")
def topology_create(d: AbiDriver):
    """TopologyDescription_Create with no name/options gives a topology with a platform name."""
    d.initialize()
    topology = d.call("PJRT_TopologyDescription_Create").topology
    expect(topology != NULL, "a topology is returned", expected="non-NULL", actual="NULL")
    try:
        args = d.call("PJRT_TopologyDescription_PlatformName", topology=topology)
        name = string(args.platform_name, args.platform_name_size)
        expect(bool(name), "the topology names its platform", expected="a name",
               actual=repr(name))
    finally:
        d.call("PJRT_TopologyDescription_Destroy", topology=topology)


# ---- struct_size -----------------------------------------------------------------------------

EXTRA = 64
SENTINEL = 0xA5


def _oversized(d: AbiDriver, name: str):
    """``<name>_Args`` as a caller built against a newer header passes it: EXTRA unknown
    trailing bytes holding a sentinel, struct_size counting them."""
    size = ffi.sizeof(f"{name}_Args")
    raw = d.keep(ffi.new("unsigned char[]", bytes(size) + bytes([SENTINEL]) * EXTRA))
    args = ffi.cast(f"{name}_Args*", raw)
    args.struct_size = size + EXTRA
    return raw, args


def _tail_untouched(raw, name: str, fn: str) -> None:
    base = ffi.sizeof(f"{name}_Args")
    tail = bytes(ffi.buffer(raw + base, EXTRA))
    expect(tail == bytes([SENTINEL]) * EXTRA, f"{fn} leaves a newer caller's unknown fields alone",
           expected="trailing bytes unchanged", actual="written")


@abi_check("abi.struct_size.larger_plugin_attributes")
def struct_larger_plugin_attributes(d: AbiDriver):
    """A larger PJRT_Plugin_Attributes_Args works and its unknown tail is left alone."""
    d.initialize()
    raw, args = _oversized(d, "PJRT_Plugin_Attributes")
    d.invoke("PJRT_Plugin_Attributes", args)
    expect_equal(read_named_values(args.attributes, args.num_attributes).keys(),
                 d.plugin_attributes().keys(), "attributes read through a larger struct")
    _tail_untouched(raw, "PJRT_Plugin_Attributes", "PJRT_Plugin_Attributes")


@abi_check("abi.struct_size.larger_client_devices")
def struct_larger_client_devices(d: AbiDriver):
    """A larger PJRT_Client_Devices_Args works and returns the same devices."""
    raw, args = _oversized(d, "PJRT_Client_Devices")
    args.client = d.client
    d.invoke("PJRT_Client_Devices", args)
    expect_equal([args.devices[i] for i in range(args.num_devices)], d.devices(),
                 "devices read through a larger struct")
    _tail_untouched(raw, "PJRT_Client_Devices", "PJRT_Client_Devices")


@abi_check("abi.struct_size.larger_lookup_device")
def struct_larger_lookup_device(d: AbiDriver):
    """A larger PJRT_Client_LookupDevice_Args works."""
    device = d.devices()[0]
    raw, args = _oversized(d, "PJRT_Client_LookupDevice")
    args.client = d.client
    args.id = d.device_id(device)
    d.invoke("PJRT_Client_LookupDevice", args)
    expect(args.device == device, "the device found through a larger struct",
           expected=hex(ptr_key(device)), actual=hex(ptr_key(args.device)))
    _tail_untouched(raw, "PJRT_Client_LookupDevice", "PJRT_Client_LookupDevice")


@abi_check("abi.struct_size.larger_error_get_code")
def struct_larger_error_get_code(d: AbiDriver):
    """A larger PJRT_Error_GetCode_Args reads the code of an error."""
    error = d.function("PJRT_Client_LookupDevice")(
        d.new_args("PJRT_Client_LookupDevice", client=d.client, id=-1))
    expect(error != NULL, "LookupDevice(-1) fails", expected="an error", actual="NULL")
    raw, args = _oversized(d, "PJRT_Error_GetCode")
    args.error = error
    status = d.function("PJRT_Error_GetCode")(args)
    d.function("PJRT_Error_Destroy")(d.new_args("PJRT_Error_Destroy", error=error))
    expect(status == NULL, "GetCode through a larger struct succeeds", expected="NULL",
           actual="an error")
    expect_equal(int(args.code), int(ErrorCode.INVALID_ARGUMENT),
                 "the code read through a larger struct")


def _too_small(d: AbiDriver, name: str, field: str, **fields):
    """``name`` called with a struct_size that ends before ``field`` (an output the function
    writes): success or INVALID_ARGUMENT, and nothing written past struct_size."""
    args = d.new_args(name, **fields)
    args.struct_size = ffi.offsetof(f"{name}_Args", field)
    before = bytes(ffi.buffer(args))[args.struct_size:]
    error = d.raw(name, args)
    expect(error is None or error.code == ErrorCode.INVALID_ARGUMENT,
           f"{name} with struct_size ending before `{field}`",
           expected="success or INVALID_ARGUMENT",
           actual=None if error is None else f"{error.code.name}: {error}")
    if error is not None:
        after = bytes(ffi.buffer(args))[args.struct_size:]
        expect(after == before, f"a refused {name} writes nothing past struct_size",
               expected="bytes past struct_size unchanged", actual="written")
    return "INVALID_ARGUMENT" if error is not None else "accepted"


@abi_check("abi.struct_size.smaller_lookup_device")
def struct_smaller_lookup_device(d: AbiDriver):
    """LookupDevice with a struct too small for its output: success or INVALID_ARGUMENT."""
    return _too_small(d, "PJRT_Client_LookupDevice", "device", client=d.client,
                      id=d.device_id(d.device()))


@abi_check("abi.struct_size.smaller_plugin_attributes")
def struct_smaller_plugin_attributes(d: AbiDriver):
    """Plugin_Attributes with a struct too small for its outputs: success or INVALID_ARGUMENT."""
    d.initialize()
    return _too_small(d, "PJRT_Plugin_Attributes", "attributes")


@abi_check("abi.struct_size.smaller_platform_name")
def struct_smaller_platform_name(d: AbiDriver):
    """Client_PlatformName with a struct too small for its outputs: success or INVALID_ARGUMENT."""
    return _too_small(d, "PJRT_Client_PlatformName", "platform_name", client=d.client)


@abi_check("abi.struct_size.zero")
def struct_size_zero(d: AbiDriver):
    """struct_size 0 is success or INVALID_ARGUMENT, never a crash."""
    d.initialize()
    args = d.new_args("PJRT_Plugin_Attributes")
    args.struct_size = 0
    error = d.raw("PJRT_Plugin_Attributes", args)
    expect(error is None or error.code == ErrorCode.INVALID_ARGUMENT,
           "PJRT_Plugin_Attributes with struct_size 0", expected="success or INVALID_ARGUMENT",
           actual=None if error is None else f"{error.code.name}: {error}")


# The other areas register their checks on import.
from pjrtkit.conformance import abi_checks_buffers, abi_checks_exec  # noqa: E402,F401

