"""THE contract between the pjrtkit core and a device plugin.

Every C call jaxlib makes that needs the device is answered by one of these hooks, called by
the core through ``pjrtkit.backend.Backend`` (the one typed facade) with keyword arguments.
A hook raising ``pjrtkit.errors.PjrtError`` (or a subclass) becomes a PJRT_Error with that code;
any other exception becomes INTERNAL naming the hook and the backend. A plugin never sees cffi,
threads or events: the core owns those.

Implement a hook by decorating a function of the plugin module with ``pjrtkit.hookimpl``; the
module is named by an entry point in the group ``pjrtkit.backends``. The contract is checked
when a backend loads: a ``@hookimpl`` whose name is not a hook below (a misspelling), or whose
arguments are not the hook's, keeps the backend from loading with an error naming both.

Running a compiled program is not a hook: ``pjrtkit_compile`` returns an object with an
``execute`` method (``pjrtkit.types.PluginExecutable``) that the core calls directly.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pluggy

from pjrtkit._markers import PROJECT
from pjrtkit.stablehlo.ir import Program
from pjrtkit.types import (Capabilities, CompiledProgram, CompileOptions, DeviceSpec,
                           JaxLoweringRule, MemoryStats, MultiProcessSupport, PlatformInfo,
                           PrimitiveSet, Topology)

# The spec marker stays private to this module: only the contract declares hooks.
_hookspec = pluggy.HookspecMarker(PROJECT)

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
        options: the NamedValues jaxlib passed to PJRT_Client_Create, as a dict. Under
            ``jax.distributed`` they include ``node_id`` (this process) and ``num_nodes``
            (and ``partition_index`` when set); see ``pjrtkit_multi_process``.

    Returns:
        ``Topology`` whose devices all have ``process_index == 0`` and distinct ids and
        ``local_hardware_id`` s (a plugin with ``MultiProcessSupport(global_topology=True)``,
        in a job of several processes: every process's devices, each with its
        ``process_index``, ``local_hardware_id`` numbered within its process). Memory sizes
        are declared here: a memory space with ``MemorySpaceSpec(kind, capacity_bytes=N)`` is
        the device's own memory of N bytes (a TPU's HBM), counted per device; one with
        ``capacity_bytes=None`` is host RAM, shared by all such spaces of the client in one
        pool limited to the host's physical memory.
        The core enforces both (RESOURCE_EXHAUSTED past them; ``PJRTKIT_<BACKEND>_MEMORY_LIMIT``
        lowers each device's default memory further); memory is counted, never reserved.

    Raises:
        InvalidArgument for bad options (e.g. a malformed device count); the client is not
        created and JAX reports the error.
        FailedPrecondition when this machine cannot run the backend (no GPU, no driver): the
        backend is then listed as ``unavailable`` with the message (``pjrtkit list``), not
        registered with JAX, and not warned about at JAX start-up (any other exception is a
        broken backend: ``failed``, logged as a warning).

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_client_topology(options):
            n = int(os.environ.get("PJRTKIT_CPU_DEVICES", "1"))
            return Topology("cpu", tuple(DeviceSpec(id=i, kind="cpu", local_hardware_id=i)
                                         for i in range(n)))
    """


