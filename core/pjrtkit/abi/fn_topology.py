"""PJRT_TopologyDescription_* and PJRT_Compile (client-free, ahead-of-time compile)."""
from __future__ import annotations

from typing import Any

from pjrtkit.abi import named_values
from pjrtkit.abi.args import Args, data, string
from pjrtkit.abi.errors import pjrt_function
from pjrtkit.abi.fn_client import read_program
from pjrtkit.abi.fn_executable import blob_out
from pjrtkit.abi.handles import EXECUTABLES, TOPOLOGIES, ExecutableRef, TopologyRef, deref
from pjrtkit.abi.named_values import NamedValues
from pjrtkit.abi.slots import backend_for_slot
from pjrtkit.bounded_calls import call_within


def topology_of(a: Args) -> TopologyRef:
    return deref(a.req("topology"), TopologyRef, f"{a.name}.topology")


@pjrt_function("PJRT_TopologyDescription_Create")
def topology_create(slot: int, args: Any) -> None:
    a = Args(args)
    a.require_outputs("topology")
    name = string(a.req("topology_name"), a.req("topology_name_size"), f"{a.name}.topology_name")
    options = named_values.read(a.req("create_options"), a.req("num_options"),
                                f"{a.name}.create_options")
    backend = backend_for_slot(slot)
    topology = call_within(  # the plugin's hook may never return (bounded_calls)
        lambda: backend.topology_description(name, options),
        f"making the {backend.platform_name} topology {name!r} (pjrtkit_make_topology)")
    a.set("topology", TOPOLOGIES.new(TopologyRef(topology)))


@pjrt_function("PJRT_TopologyDescription_Destroy", never_fails=True)
def topology_destroy(args: Any) -> None:
    # A client's own topology is not in TOPOLOGIES (the client owns it): release ignores it.
    TOPOLOGIES.release(Args(args).req("topology"))


@pjrt_function("PJRT_TopologyDescription_PlatformName")
def topology_platform_name(args: Any) -> None:
    a = Args(args)
    ref = topology_of(a)
    chars, size = ref.cstr("platform_name", ref.obj.platform_name)
    a.set_outputs(platform_name=chars, platform_name_size=size)


@pjrt_function("PJRT_TopologyDescription_PlatformVersion")
def topology_platform_version(args: Any) -> None:
    a = Args(args)
    ref = topology_of(a)
    chars, size = ref.cstr("platform_version", ref.obj.platform_version)
    a.set_outputs(platform_version=chars, platform_version_size=size)


@pjrt_function("PJRT_TopologyDescription_GetDeviceDescriptions")
def topology_get_device_descriptions(args: Any) -> None:
    a = Args(args)
    array, count = topology_of(a).description_array()
    a.set_outputs(descriptions=array, num_descriptions=count)


@pjrt_function("PJRT_TopologyDescription_Attributes")
def topology_attributes(args: Any) -> None:
    a = Args(args)
    ref = topology_of(a)
    values = ref.cached("attributes", lambda: NamedValues(ref.obj.attributes))
    a.set_outputs(attributes=values.array, num_attributes=values.count)


@pjrt_function("PJRT_TopologyDescription_Serialize")
def topology_serialize(args: Any) -> None:
    a = Args(args)
    blob_out(a, topology_of(a).obj.serialize(), "serialized_topology",
              "serialized_topology_deleter", "PJRT_SerializedTopology")


@pjrt_function("PJRT_Compile")
def compile_(args: Any) -> None:
    a = Args(args)
    ref = topology_of(a)
    a.require_outputs("executable")
    code, fmt = read_program(a.req("program"), f"{a.name}.program")
    options = data(a.req("compile_options"), a.req("compile_options_size"),
                   f"{a.name}.compile_options")
    # The optional client is not needed: the topology alone decides the compile.
    executable = ref.obj.compile(code, fmt, options)
    a.set("executable", EXECUTABLES.new(ExecutableRef(executable)))
