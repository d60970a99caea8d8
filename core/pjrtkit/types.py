"""Typed records the hooks exchange. Plain frozen dataclasses: no C, and no JAX objects except
the JAX lowering rules a plugin contributes (``JaxLoweringRule``).

A plugin builds these; the core turns them into runtime objects and PJRT handles.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

# The memory kinds JAX knows; every device of a pjrtkit backend has exactly these three.
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")

AttributeValue = int | float | bool | str | tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PlatformInfo:
    """Who the backend is. ``name`` is the JAX platform (``pjrtkit_cpu``) and must equal the
    PJRT platform name: JAX picks lowering rules by it. ``like_platform`` is the built-in JAX
    platform (``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``) whose ``lax.platform_dependent``
    branch the backend takes, or None for the default branch (``pjrtkit.jax_platform_like``).
    ``device_mesh_like`` (``"tpu"`` or None): ``jax.experimental.mesh_utils.create_device_mesh``
    arranges the devices by their coords and core_on_chip as it does that platform's
    (``pjrtkit.jax_compat.extend_device_mesh``); None: in device-list order.
    ``host_payloads``: the plugin's payload of an array in a device's default memory is that
    host array itself (``pjrtkit_transfer_to_device`` keeps the NumPy array it is given), so
    the core's C layer may answer ``PJRT_Client_BufferFromHostBuffer`` into those memories
    from the client's start, without entering Python (``abi/native.open_host_memories``)."""

    name: str
    version: str
    device_kind: str
    like_platform: str | None = None
    device_mesh_like: str | None = None
    host_payloads: bool = False