@_hookspec(firstresult=True)
def pjrtkit_multi_process() -> MultiProcessSupport | None:
    """Whether and how the backend runs across processes (``jax.distributed.initialize()``).

    Returns:
        ``MultiProcessSupport(engines, global_topology)``, or None (the built-in answer): the
        backend is single-process, and a client asked for with ``num_nodes > 1`` fails at
        creation with FAILED_PRECONDITION saying so. The core does the rest for every plugin:
        the topology exchange over the PJRT key-value store, global device ids, process
        indices, and collectives across processes on the engine ``PJRTKIT_COLLECTIVES``
        picks among ``engines`` (``pjrtkit.distributed``).

    Raises:
        Nothing expected; an exception becomes INTERNAL at client creation for a job of
        several processes (a single-process client never asks).

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_multi_process():
            return MultiProcessSupport(engines=("gloo", "mpi"))
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
        payload: what ``pjrtkit_transfer_to_device`` or an executable's ``execute`` returned.
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
def pjrtkit_buffer_address(payload, device: DeviceSpec, memory_kind: str) -> int | None:
    """The address of a payload's first element in its device's memory
    (PJRT_Buffer_UnsafePointer, ``jax.Array.unsafe_buffer_pointer()``). JAX users compare
    addresses to tell a view from a copy; pjrtkit never hands out a view of the memory
    through it (``PJRT_Buffer_IsOnCpu`` stays false), so a plugin may write its payloads in
    place as before.

    Args:
        payload: the payload (ready).
        device, memory_kind: where it lives.

    Returns:
        The address as an int, the same for as long as the payload lives; None when the
        plugin has no address to give (the core then answers UNIMPLEMENTED, as it does
        when no plugin implements the hook).

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_buffer_address(payload, device, memory_kind):
            return payload.__array_interface__["data"][0]
    """


@_hookspec(firstresult=True)
def pjrtkit_memory_stats(device: DeviceSpec, tracked: MemoryStats) -> MemoryStats | None:
    """Memory statistics of a device (PJRT_Device_MemoryStats, ``device.memory_stats()``).

    Args:
        device: the device.
        tracked: what the core counted itself for the device's default memory: live bytes,
            peak, number of allocations, largest allocation, the limit the core enforces
            (``bytes_limit``: the declared capacity, the host pool's or the user's limit,
            the smallest) and the shared host pool's use (``pool_bytes``, ``peak_pool_bytes``).

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
        ``CompiledProgram`` holding the plugin's executable and its cost estimate. The
        executable is any object with ``execute(arguments, devices)`` (see
        ``pjrtkit.types.PluginExecutable``): ``arguments[d][i]`` is the payload of argument
        ``i`` on ``devices[d]``, and it returns ``outputs[d][o]``, one payload per output per
        device. The core calls it for every execution, inline on the caller's thread when the
        program is cheap, else on the client's worker thread, and completes the events; an
        exception it raises reaches JAX through the outputs' events (a PjrtError with its
        code, anything else as INTERNAL naming the executable's type). Two optional methods
        of the executable make executions cheaper, both documented on
        ``pjrtkit.types.PluginExecutable``: ``native_kernel(device)`` hands a C function for
        the whole program to the core's C execute path (``pjrtkit.types.NativeKernel``: calls
        answered in C without entering Python), and ``execute_launch(arguments, devices,
        launch)`` runs a launch over several devices itself (in lockstep,
        ``pjrtkit.collectives.lockstep``).

    Raises:
        Unimplemented naming the op and dtype for anything the backend lacks (so the failure
        happens at compile time, not at execute time); InvalidArgument for a malformed program.

    firstresult: yes.

    Example::

        class Executable:
            def __init__(self, plan):
                self.plan = plan

            def execute(self, arguments, devices):
                return [self.plan(*args) for args in arguments]

        @hookimpl
        def pjrtkit_compile(program, options, devices):
            return CompiledProgram(Executable(build_plan(program, RULES)))
    """


@_hookspec(firstresult=True)
def pjrtkit_primitive_set() -> PrimitiveSet | None:
    """Declare the primitive set the backend's compiler implements, so that the core rewrites
    what a program holds beyond it into that set before ``pjrtkit_compile`` (complex numbers
    onto pairs of reals, float8/float4/int2/int4 onto wider types, fft and linear algebra onto
    loops of dots, ...: ``pjrtkit.expansions``). A backend's own rule always wins: only ops the
    set does not implement are rewritten. Called once per backend, on its first compile.

    Returns:
        ``PrimitiveSet(ops, dtypes, custom_call_targets)``, usually read off the backend's
        ``LoweringRegistry``; or None (the built-in answer): the backend takes programs as
        JAX wrote them and nothing is rewritten.

    Raises:
        Nothing in practice; an error here fails every compile of the backend (INTERNAL).

    firstresult: yes.

    What is not in the set and has no expansion stays in the program, and the backend's
    compile answers UNIMPLEMENTED for it as before. ``pjrtkit_capabilities`` answers are
    widened by what the expansions reach (``Backend.capabilities``).

    Example::

        @hookimpl
        def pjrtkit_primitive_set():
            return PrimitiveSet(ops=RULES.op_names, dtypes={"float32", "int32", "bool"},
                                custom_call_targets=RULES.custom_call_targets)
    """


# ---------------------------------------------------------------------------------------------
# Capabilities: what the backend says it supports, read by tools instead of its internals.
# ---------------------------------------------------------------------------------------------


@_hookspec(firstresult=True)
def pjrtkit_capabilities() -> Capabilities:
    """Declare the dtypes, ops, custom-call targets and optional features the backend supports.

    The conformance suite reads this to tell a missing capability (UNSUPPORTED, expected from a
    backend that does not declare it) from a broken one (FAIL: declared, yet UNIMPLEMENTED or
    wrong). Declare only what ``pjrtkit_compile`` really accepts.

    Returns:
        ``Capabilities``; a field left ``None`` means "not declared". The built-in answer
        (when a plugin does not implement this hook) declares nothing.

    Raises:
        Nothing in practice; an error here is INTERNAL for whoever asked.

    firstresult: yes.

    Example::

        @hookimpl
        def pjrtkit_capabilities():
            return Capabilities(dtypes={"float32", "int32"}, ops=set(RULES.rules),
                                custom_call_targets=set(), features={"multiple_devices"})
    """


# ---------------------------------------------------------------------------------------------
# JAX lowering rules: what a plugin adds to JAX for its platform. Some JAX primitives (eigh,
# svd, eig, schur, hessenberg, tridiagonal, ...) have lowering rules only for JAX's own
# platforms; on any other platform JAX fails before the program reaches the plugin.
# ---------------------------------------------------------------------------------------------


@_hookspec
def pjrtkit_jax_lowering_rules() -> Iterable[JaxLoweringRule]:
    """JAX lowering rules for primitives that have none on this platform.

    The core registers each with ``jax.interpreters.mlir.register_lowering(primitive, rule,
    platform=<the platform>)`` right after the platform registers with JAX (JAX refuses rules
    for a platform it does not know yet). A rule usually emits a ``stablehlo.custom_call`` to a
    target the plugin's compiler implements (``pjrtkit_<name>``), so the program carries the
    operation to ``pjrtkit_compile`` whole. Called once per process, when JAX initializes its
    plugins; JAX may be imported here.

    Returns:
        An iterable of ``JaxLoweringRule(primitive, rule)``; empty (or no implementation) when
        the platform needs none. Each primitive at most once over all implementations.

    Raises:
        Nothing expected. A record that is not a ``JaxLoweringRule``, or a primitive named
        twice, is InvalidArgument; the core logs it and registers the platform without rules,
        so only programs using those primitives fail.

    firstresult: no (every implementation contributes; the facade flattens the answers).

    Example::

        @hookimpl
        def pjrtkit_jax_lowering_rules():
            from jax.lax import linalg
            return [JaxLoweringRule(linalg.eigh_p, lower_eigh_to_custom_call)]
    """
