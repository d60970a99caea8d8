"""A test backend whose payloads are not NumPy arrays: the core must serve it all the same.

It was made from ``template_backend.py`` the way the template asks a new backend to be made:
copied, then its payloads and rules replaced. It answers every hook the template answers
(``tests/test_opaque_backend.py`` checks that the two stay in step), in the same order.

Its payloads are ``Opaque`` objects (a flat tuple of Python floats and a shape) that nothing in
the core can read; its kernels are plain Python loops over those tuples, rounding every result
to float32 as XLA does. It has five rules (constant through ``OpaquePayloads.make_constant``,
broadcast_in_dim, iota, add, multiply), enough for ``x * 2.0 + jnp.arange(3.)``, and only
float32. The plan builder materialises its constants and folds ``broadcast_in_dim(constant)``
and ``iota`` by running these kernels on these payloads at build time.

The rules import no NumPy (``tests/test_lowering_without_numpy.py`` runs them with NumPy
blocked); only the transfer hooks, which the contract defines in NumPy arrays, import it.
Registered as a JAX platform ``pjrtkit_opaque`` by ``Backend("opaque", this module)`` and
``pjrtkit.jax_glue.register_backend`` (see ``tests/test_opaque_backend.py``).
"""
from __future__ import annotations

import itertools
import math
import struct

from pjrtkit import hookimpl
from pjrtkit.lowering.payloads import Payloads
from pjrtkit.lowering.plan import build_plan
from pjrtkit.lowering.registry import LoweringRegistry
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.errors import Unimplemented
from pjrtkit.types import (Capabilities, CompiledProgram, DeviceSpec, MemorySpaceSpec, PlatformInfo,
                           Topology)

PLATFORM = "pjrtkit_opaque"
DTYPE = "float32"


class Opaque:
    """One buffer of the opaque backend: row-major float values, a shape and the dtype object
    the IR or the transferred array named (never created here: no NumPy)."""

    __slots__ = ("values", "shape", "dtype")

    def __init__(self, values, shape, dtype):
        self.values = tuple(values)
        self.shape = tuple(shape)
        self.dtype = dtype
        if len(self.values) != math.prod(self.shape):
            raise ValueError(f"{len(self.values)} values for shape {self.shape}")

    def __repr__(self) -> str:
        return f"Opaque({self.values}, {self.shape}, {self.dtype})"


