"""The cpu backend's hook implementations (entry point ``pjrtkit.backends: cpu``)."""
from __future__ import annotations

import numpy as np

from pjrtkit import hookimpl
from pjrtkit.collectives.lockstep import LockstepProgram, usable_cores, with_collectives_on_top
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo import isolation
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.simplify import drop_dead_ops, drop_identity_converts
from pjrtkit.types import Capabilities, CompiledProgram, MultiProcessSupport, PlatformInfo

from pjrtkit_cpu import __version__, blas
from pjrtkit_cpu import fusion
from pjrtkit_cpu.contraction import contract_program, reciprocal_program
from pjrtkit_cpu.dot_layout import swap_transposed_dots
from pjrtkit_cpu.fusion import cache, maybe_fuse
from pjrtkit_cpu.fusion.whole import WholeProgram, fuse_whole_program, whole_program_of
from pjrtkit_cpu.scan_projection import project_scan_inputs
from pjrtkit_cpu.topology import DEVICE_KIND, cpu_topology, device_count, parse_topology_name

PLATFORM = "pjrtkit_cpu"


@hookimpl
def pjrtkit_platform():
    # Host memory and XLA's CPU numerics: lax.platform_dependent takes its cpu branch. A
    # payload is the host array itself (pjrtkit_transfer_to_device below): transfers in may
    # be answered in C from the start.
    return PlatformInfo(name=PLATFORM, version=f"pjrtkit-cpu {__version__}",
                        device_kind=DEVICE_KIND, like_platform="cpu", host_payloads=True)


# -- topology -----------------------------------------------------------------------------------
@hookimpl
def pjrtkit_client_topology(options):
    # Numba's imports (half a second) overlap the parser child's start and first parse: the
    # first compile waited for one after the other.
    isolation.while_the_child_works(cache.prepare_background_compiles)
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
    program = drop_dead_ops(reciprocal_program(swap_transposed_dots(with_collectives_on_top(
        project_scan_inputs(drop_identity_converts(program))))))
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

    __slots__ = ("plan", "uses_blas", "whole", "native_kernel", "lockstep", "copied_outputs")

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
        self.copied_outputs = aliased_outputs(plan)
        # (outputs that must be copied are copied by execute, not by the C path)
        self.native_kernel = (None if whole is None or self.copied_outputs
                              else whole.native_kernel)

    def execute(self, arguments, devices):
        # Kernels follow XLA's semantics for overflow, NaN and division by zero; NumPy's
        # warnings about them are noise, and one errstate per execution is cheaper than one
        # per kernel.
        if self.whole is not None:
            self.whole.called()
        run = self.plan
        with np.errstate(all="ignore"):
            if not self.uses_blas:
                results = [run(*args) for args in arguments]
            else:
                with blas.single_threaded():
                    results = [run(*args) for args in arguments]
        if self.copied_outputs:
            results = [fresh_outputs(outputs, self.copied_outputs) for outputs in results]
        return results

    def execute_launch(self, arguments, devices, launch):
        """Every device of a launch on this thread, in lockstep; None when the plan does not
        allow it (the core then runs ``execute`` per device on threads)."""
        lockstep = self.lockstep
        if lockstep is None:
            return None
        with np.errstate(all="ignore"):  # (each worker thread enters its own: _quiet)
            if not self.uses_blas:
                results = lockstep.run(arguments, launch, _quiet)
            else:
                # (several devices on several cores: the launch's own threads run the dots)
                parallel = len(arguments) > 1 and usable_cores() > 1
                with blas.single_threaded(parallel):
                    results = lockstep.run(arguments, launch, _quiet)
        if results is not None and self.copied_outputs:
            results = [fresh_outputs(outputs, self.copied_outputs) for outputs in results]
        return results


def _quiet():
    return np.errstate(all="ignore")


def aliased_outputs(plan) -> tuple[int, ...]:
    """The positions of the plan's results that would be an argument's array, a constant's or
    an earlier result's (``jit(lambda x: (x, x))``). XLA gives every output a buffer of its own
    (an argument that is not donated never becomes an output), so these are copied: the
    outputs' addresses (``unsafe_buffer_pointer``) differ from the inputs' and from each other,
    and no execution hands out the plan's constant itself."""
    taken = set(plan.arg_slots) | set(plan.constants)
    positions = []
    for position, slot in enumerate(plan.result_slots):
        if slot in taken:
            positions.append(position)
        taken.add(slot)
    return tuple(positions)


def fresh_outputs(outputs, positions: tuple[int, ...]) -> list:
    outputs = list(outputs)
    for position in positions:
        outputs[position] = np.array(outputs[position], copy=True)
    return outputs


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
