"""What JAX emits that is an identity on one device: Shardy (``sdy.*``) annotations, GSPMD
sharding custom calls, and collectives over a group of one.

JAX annotates even single-device programs: ``jax.random.normal`` on its own compiles a
program holding ``sdy.sharding_constraint %key <@empty_mesh, [{}]>``, and ``shard_map`` or a
``NamedSharding`` over a one-device mesh add ``sdy.manual_computation`` and ``sdy.sharding``.
With one partition every such annotation means "this value, unchanged", so the core removes
them once, here, for every plugin (a plugin never sees an ``sdy`` op on one device):

- value-forwarding ops (constraints, reshards, barriers, data-flow edges and the collectives
  Shardy inserts, whose groups have one member) are replaced by their operands;
- ``sdy.manual_computation`` and ``sdy.named_computation`` are inlined: their body runs once on
  the whole value (on one device the local shape is the global one);
- ``sdy.constant`` becomes ``stablehlo.constant``; ``sdy.sharding_group`` is dropped;
- GSPMD's custom calls ``Sharding``, ``SPMDFullToShardShape`` and ``SPMDShardToFullShape``
  (programs lowered with the Shardy partitioner off) forward their operand, and so does
  ``LayoutConstraint`` (``with_layout_constraint``, a ``Format`` in ``with_sharding_constraint``):
  a layout is the order of the value's elements in memory, not the value.

On one device in all (one partition and one replica), the collectives of a ``shard_map`` over a
one-device mesh (``psum`` is ``stablehlo.all_reduce`` over the group ``[[0]]``) return their
operands too: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all`` and
``collective_broadcast`` when each result has its operand's type, and a ``collective_permute``
that sends device 0 to itself. Any other collective is left for the plugin.

``sdy.mesh`` symbols are read by the loader as module attributes (``sdy.meshes``) and
``sdy.sharding`` attributes stay on arguments and results as opaque text: both describe the
program and do not change what it computes. A program partitioned over several devices is
left untouched, for the partitioner.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.stablehlo.ir import Block, Op, Program, Region, Value

# One result per operand, each the operand's value, when every mesh axis has size one.
FORWARDING_OPS = frozenset({
    "sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier", "sdy.data_flow_edge",
    "sdy.func_data_flow_edge", "sdy.all_gather", "sdy.all_reduce", "sdy.all_slice",
    "sdy.all_to_all", "sdy.collective_permute", "sdy.reduce_scatter",
    "sdy.replicated_to_unreduced", "sdy.sharded_to_unreduced",
})
INLINED_OPS = frozenset({"sdy.manual_computation", "sdy.named_computation"})
DROPPED_OPS = frozenset({"sdy.sharding_group"})
FORWARDING_CUSTOM_CALLS = frozenset({"Sharding", "SPMDFullToShardShape",
                                     "SPMDShardToFullShape", "LayoutConstraint"})

# Every sdy op this pass removes; ``sdy.return`` ends the bodies it inlines and ``sdy.mesh``
# never reaches the IR (see the loader).
HANDLED_OPS = FORWARDING_OPS | INLINED_OPS | DROPPED_OPS | {"sdy.constant", "sdy.return",
                                                             "sdy.mesh"}


def resolve_for_one_device(program: Program, *, one_replica: bool = True) -> Program:
    """Remove every sharding annotation from ``program``, a program for one partition, and
    with ``one_replica`` its collectives over one device (in place; returned for chaining).

    Raises Unimplemented for an ``sdy`` op this pass does not know (a newer jaxlib), and
    InvalidArgument when a forwarding op's result type differs from its operand's (such a
    program is not a one-device program).
    """
    rewriter = _Rewriter(one_replica)
    for function in program.functions.values():
        rewriter.region(function.body)
    return program


class _Rewriter:
    def __init__(self, one_replica: bool):
        self.one_replica = one_replica
        self.replaced: dict[Value, Value] = {}

    def region(self, region: Region) -> None:
        for block in region.blocks:
            block.ops = _rewrite_ops(block.ops, self)

    def forwards(self, op: Op) -> bool:
        """Whether ``op`` hands its operands on unchanged (on this program's devices)."""
        name = op.name
        if name in FORWARDING_OPS:
            return True
        if name == "stablehlo.custom_call":
            return op.attributes.get("call_target_name") in FORWARDING_CUSTOM_CALLS
        if not self.one_replica or name not in COLLECTIVES:
            return False
        if name == "stablehlo.collective_permute":
            pairs = op.attributes.get("source_target_pairs")
            if pairs is None or np.asarray(pairs).tolist() != [[0, 0]]:
                return False
        return len(op.operands) == len(op.results) and all(
            a.type == r.type for a, r in zip(op.operands, op.results))


# Collectives that return their operand when the group is the one device there is.
COLLECTIVES = frozenset({"stablehlo.all_reduce", "stablehlo.all_gather",
                         "stablehlo.reduce_scatter", "stablehlo.all_to_all",
                         "stablehlo.collective_broadcast", "stablehlo.collective_permute"})


def _rewrite_ops(ops: list[Op], rewriter: _Rewriter) -> list[Op]:
    out: list[Op] = []
    replaced = rewriter.replaced
    for op in ops:
        if replaced:
            op.operands = tuple([replaced.get(v, v) for v in op.operands])
        name = op.name
        if name in INLINED_OPS:  # its body is rewritten once its arguments are known
            out.extend(_inline(op, rewriter))
            continue
        for region in op.regions:
            rewriter.region(region)
        if rewriter.forwards(op):
            _forward(op, op.operands, replaced)
        elif name == "sdy.constant":
            out.append(Op("stablehlo.constant", op.operands, op.results,
                          {"value": op.attributes.get("value")}, (), op.location))
        elif name in DROPPED_OPS:
            continue
        elif name.startswith("sdy.") and name != "sdy.return":
            raise Unimplemented(f"Shardy op {name} ({op.describe()}) is not supported on one "
                                f"device; pjrtkit knows {sorted(HANDLED_OPS)}")
        else:
            out.append(op)
    return out


def _forward(op: Op, sources: tuple[Value, ...], replaced: dict[Value, Value]) -> None:
    if len(sources) != len(op.results):
        raise InvalidArgument(f"{op.describe()}: {len(sources)} values for "
                              f"{len(op.results)} results")
    for source, result in zip(sources, op.results):
        if source.type != result.type:
            raise InvalidArgument(
                f"{op.describe()}: on one device the result must have its operand's type "
                f"({source.type} != {result.type}); is this a program for several devices?")
        replaced[result] = source


def _inline(op: Op, rewriter: _Rewriter) -> list[Op]:
    """The body of a manual or named computation, run on the operands themselves."""
    replaced = rewriter.replaced
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise InvalidArgument(f"{op.describe()}: expected one region with one block")
    body: Block = op.regions[0].blocks[0]
    _forward_arguments(op, body, replaced)
    ops = body.ops
    if not ops or ops[-1].name not in ("sdy.return", "stablehlo.return"):
        raise InvalidArgument(f"{op.describe()}: its body does not end in sdy.return")
    *inner, terminator = ops
    inner = _rewrite_ops(inner, rewriter)
    terminator.operands = tuple([replaced.get(v, v) for v in terminator.operands])
    _forward(op, terminator.operands, replaced)
    return inner


def _forward_arguments(op: Op, body: Block, replaced: dict[Value, Value]) -> None:
    if len(body.arguments) != len(op.operands):
        raise InvalidArgument(f"{op.describe()}: {len(op.operands)} operands for "
                              f"{len(body.arguments)} body arguments")
    for operand, argument in zip(op.operands, body.arguments):
        if operand.type != argument.type:
            raise InvalidArgument(
                f"{op.describe()}: the body's argument has type {argument.type}, the operand "
                f"{operand.type}; on one device they must agree")
        replaced[argument] = operand
