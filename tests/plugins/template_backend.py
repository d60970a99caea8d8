"""The smallest complete pjrtkit backend: copy this file to start a new one.

Every hook of the contract (``pjrtkit/hookspecs.py``) that a backend must answer is here, in
the order the core calls them, each as short as it can be while still correct:

- who the platform is (``pjrtkit_platform``) and what it supports (``pjrtkit_capabilities``);
- its devices (``pjrtkit_client_topology``) and compile-only topologies
  (``pjrtkit_make_topology``, optional: return None for names you do not know);
- storing, reading and copying arrays (``pjrtkit_transfer_*``, ``pjrtkit_copy_buffer``): here a
  payload is just the NumPy array; a real device would return its own handle;
- compiling (``pjrtkit_compile``): lowering rules from a ``LoweringRegistry`` turn the program
  into a plan at compile time; the returned executable's ``execute`` runs the plan.

It knows six StableHLO ops on float32 and int32; anything else is UNIMPLEMENTED at compile time,
naming the op, as the contract asks. ``pjrtkit_memory_stats`` is left to the built-in answer.

To ship a backend, name this module in an entry point of the group ``pjrtkit.backends`` (see the
README, "Writing a plugin"). The core tests register it directly:
``Backend("template", template_backend)``.
"""
from __future__ import annotations

import numpy as np

from pjrtkit import hookimpl
from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.plan import build_plan
from pjrtkit.lowering.registry import LoweringRegistry
from pjrtkit.reference.payloads import NumpyPayloads
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.types import Capabilities, CompiledProgram, DeviceSpec, PlatformInfo, Topology

PLATFORM = "pjrtkit_template"

# -- lowering rules: each runs once at compile time and returns the kernel execute calls ---------
# Constants (and folding constant subexpressions at build time) come from the registry's
# payloads: NumPy arrays here, as in the reference rules.
RULES = LoweringRegistry(PLATFORM, dtypes=(np.dtype(np.float32), np.dtype(np.int32)),
                         payloads=NumpyPayloads())

BINARY = {"stablehlo.add": np.add, "stablehlo.subtract": np.subtract,
          "stablehlo.multiply": np.multiply}


# A kernel returns arrays: NumPy turns the result of a ufunc on 0-d arrays into a scalar, hence
# the np.asarray.
@RULES.register(*BINARY)
def binary(op, ctx):
    ufunc = BINARY[op.name]
    return lambda x, y: (np.asarray(ufunc(x, y)),)


@RULES.register("stablehlo.negate")
def negate(op, ctx):
    return lambda x: (np.asarray(np.negative(x)),)


@RULES.register("stablehlo.broadcast_in_dim")
def broadcast_in_dim(op, ctx):
    # Operand dimension i becomes result dimension dims[i]; the others are new, of size 1
    # before broadcasting. All of this is decided here, once; the kernel only broadcasts.
    shape = op.results[0].type.shape
    dims = tuple(op.attributes["broadcast_dimensions"])
    operand_shape = op.operands[0].type.shape
    expanded = [1] * len(shape)
    for i, d in enumerate(dims):
        expanded[d] = operand_shape[i]
    return lambda x: (np.broadcast_to(np.reshape(x, expanded), shape).copy(),)


# -- the hooks ------------------------------------------------------------------------------------
@hookimpl
def pjrtkit_platform():
    return PlatformInfo(name=PLATFORM, version="template 0.1", device_kind="template")


@hookimpl
def pjrtkit_capabilities():
    return Capabilities(dtypes={np.dtype(d).name for d in RULES.dtypes}, ops=RULES.op_names,
                        custom_call_targets=set(), features={"compile_only_topologies"})


def _topology(name: str) -> Topology:
    return Topology(name, (DeviceSpec(id=0, kind="template"),))


@hookimpl
def pjrtkit_client_topology(options):
    return _topology("template")


@hookimpl
def pjrtkit_make_topology(name, options):
    return _topology(name or "template") if name in ("", "template") else None


@hookimpl
def pjrtkit_transfer_to_device(array, device, memory_kind):
    return array  # the core hands over an owned copy, so keeping it is safe


@hookimpl
def pjrtkit_transfer_to_host(payload, device, memory_kind):
    return payload


@hookimpl
def pjrtkit_copy_buffer(payload, src_device, src_memory_kind, dst_device, dst_memory_kind):
    return payload.copy()  # never share storage: donation may later write either side


class TemplateExecutable:
    """The compiled program: the core calls ``execute`` once per execution."""

    def __init__(self, plan):
        self.plan = plan

    def execute(self, arguments, devices):
        return [self.plan(*args) for args in arguments]


@hookimpl
def pjrtkit_compile(program, options, devices):
    if options.num_partitions > 1:
        raise Unimplemented(f"{PLATFORM}: partitioned programs are not supported")
    return CompiledProgram(TemplateExecutable(build_plan(program, RULES)),
                           cost=estimate_cost(program))
