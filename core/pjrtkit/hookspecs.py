"""THE contract between the pjrtkit core and a device plugin.

Every C call jaxlib makes that needs the device is answered by one of these hooks, called by
the core through ``pjrtkit.backend.Backend`` (the one typed facade) with keyword arguments.
A hook raising ``pjrtkit.errors.PjrtError`` (or a subclass) becomes a PJRT_Error with that code;
any other exception becomes INTERNAL naming the hook and the backend. A plugin never sees cffi,
threads or events: the core owns those.

Implement a hook by decorating a function of the plugin module with ``pjrtkit.hookimpl``; the
module is named by an entry point in the group ``pjrtkit.backends``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pjrtkit._markers import _hookspec
from pjrtkit.stablehlo.ir import Program
from pjrtkit.types import (CompiledProgram, CompileOptions, DeviceSpec, MemoryStats, PlatformInfo,
                           Topology)

# ---------------------------------------------------------------------------------------------
# Topology: who the platform is, which devices a live client has, and compile-only topologies.
# ---------------------------------------------------------------------------------------------


@_hookspec(firstresult=True)
def pjrtkit_platform() -> PlatformInfo:
    """Name the platform. Called once when the backend is loaded.

    Returns:
        ``PlatformInfo(name, version, device_kind, like_platform=None)``; ``name`` is the
        JAX platform name (``"pjrtkit_cpu"``) and becomes the PJRT platform name;
        ``like_platform`` (``"cpu"``, ...) picks the ``lax.platform_dependent`` branch.

    Raises:
        Nothing in practice; an error here keeps the backend from registering with JAX.

    firstresult: yes (exactly one plugin names the platform).

    Example::

        @hookimpl
        def pjrtkit_platform():
            return PlatformInfo(name="pjrtkit_cpu", version="0.1.0", device_kind="cpu")
    """


@_hookspec(firstresult=True)
def pjrtkit_client_topology(options: Mapping[str, Any]) -> Topology:
    """The devices a live client addresses (PJRT_Client_Create, PJRT_Client_Devices).

    This is the running process's hardware, not a what-if: for compile-only topologies see
    ``pjrtkit_make_topology``.

    Args:
        options: the NamedValues jaxlib passed to PJRT_Client_Create, as a dict.

    Returns:
        ``Topology`` whose devices all have ``process_index == 0`` and distinct ids and
        ``local_hardware_id`` s.

    Raises:
        InvalidArgument for bad options (e.g. a malformed device count); the client is not
        created and JAX reports the error.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_client_topology(options):
            n = int(os.environ.get("PJRTKIT_CPU_DEVICES", "1"))
            return Topology("cpu", tuple(DeviceSpec(id=i, kind="cpu", local_hardware_id=i)
                                         for i in range(n)))
    """


@_hookspec(firstresult=True)
def pjrtkit_make_topology(name: str, options: Mapping[str, Any]) -> Topology | None:
    """A compile-only topology by name, for ahead-of-time compilation
    (``jax.experimental.topologies.get_topology_desc(name, platform=...)``, which reaches
    PJRT_TopologyDescription_Create). No device needs to exist.

    Args:
        name: the topology name the user asked for (for a cpu backend e.g. ``"cpu:4"``; ``""``
            means the backend's default).
        options: NamedValues from the caller, as a dict.

    Returns:
        The ``Topology``, or None when this plugin does not know ``name`` (the core then
        answers INVALID_ARGUMENT naming the backend and the name).

    Raises:
        InvalidArgument for bad options.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_make_topology(name, options):
            if not name.startswith("cpu:"):
                return None
            n = int(name[4:])
            return Topology(name, tuple(DeviceSpec(id=i, kind="cpu") for i in range(n)))
    """


# ---------------------------------------------------------------------------------------------
# Memory spaces: storing arrays in a device's memories, reading them back, statistics.
# A "payload" is whatever the plugin stores for one buffer (a NumPy array for the cpu plugin,
# a device pointer for a GPU); the core keeps shape and dtype and never looks inside.
# ---------------------------------------------------------------------------------------------


@_hookspec(firstresult=True)
def pjrtkit_transfer_to_device(array, device: DeviceSpec, memory_kind: str) -> Any:
    """Store a host array in ``memory_kind`` of ``device`` (PJRT_Client_BufferFromHostBuffer).

    Args:
        array: an owned, C-contiguous NumPy array (the core already copied the caller's data,
            honouring strides); the plugin may keep it.
        device: the target device.
        memory_kind: one of the device's memory space kinds.

    Returns:
        The payload.

    Raises:
        ResourceExhausted when the memory is full; Unimplemented for a dtype the backend
        cannot store.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_transfer_to_device(array, device, memory_kind):
            return array
    """


@_hookspec(firstresult=True)
def pjrtkit_transfer_to_host(payload, device: DeviceSpec, memory_kind: str):
    """Read a payload back as a NumPy array (PJRT_Buffer_ToHostBuffer).

    Args:
        payload: what ``pjrtkit_transfer_to_device`` or ``pjrtkit_execute`` returned.
        device, memory_kind: where the payload lives.

    Returns:
        A NumPy array of the buffer's shape and dtype; the core copies it into the caller's
        memory and never writes to it.

    Raises:
        Any PjrtError; it completes the transfer's event with that error.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_transfer_to_host(payload, device, memory_kind):
            return payload
    """


@_hookspec(firstresult=True)
def pjrtkit_copy_buffer(payload, src_device: DeviceSpec, src_memory_kind: str,
                        dst_device: DeviceSpec, dst_memory_kind: str) -> Any:
    """Copy a payload to another device or memory space (PJRT_Buffer_CopyToDevice,
    PJRT_Buffer_CopyToMemory). The result must not share storage that either side may later
    write (donation may reuse a payload in place).

    Args:
        payload: the source payload (ready).
        src_device, src_memory_kind, dst_device, dst_memory_kind: from where to where.

    Returns:
        The new payload.

    Raises:
        ResourceExhausted when the destination memory is full.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_copy_buffer(payload, src_device, src_memory_kind, dst_device, dst_memory_kind):
            return payload.copy()
    """


@_hookspec(firstresult=True)
def pjrtkit_memory_stats(device: DeviceSpec, tracked: MemoryStats) -> MemoryStats | None:
    """Memory statistics of a device (PJRT_Device_MemoryStats, ``device.memory_stats()``).

    Args:
        device: the device.
        tracked: what the core counted itself for the device's default memory: live bytes,
            peak, number of allocations, largest allocation, and the capacity the plugin
            declared in its ``MemorySpaceSpec``.

    Returns:
        The stats to report (usually ``tracked``, possibly refined with what the hardware
        says), or None to report ``tracked`` unchanged.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_memory_stats(device, tracked):
            return dataclasses.replace(tracked, bytes_limit=16 << 30)
    """


# ---------------------------------------------------------------------------------------------
# Compile: a StableHLO program in, the plugin's executable out. All decoding, shape work and
# kernel choice happen here, never at execute time.
# ---------------------------------------------------------------------------------------------


@_hookspec(firstresult=True)
def pjrtkit_compile(program: Program, options: CompileOptions,
                    devices: Sequence[DeviceSpec]) -> CompiledProgram:
    """Compile a program for ``devices`` (PJRT_Client_Compile, and PJRT_Compile against a
    compile-only topology).

    Args:
        program: the loaded StableHLO module (``pjrtkit.stablehlo.ir``).
        options: replicas, partitions, device assignment.
        devices: the devices of the assignment, in replica-major order.

    Returns:
        ``CompiledProgram`` holding the plugin's executable and its cost estimate.

    Raises:
        Unimplemented naming the op and dtype for anything the backend lacks (so the failure
        happens at compile time, not at execute time); InvalidArgument for a malformed program.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_compile(program, options, devices):
            return CompiledProgram(build_plan(program, RULES))
    """


# ---------------------------------------------------------------------------------------------
# Execute: run an executable on argument payloads. The core decides where (inline on the
# caller's thread when cheap, else on the client's worker thread) and completes the events.
# ---------------------------------------------------------------------------------------------


@_hookspec(firstresult=True)
def pjrtkit_execute(executable: Any, arguments: Sequence[Sequence[Any]],
                    devices: Sequence[DeviceSpec]) -> Sequence[Sequence[Any]]:
    """Run ``executable`` once per device.

    Args:
        executable: ``CompiledProgram.executable`` from ``pjrtkit_compile``.
        arguments: ``arguments[d][i]`` is the payload of argument ``i`` on ``devices[d]``; all
            are ready (the core waits for producers first).
        devices: where each argument list lives.

    Returns:
        ``outputs[d][o]``: one payload per output per device, with the shapes and dtypes the
        program declares.

    Raises:
        Any PjrtError; the core delivers it through the outputs' events, so JAX reports it
        when the results are used.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_execute(executable, arguments, devices):
            return [list(executable(*args)) for args in arguments]
    """