def to_float32(x: float) -> float:
    """``x`` rounded to the nearest float32 (round to nearest even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class OpaquePayloads(Payloads):
    """Constants become ``Opaque``; folding runs the kernels (``Payloads``' default); results
    describe themselves."""

    def make_constant(self, value, type):
        if type.dtype.name != DTYPE:
            # Unimplemented, not any other exception: only it means "not supported" (anything
            # else is reported as a bug in the rule, and the conformance suite FAILs it).
            raise Unimplemented(f"{PLATFORM}: only {DTYPE} constants, not {type.dtype.name}")
        values = [to_float32(float(v)) for v in _flat(value.tolist())]
        if len(values) == 1:  # a splat fills the whole shape
            values = values * math.prod(type.shape)
        return Opaque(values, type.shape, type.dtype)

    def describe(self, payload):
        return payload.shape, payload.dtype


def _flat(nested):
    if isinstance(nested, list):
        return [x for item in nested for x in _flat(item)]
    return [nested]


RULES = LoweringRegistry(PLATFORM, payloads=OpaquePayloads())


def _float32_only(op, ctx):
    for value in (*op.operands, *op.results):
        if value.type.dtype.name != DTYPE:
            raise ctx.unimplemented(op, f"the opaque backend has only {DTYPE}")


def _elementwise(function):
    def rule(op, ctx):
        _float32_only(op, ctx)
        result = op.results[0].type

        def kernel(x, y):
            return (Opaque((to_float32(function(a, b)) for a, b in zip(x.values, y.values)),
                           result.shape, result.dtype),)

        return kernel

    return rule


RULES.register("stablehlo.add")(_elementwise(lambda a, b: a + b))
RULES.register("stablehlo.multiply")(_elementwise(lambda a, b: a * b))


def _row_major(shape):
    return itertools.product(*(range(d) for d in shape))


@RULES.register("stablehlo.broadcast_in_dim")
def broadcast_in_dim(op, ctx):
    _float32_only(op, ctx)
    in_shape = op.operands[0].type.shape
    result = op.results[0].type
    dims = tuple(op.attributes["broadcast_dimensions"])
    strides = [math.prod(in_shape[i + 1:]) for i in range(len(in_shape))]
    # For every result position, the operand position it reads (size-1 dims repeat).
    sources = tuple(
        sum(stride * (index[d] if size > 1 else 0)
            for d, size, stride in zip(dims, in_shape, strides))
        for index in _row_major(result.shape))

    def kernel(x):
        return (Opaque((x.values[s] for s in sources), result.shape, result.dtype),)

    return kernel


@RULES.register("stablehlo.iota")
def iota(op, ctx):
    _float32_only(op, ctx)
    result = op.results[0].type
    dim = op.attributes["iota_dimension"]

    def kernel():
        return (Opaque((float(index[dim]) for index in _row_major(result.shape)),
                       result.shape, result.dtype),)

    return kernel


# -- the hooks ----------------------------------------------------------------------------------

@hookimpl
def pjrtkit_platform():
    return PlatformInfo(name=PLATFORM, version="opaque 0 (tests only)", device_kind="opaque")


@hookimpl
def pjrtkit_capabilities():
    return Capabilities(dtypes={DTYPE}, ops=RULES.op_names, custom_call_targets=set(),
                        features={"compile_only_topologies"})


def _topology(name: str) -> Topology:
    spaces = (MemorySpaceSpec("device", 1 << 30), MemorySpaceSpec("pinned_host", 1 << 30),
              MemorySpaceSpec("unpinned_host", 1 << 30))
    device = DeviceSpec(id=0, kind="opaque", process_index=0, local_hardware_id=0,
                        coords=(0, 0, 0), core_on_chip=0, memory_spaces=spaces,
                        default_memory_kind="device")
    return Topology(name=name, devices=(device,), attributes={"device_count": 1})


@hookimpl
def pjrtkit_client_topology(options):
    return _topology("opaque")


@hookimpl
def pjrtkit_make_topology(name, options):
    return _topology(name or "opaque") if name in ("", "opaque") else None


@hookimpl
def pjrtkit_transfer_to_device(array, device, memory_kind):
    if array.dtype.name != DTYPE:
        raise Unimplemented(f"{PLATFORM}: only {DTYPE} buffers, not {array.dtype.name}")
    return Opaque((float(v) for v in array.reshape(-1).tolist()), array.shape, array.dtype)


@hookimpl
def pjrtkit_transfer_to_host(payload, device, memory_kind):
    import numpy as np

    return np.array(payload.values, dtype=payload.dtype).reshape(payload.shape)


@hookimpl
def pjrtkit_copy_buffer(payload, src_device, src_memory_kind, dst_device, dst_memory_kind):
    return Opaque(payload.values, payload.shape, payload.dtype)  # values are immutable


class OpaqueExecutable:
    """The compiled program (``pjrtkit.types.PluginExecutable``): a plan over opaque payloads."""

    def __init__(self, plan):
        self.plan = plan

    def execute(self, arguments, devices):
        return [list(self.plan(*args)) for args in arguments]


@hookimpl
def pjrtkit_compile(program, options, devices):
    if options.num_partitions > 1:
        raise Unimplemented(f"{PLATFORM}: partitioned programs are not supported")
    return CompiledProgram(executable=OpaqueExecutable(build_plan(program, RULES)),
                           cost=estimate_cost(program))
