"""A backend that implements a declared primitive set and gets the rest of JAX from the core.

The template backend (``template_backend.py``) grown into one that runs JAX's whole surface,
written as a new backend's author would: its payloads are objects of its own (``Tensor``, which
the core never looks inside), its kernels are NumPy, and it declares what it implements
(``pjrtkit_primitive_set``): real and integer arithmetic, structure, indexing, reductions,
sort, dot_general and control flow. Everything else JAX emits reaches it rewritten into that
set by the core's expansions (``pjrtkit.expansions``): complex numbers as pairs of reals,
float8/float4/int4 as wider types, convolutions as dots, random bits as integer arithmetic,
fft and linear algebra as loops of dots. ``docs/writing-a-backend.md`` walks from the template
to this package; ``pjrtkit coverage`` shows what each rule buys.

Read it one op family at a time, each module registering its rules in ``payloads.RULES``:

- ``payloads``: the payload (``Tensor``), the registry (``RULES``), ``kernel``, the dtypes;
- ``elementwise``: arithmetic, bitwise, compare, select, clamp, convert, bitcast_convert;
- ``shape``: iota, reshape, broadcast, transpose, reverse, slices, concatenate, pad;
- ``indexing``: gather and scatter;
- ``reductions``: reduce, reduce_window, sort (and the core's ApproxTopK rule);
- ``contraction``: dot_general;
- ``control_flow``: while, if, case, calls, composites, tokens, host callbacks;
- this module: the primitive set the rules add up to, and the hooks (as in the template).

Nothing here comes from ``pjrtkit.reference``: the semantics are XLA's, written out once.
"""
from __future__ import annotations

import numpy as np

from pjrtkit import hookimpl
from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.types import (Capabilities, CompiledProgram, DeviceSpec, PlatformInfo, PrimitiveSet,
                           Topology)

# Importing a family module registers its rules in RULES.
from . import contraction, control_flow, elementwise, indexing, reductions, shape
from .payloads import COMPUTED, PLATFORM, RULES, Tensor, TensorPayloads, kernel, result_type

__all__ = ["COMPUTED", "PLATFORM", "PRIMITIVES", "RULES", "PrimitiveExecutable", "Tensor",
           "TensorPayloads", "contraction", "control_flow", "elementwise", "indexing", "kernel",
           "reductions", "result_type", "shape"]

# What this backend implements: its rules, on the types it computes on.
PRIMITIVES = PrimitiveSet(ops=RULES.op_names, dtypes={d.name for d in COMPUTED},
                          custom_call_targets=RULES.custom_call_targets)


# -- the hooks (as in the template) -------------------------------------------------------------

@hookimpl
def pjrtkit_platform():
    return PlatformInfo(name=PLATFORM, version="primitive 0.1", device_kind="primitive")


@hookimpl
def pjrtkit_primitive_set():
    return PRIMITIVES


@hookimpl
def pjrtkit_capabilities():
    # What the rules take; the core adds what its expansions reach (complex, float8, ...).
    return Capabilities(dtypes=PRIMITIVES.dtypes, ops=PRIMITIVES.ops,
                        custom_call_targets=PRIMITIVES.custom_call_targets,
                        features={"compile_only_topologies"})


def _topology(name: str) -> Topology:
    return Topology(name, (DeviceSpec(id=0, kind="primitive"),))


@hookimpl
def pjrtkit_client_topology(options):
    return _topology("primitive")


@hookimpl
def pjrtkit_make_topology(name, options):
    return _topology(name or "primitive") if name in ("", "primitive") else None


@hookimpl
def pjrtkit_transfer_to_device(array, device, memory_kind):
    return Tensor(array)


@hookimpl
def pjrtkit_transfer_to_host(payload, device, memory_kind):
    return payload.data


@hookimpl
def pjrtkit_copy_buffer(payload, src_device, src_memory_kind, dst_device, dst_memory_kind):
    return Tensor(payload.data.copy())


class PrimitiveExecutable:
    def __init__(self, plan):
        self.plan = plan

    def execute(self, arguments, devices):
        with np.errstate(all="ignore"):  # XLA's semantics: overflow wraps, 0/0 is NaN, quietly
            return [self.plan(*args) for args in arguments]


@hookimpl
def pjrtkit_compile(program, options, devices):
    if options.num_partitions > 1:
        raise Unimplemented(f"{PLATFORM}: partitioned programs are not supported")
    return CompiledProgram(PrimitiveExecutable(build_plan(program, RULES)),
                           cost=estimate_cost(program))
