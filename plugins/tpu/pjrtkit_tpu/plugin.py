"""The tpu backend's hook implementations (entry point ``pjrtkit.backends: tpu``).

Payloads are NumPy arrays in host memory, as on the cpu plugin, whose transfer hooks, kernels
and JAX lowering rules this module imports; what is the TPU's own is the topology
(``topology``), the HBM of each device (declared in the topology's memory spaces), the element
types (``rules``) and the numerics of float32 contractions (``precision``).
"""
from __future__ import annotations

import dataclasses

from pjrtkit import hookimpl
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.types import Capabilities, MultiProcessSupport, PlatformInfo

# Host-memory payloads and JAX rules exactly as the cpu plugin's: its hook implementations,
# registered here by import.
from pjrtkit_cpu.plugin import (  # noqa: F401 - hook implementations, collected by pluggy
    compile_with_rules,
    pjrtkit_buffer_address,
    pjrtkit_copy_buffer,
    pjrtkit_transfer_to_device,
    pjrtkit_transfer_to_host,
)

from pjrtkit_tpu import __version__
from pjrtkit_tpu.hbm import check_fits, fused_bytes_accessed, program_memory
from pjrtkit_tpu.precision import with_tpu_precision
from pjrtkit_tpu.topology import (configured_layout, multi_host_topology, parse_layout,
                                  slice_topology)

PLATFORM = "pjrtkit_tpu"

# The cpu's JAX rules for primitives JAX lowers on CPU and GPU only: on a TPU, QR with column
# pivoting has no lowering and tridiagonal_solve takes JAX's generic rule (no pivoting, no
# perturb_singular), so pjrtkit_tpu leaves them out.
NOT_ON_TPU = frozenset({"geqp3", "tridiagonal_solve"})


@hookimpl
def pjrtkit_jax_lowering_rules():
    from pjrtkit_cpu.jax_rules import jax_lowering_rules

    return [rule for rule in jax_lowering_rules() if rule.primitive.name not in NOT_ON_TPU]


@hookimpl
def pjrtkit_platform():
    # like_platform "tpu": lax.platform_dependent takes a program's tpu branch, as a TPU does.
    # Its primitives are lowered with pjrtkit_tpu's rules; one with no such rule (a Mosaic
    # kernel) fails at lowering, naming the primitive and the platform.
    return PlatformInfo(name=PLATFORM, version=f"pjrtkit-tpu {__version__}",
                        device_kind=configured_layout().generation.device_kind,
                        like_platform="tpu", device_mesh_like="tpu")


# -- topology -----------------------------------------------------------------------------------
@hookimpl
def pjrtkit_client_topology(options):
    num_nodes = options.get("num_nodes")
    if isinstance(num_nodes, int) and num_nodes > 1:  # one process per host of the slice
        return multi_host_topology(configured_layout(), num_nodes)
    return slice_topology(configured_layout(), live=True)


@hookimpl
def pjrtkit_multi_process():
    # A multi-host slice: every process computes the whole slice as libtpu lays it out, so
    # the topology is global (the core checks that the processes agree). Payloads are host
    # arrays, as on the cpu plugin: the host engines carry collectives between hosts.
    return MultiProcessSupport(engines=("gloo", "mpi"), global_topology=True)


@hookimpl
def pjrtkit_make_topology(name, options):
    if name in ("", "tpu", PLATFORM):
        layout = configured_layout()
        return slice_topology(parse_layout(layout.name, options) if options else layout,
                              live=False)
    if ":" not in name:
        return None
    return slice_topology(parse_layout(name, options), live=False)


# -- compile ------------------------------------------------------------------------------------
@hookimpl
def pjrtkit_compile(program, options, devices):
    from pjrtkit_tpu.rules import RULES, check_tpu_dtypes

    check_tpu_dtypes(program)
    # Before any kernel is built: a program that cannot fit in HBM fails as libtpu's does.
    memory = program_memory(program)
    check_fits(memory, devices, f"program {program.entry!r}")
    compiled = compile_with_rules(with_tpu_precision(program), RULES)
    # The cost is the program's, not the bf16 passes the kernels run for it; bytes are counted
    # after fusion, as XLA's TPU cost analysis counts them.
    cost = dataclasses.replace(estimate_cost(program),
                               bytes_accessed=float(fused_bytes_accessed(program)))
    return dataclasses.replace(compiled, cost=cost,
                               temp_bytes=memory.temp_bytes,
                               argument_bytes=memory.argument_bytes,
                               output_bytes=memory.output_bytes)


# -- capabilities -------------------------------------------------------------------------------
@hookimpl
def pjrtkit_capabilities():
    from pjrtkit_tpu.rules import RULES

    ops = {name for name in RULES.op_names if not name.startswith("pjrtkit_cpu.")}
    return Capabilities(dtypes={dtype.name for dtype in RULES.dtypes}, ops=ops,
                        custom_call_targets=RULES.custom_call_targets,
                        features={"compile_only_topologies", "multiple_devices",
                                  "partitioned_programs", "bf16_contractions"})
