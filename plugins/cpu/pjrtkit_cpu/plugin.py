"""The cpu backend's hook implementations (entry point ``pjrtkit.backends: cpu``)."""
from __future__ import annotations

import numpy as np

from pjrtkit import hookimpl
from pjrtkit.collectives.lockstep import LockstepProgram, with_collectives_on_top
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.types import Capabilities, CompiledProgram, MultiProcessSupport, PlatformInfo

from pjrtkit_cpu import __version__, blas
from pjrtkit_cpu import fusion
from pjrtkit_cpu.contraction import contract_program, reciprocal_program
from pjrtkit_cpu.dot_layout import swap_transposed_dots
from pjrtkit_cpu.fusion import maybe_fuse
from pjrtkit_cpu.fusion.whole import WholeProgram, fuse_whole_program, whole_program_of
from pjrtkit_cpu.topology import DEVICE_KIND, cpu_topology, device_count, parse_topology_name

PLATFORM = "pjrtkit_cpu"


@hookimpl
def pjrtkit_platform():
    # Host memory and XLA's CPU numerics: lax.platform_dependent takes its cpu branch.
    return PlatformInfo(name=PLATFORM, version=f"pjrtkit-cpu {__version__}",
                        device_kind=DEVICE_KIND, like_platform="cpu")


# -- topology -----------------------------------------------------------------------------------
@hookimpl
def pjrtkit_client_topology(options):
    return cpu_topology("cpu", device_count(options))


@hookimpl
def pjrtkit_multi_process():
    # Each process has its own host devices (PJRTKIT_CPU_DEVICES); payloads are host arrays,
    # so the host engines carry collectives across processes: gloo first (launcher-free, as
    # XLA's CPU backend), MPI for jobs mpiexec started.
    return MultiProcessSupport(engines=("gloo", "mpi"))


@hookimpl
def pjrtkit_make_topology(name, options):
    count = parse_topology_name(name)
    return None if count is None else cpu_topology(name or "cpu", count)


# -- memory: every memory kind is host RAM, and a payload is a NumPy array --------------------
@hookimpl
def pjrtkit_transfer_to_device(array, device, memory_kind):
    return array


@hookimpl
def pjrtkit_transfer_to_host(payload, device, memory_kind):
    return payload


@hookimpl
def pjrtkit_buffer_address(payload, device, memory_kind):
    return payload.__array_interface__["data"][0]


@hookimpl
def pjrtkit_copy_buffer(payload, src_device, src_memory_kind, dst_device, dst_memory_kind):
    return np.array(payload, copy=True)


# -- compile and execute ------------------------------------------------------------------------
@hookimpl
def pjrtkit_compile(program, options, devices):
    from pjrtkit_cpu.lowering import RULES

    return compile_with_rules(program, RULES)


def compile_with_rules(program, rules) -> CompiledProgram:
    """``program`` fused and planned with ``rules`` (the cpu's ``RULES`` or a registry merged
    from them), as a ``CpuExecutable`` with its cost. Public on purpose: the tpu plugin compiles
    with the cpu's kernels through it (its own dtypes and numerics on top)."""
    program = reciprocal_program(swap_transposed_dots(with_collectives_on_top(program)))
    fused = maybe_fuse(program)
    if fusion.ENABLED:
        fused = fuse_whole_program(fused)
    fused = contract_program(fused)
    plan = build_plan(fused, rules)
    uses_blas = any(op.name in _BLAS_OPS for op in walk_ops(program))
    executable = CpuExecutable(plan, uses_blas, whole_program_of(plan),
                               LockstepProgram.of(plan, fused))
    return CompiledProgram(executable=executable, cost=estimate_cost(program))


_BLAS_OPS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})


class CpuExecutable:
    """A plan plus what running it needs to know, decided at compile time; the core calls
    ``execute`` for every execution (``pjrtkit.types.PluginExecutable``)."""

    __slots__ = ("plan", "uses_blas", "whole", "native_kernel", "lockstep")

    def __init__(self, plan, uses_blas: bool, whole: WholeProgram | None = None,
                 lockstep: LockstepProgram | None = None):
        self.plan = plan
        self.uses_blas = uses_blas
        # Launches over several devices run every device on the calling thread, step by step
        # (pjrtkit.collectives.lockstep), when the plan allows it.
        self.lockstep = lockstep
        # A program that is one fused loop: compiled with a C entry, handed to the core's C
        # execute path (pjrtkit.types.NativeKernel) through ``native_kernel(device)``.
        self.whole = whole
        self.native_kernel = None if whole is None else whole.native_kernel

    def execute(self, arguments, devices):
        # Kernels follow XLA's semantics for overflow, NaN and division by zero; NumPy's
        # warnings about them are noise, and one errstate per execution is cheaper than one
        # per kernel.
        if self.whole is not None:
            self.whole.called()
        run = self.plan
        with np.errstate(all="ignore"):
            if not self.uses_blas:
                return [run(*args) for args in arguments]
            with blas.single_threaded():
                return [run(*args) for args in arguments]

    def execute_launch(self, arguments, devices, launch):
        """Every device of a launch on this thread, in lockstep; None when the plan does not
        allow it (the core then runs ``execute`` per device on threads)."""
        lockstep = self.lockstep
        if lockstep is None:
            return None
        with np.errstate(all="ignore"):  # (each worker thread enters its own: _quiet)
            if not self.uses_blas:
                return lockstep.run(arguments, launch, _quiet)
            with blas.single_threaded():
                return lockstep.run(arguments, launch, _quiet)


def _quiet():
    return np.errstate(all="ignore")


# -- capabilities: read from the rule registry, so they cannot drift from what compiles --------
@hookimpl
def pjrtkit_capabilities():
    from pjrtkit_cpu.lowering import RULES

    # Rules for the plugin's own ops (fused loops) are not StableHLO a program can contain.
    ops = {name for name in RULES.op_names if not name.startswith(f"{PLATFORM}.")}
    return Capabilities(dtypes={dtype.name for dtype in RULES.dtypes}, ops=ops,
                        custom_call_targets=RULES.custom_call_targets,
                        features={"compile_only_topologies", "multiple_devices",
                                  "partitioned_programs"})


# -- what JAX is told ---------------------------------------------------------------------------
@hookimpl
def pjrtkit_jax_lowering_rules():
    from pjrtkit_cpu.jax_rules import jax_lowering_rules

    return jax_lowering_rules()