@dataclasses.dataclass(frozen=True)
class MemorySpaceSpec:
    """One memory space of a device, and how much it holds: the mechanism by which a plugin
    sizes its memories (a TPU plugin declares each device's HBM here).

    ``capacity_bytes`` N: the space is the device's own memory of N bytes, counted per device
    (allocations past N are RESOURCE_EXHAUSTED). None: the space is host RAM and shares one pool,
    the host's physical memory, with every other such space of the client (all devices of a cpu
    client together). ``PJRTKIT_<BACKEND>_MEMORY_LIMIT`` lowers every device's default memory
    further. See ``pjrtkit.runtime.memory_limits``.
    """

    kind: str
    capacity_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One device of a topology.

    ``id`` is global and unique in the topology; ``local_hardware_id`` is the index among this
    process's devices. ``coords`` and ``core_on_chip`` are what ``jax.experimental.mesh_utils``
    reads; ``attributes`` are published through PJRT_DeviceDescription_Attributes.
    """

    id: int
    kind: str
    process_index: int = 0
    local_hardware_id: int = 0
    coords: tuple[int, ...] = (0, 0, 0)
    core_on_chip: int = 0
    memory_spaces: tuple[MemorySpaceSpec, ...] = tuple(MemorySpaceSpec(k) for k in MEMORY_KINDS)
    default_memory_kind: str = "device"
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)

    def memory_space(self, kind: str) -> MemorySpaceSpec:
        for space in self.memory_spaces:
            if space.kind == kind:
                return space
        raise KeyError(kind)


@dataclasses.dataclass(frozen=True)
class Topology:
    """A set of devices: either a live client's own devices (``pjrtkit_client_topology``) or a
    compile-only description for ahead-of-time compilation (``pjrtkit_make_topology``)."""

    name: str
    devices: tuple[DeviceSpec, ...]
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    """PJRT_Device_MemoryStats. ``None`` fields are reported as not set."""

    bytes_in_use: int
    peak_bytes_in_use: int | None = None
    num_allocs: int | None = None
    largest_alloc_size: int | None = None
    bytes_limit: int | None = None
    pool_bytes: int | None = None  # in use in the pool the memory shares (all host memories)
    peak_pool_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """The parts of xla::CompileOptionsProto a backend acts on; ``serialized`` keeps the rest."""

    num_replicas: int
    num_partitions: int
    device_assignment: tuple[tuple[int, ...], ...] | None  # [replica][partition] -> device id
    use_spmd_partitioning: bool
    serialized: bytes = dataclasses.field(default=b"", repr=False)


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    """Static cost of one execution, estimated at compile time."""

    flops: float = 0.0
    bytes_accessed: float = 0.0
    transcendentals: float = 0.0


@runtime_checkable
class PluginExecutable(Protocol):
    """The plugin's compiled program, as ``CompiledProgram.executable`` carries it.

    The core runs a program by calling ``execute`` on this object directly, not through a hook:
    it is called for every execution (a jitted call in a loop), where pluggy's dispatch would
    cost as much as a small program takes, and the object already knows its own plan.
    """

    def execute(self, arguments: Sequence[Sequence[Any]],
                devices: Sequence[DeviceSpec]) -> Sequence[Sequence[Any]]:
        """Run the program once per device.

        ``arguments[d][i]`` is the payload of argument ``i`` on ``devices[d]`` (all ready: the
        core waits for their producers first). Returns ``outputs[d][o]``, one payload per
        output per device, with the shapes and dtypes the program declares. A ``PjrtError``
        keeps its code; any other exception becomes INTERNAL naming this object's type; either
        reaches JAX through the outputs' events.
        """

    # Optional: ``native_kernel(device: DeviceSpec) -> NativeKernel | None``, the plugin's hand-
    # over to the core's C execute path (see ``NativeKernel``). An executable without this
    # method (or with it None) is always run through ``execute``.
    #
    # Optional: ``execute_launch(arguments, devices, launch) -> outputs | None``, one launch
    # over several devices (``arguments[d]`` for ``devices[d]``, the position d in the launch
    # ``launch``, a ``pjrtkit.collectives.launch.Launch``) run by the plugin itself, for
    # instance every device on the calling thread in lockstep
    # (``pjrtkit.collectives.lockstep.LockstepProgram``); None: not this program, and the core
    # runs ``execute`` once per device, each on its own thread.


@dataclasses.dataclass(frozen=True)
class NativeKernel:
    """A C function that runs a whole program on one device, so that the core can answer
    ``PJRT_LoadedExecutable_Execute`` in C without entering Python (the C execute path, see
    ARCHITECTURE.md). A plugin hands it over through its executable's optional method
    ``native_kernel(device)`` (``PluginExecutable``): the core asks at executions it serves in
    Python, one device at a time, until it gets one; None means "not (yet)": the cpu plugin
    answers None until its Numba ``cfunc`` is compiled. Asked again after every answer of None,
    so a method that is cheap to call is expected (an attribute read).

    The core uses it only for executables on one device that donate nothing, whose arguments
    and outputs are arrays (no tokens) of rank <= 8, while C answers are on (not under
    PJRTKIT_TRACE_ABI or PJRTKIT_PROFILE), and only with ready arguments of that device whose
    contents it may read (``argument_address``); anything else keeps the ordinary path.

    ``address``: ``int kernel(void* const* arguments, void* const* outputs, void* context)``,
    arguments and outputs in the program's order, each the address of its dense row-major
    contents; it returns 0 on success. Anything else is an error: the core discards the
    outputs and runs the program through ``execute`` instead, which reports it. It must not
    keep the pointers, must not write arguments, must be safe to call from any thread
    concurrently and must not need the GIL (a Numba ``cfunc`` with ``nopython``).
    ``context``: passed through (an address; 0 for none). ``keepalive``: what keeps the code
    and the context alive (a Numba cfunc, arrays of constants); held as long as the executable.
    ``argument_address(payload)``: the address of a payload's dense row-major contents in the
    kernel's address space, or None when it has none (a strided view): such an argument keeps
    that call on the ordinary path. Outputs are host memory the core allocates (64-byte
    aligned) and counts in the device memory's ledger; the payload of one, when Python needs
    it, is ``pjrtkit_transfer_to_device`` of a NumPy array over that memory (the cpu plugin's
    payload is that array). A plugin whose outputs cannot be host memory (a GPU's) needs an
    allocator in this record first; not there yet.
    """

    address: int
    argument_address: Callable[[Any], int | None]
    context: int = 0
    keepalive: Any = None


@dataclasses.dataclass(frozen=True)
class CompiledProgram:
    """What ``pjrtkit_compile`` returns.

    ``executable`` is the plugin's own object (a ``PluginExecutable``: the core calls its
    ``execute`` and otherwise never looks inside). ``cost`` feeds
    PJRT_Executable_GetCostAnalysis and the core's choice of running a cheap program inline on
    the caller's thread. ``temp_bytes`` feeds PJRT_Executable_GetCompiledMemoryStats, and so do
    ``argument_bytes`` / ``output_bytes`` when the plugin counts them itself (a TPU's tile
    padding); None: the core counts the arrays' bytes.
    """

    executable: PluginExecutable
    cost: CostEstimate = CostEstimate()
    code_size_bytes: int = 0
    temp_bytes: int = 0
    argument_bytes: int | None = None
    output_bytes: int | None = None


# Optional features a plugin may declare in ``Capabilities.features``; the conformance suite
# reads them to know what to expect instead of guessing.
FEATURES = frozenset({
    "compile_only_topologies",  # pjrtkit_make_topology answers for named AOT topologies
    "multiple_devices",         # a client may have more than one device
    "partitioned_programs",     # programs sharded over several devices (num_partitions > 1)
    # float32 dot/convolution at DEFAULT precision computed from bfloat16 operands (a TPU's
    # one MXU pass): the JAX layer compares the float results of programs with contractions
    # at bfloat16's tolerance (pjrtkit.testing.tolerances.REDUCED_PRECISION_DTYPES)
    "bf16_contractions",
})


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend says it supports (``pjrtkit_capabilities``), so that tools (the
    conformance suite, error messages, ``pjrtkit info``) never import a plugin's internals.

    ``None`` means "not declared" (a tool then learns by trying); an empty set means "none".
    ``dtypes`` are NumPy dtype names (``"float32"``, ``"bfloat16"``); ``ops`` are StableHLO op
    names the compiler has a rule for (``"stablehlo.add"``); ``custom_call_targets`` are the
    ``stablehlo.custom_call`` targets it runs; ``features`` are names from ``FEATURES``.
    """

    dtypes: frozenset[str] | None = None
    ops: frozenset[str] | None = None
    custom_call_targets: frozenset[str] | None = None
    features: frozenset[str] = frozenset()

    def __post_init__(self):
        # Accept any iterable (a tuple, a dict's keys) and keep an immutable, hashable set.
        for field in ("dtypes", "ops", "custom_call_targets", "features"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, frozenset):
                object.__setattr__(self, field, frozenset(value))


