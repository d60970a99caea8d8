"""A deliberately faulty toy backend: the cpu plugin with exactly three faults, to prove the
conformance suite fails where it should and only there.

1. Wrong results in one op: ``stablehlo.atan2`` is lowered by a rule merged over the cpu rules
   (``RULES.merged({...})``) that adds 1 to the true answer.
2. A missing mandatory C function: ``PJRT_Executable_NumOutputs`` of this backend's PJRT_Api
   answers UNIMPLEMENTED (JAX calls it after every compile).
3. A wrong error code: ``PJRT_Client_LookupDevice`` answers NOT_FOUND for an unknown device id,
   where the contract (and XLA's own plugin) says INVALID_ARGUMENT.

Faults 2 and 3 are patched into the PJRT_Api table that layer 1 drives. A plugin truly missing
NumOutputs could run no JAX program at all, so every layer-3 case would fail with it and hide
fault 1; JAX is therefore given a second, unpatched table of the same faulty hooks
(``JAX_BACKEND``), and layer 3 measures the numerics fault alone.

Run the whole suite on it: ``python tests/conformance/toy_faulty.py [--json PATH] ...``.
"""
from __future__ import annotations

import dataclasses
import sys

import numpy as np

import pjrtkit_cpu.plugin as cpu
from pjrtkit import hookimpl
from pjrtkit.backend import Backend
from pjrtkit.errors import ErrorCode
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.types import CompiledProgram

NAME = "toy_faulty"
PLATFORM = "pjrtkit_toy_faulty"
WRONG_OP = "stablehlo.atan2"


# ---- the hooks: the cpu plugin's, except the platform name and one wrong lowering rule --------

@hookimpl
def pjrtkit_platform():
    return dataclasses.replace(cpu.pjrtkit_platform(), name=PLATFORM,
                               version="toy-faulty 0 (deliberately broken)")


pjrtkit_client_topology = cpu.pjrtkit_client_topology
pjrtkit_make_topology = cpu.pjrtkit_make_topology
pjrtkit_transfer_to_device = cpu.pjrtkit_transfer_to_device
pjrtkit_transfer_to_host = cpu.pjrtkit_transfer_to_host
pjrtkit_copy_buffer = cpu.pjrtkit_copy_buffer
pjrtkit_capabilities = cpu.pjrtkit_capabilities  # declared dtypes and ops: the cpu plugin's


def _rules():
    from pjrtkit_cpu.lowering import CPU_DTYPES, RULES

    correct = RULES.rules[WRONG_OP]

    def off_by_one(op, ctx):
        kernel = correct(op, ctx)

        def wrong(*operands):
            return tuple((r + np.ones((), r.dtype)).astype(r.dtype) for r in kernel(*operands))

        return wrong

    return RULES.merged({WRONG_OP: off_by_one}, backend=PLATFORM, dtypes=CPU_DTYPES)


@hookimpl
def pjrtkit_compile(program, options, devices):
    return CompiledProgram(executable=cpu.CpuExecutable(build_plan(program, RULES), True),
                           cost=estimate_cost(program))


RULES = _rules()


# ---- the C-level faults -----------------------------------------------------------------------

_keepalive: list = []  # cffi callbacks stay alive as long as the table points at them


def patch_api(backend: Backend) -> None:
    """Put faults 2 and 3 into ``backend``'s PJRT_Api table."""
    from pjrtkit.abi._cffi import ffi
    from pjrtkit.abi.api import api_for_slot, register_backend
    from pjrtkit.abi.errors import new_error

    _capsule, slot = register_backend(backend)
    api = api_for_slot(slot)

    def num_outputs(args):
        return new_error(ErrorCode.UNIMPLEMENTED,
                         f"{PLATFORM}: PJRT_Executable_NumOutputs is not implemented")

    original_lookup = api.PJRT_Client_LookupDevice
    destroy_error = api.PJRT_Error_Destroy

    full_size = ffi.sizeof("PJRT_Client_LookupDevice_Args")

    def lookup_device(args):
        error = original_lookup(args)
        if error == ffi.NULL or args.struct_size < full_size:
            return error  # only a well-formed call with an unknown id gets the wrong code
        destroy = ffi.new("PJRT_Error_Destroy_Args*")
        destroy.struct_size = ffi.sizeof("PJRT_Error_Destroy_Args")
        destroy.error = error
        destroy_error(destroy)
        return new_error(ErrorCode.NOT_FOUND, f"{PLATFORM}: no device with id {args.id}")

    patched_num_outputs = ffi.callback("PJRT_Error*(PJRT_Executable_NumOutputs_Args*)",
                                       num_outputs)
    patched_lookup = ffi.callback("PJRT_Error*(PJRT_Client_LookupDevice_Args*)", lookup_device)
    _keepalive.extend([patched_num_outputs, patched_lookup, original_lookup])
    api.PJRT_Executable_NumOutputs = patched_num_outputs
    api.PJRT_Client_LookupDevice = patched_lookup


def make_backends() -> tuple[Backend, Backend]:
    """(backend whose PJRT_Api has the C-level faults, backend for JAX with a clean table)."""
    this = sys.modules[__name__]
    faulty = Backend(NAME, this, version="0")
    for_jax = Backend(NAME, this, version="0")
    patch_api(faulty)
    from pjrtkit.jax_glue import register_backend

    register_backend(for_jax)
    return faulty, for_jax


def main(argv=None) -> int:
    from pjrtkit.conformance.runner import main_for_backend

    faulty, _for_jax = make_backends()
    return main_for_backend(faulty, argv)


if __name__ == "__main__":
    sys.exit(main())