# Collective engines a plugin may name in ``MultiProcessSupport.engines``
# (``pjrtkit.distributed.engines``): gloo through torch.distributed, MPI through mpi4py, NCCL and
# RCCL for device memory.
COLLECTIVE_ENGINES = ("gloo", "mpi", "nccl", "rccl")


@dataclasses.dataclass(frozen=True)
class MultiProcessSupport:
    """How a backend runs across processes under ``jax.distributed`` (``pjrtkit_multi_process``).

    ``engines``: the collective engines its programs may use across processes, preferred first
    (names from ``COLLECTIVE_ENGINES``); ``PJRTKIT_COLLECTIVES`` picks one of them. Payloads
    must be host arrays for the host engines (gloo, mpi).
    ``global_topology``: False (a cpu) -- ``pjrtkit_client_topology`` returns this process's
    devices and the core gathers every process's over the key-value store, numbering devices
    process by process; True (a virtual TPU slice) -- it returns every device of every process,
    ``process_index`` set, from the options ``node_id`` and ``num_nodes``, and the core checks
    that all processes report the same devices.
    """

    engines: tuple[str, ...]
    global_topology: bool = False

    def __post_init__(self):
        object.__setattr__(self, "engines", tuple(self.engines))
        unknown = [e for e in self.engines if e not in COLLECTIVE_ENGINES]
        if not self.engines or unknown:
            raise ValueError(f"MultiProcessSupport.engines {self.engines!r}: expected one or "
                             f"more of {COLLECTIVE_ENGINES}")


@dataclasses.dataclass(frozen=True)
class PrimitiveSet:
    """What a backend's compiler implements itself (``pjrtkit_primitive_set``); the core
    rewrites everything else a program holds into this set before ``pjrtkit_compile`` sees it
    (``pjrtkit.expansions``).

    ``ops``: StableHLO op names with a rule (``"stablehlo.add"``; ``stablehlo.constant``,
    ``func.call`` and the terminators need not be named). ``custom_call_targets``: the
    ``stablehlo.custom_call`` targets with a rule. ``dtypes``: NumPy names of the element
    types its rules compute on (``"float32"``). An op is implemented when its name (or its
    custom-call target) is declared and every operand and result has a declared element type.

    Buffers of every PJRT type are stored as bytes whatever ``dtypes`` says: arguments and
    results of a type outside it (complex64, float8_e4m3fn, int4, ...) reach the backend as
    its buffers, and the core's rewrite reinterprets them with ``stablehlo.bitcast_convert``
    to and from a declared type (complex64 <-> float32[..., 2], float8 <-> uint8, int4 <->
    int8), which the backend's bitcast rule must accept for those types.
    """

    ops: frozenset[str]
    dtypes: frozenset[str]
    custom_call_targets: frozenset[str] = frozenset()

    def __post_init__(self):
        for field in ("ops", "dtypes", "custom_call_targets"):
            value = getattr(self, field)
            if not isinstance(value, frozenset):
                object.__setattr__(self, field, frozenset(value))


@dataclasses.dataclass(frozen=True)
class JaxLoweringRule:
    """A JAX lowering rule a plugin contributes for its own platform (``pjrtkit_jax_lowering_rules``).

    ``primitive`` is a JAX primitive (``jax.lax.linalg.eigh_p``) and ``rule`` a JAX lowering
    rule, ``rule(ctx, *operands, **params) -> results``, as ``jax.interpreters.mlir`` takes them.
    These are the one record that holds JAX objects, because what it describes is a piece of
    JAX; this module imports nothing of JAX to hold them. The core registers each rule with
    ``mlir.register_lowering(primitive, rule, platform=<the backend's platform>)``.
    """

    primitive: Any
    rule: Callable[..., Any]
