"""Rewrite a Program so that each fusable group is one ``pjrtkit_cpu.fused_elementwise`` op.

The synthetic op's operands are the group's inputs, its results the group's outputs (the same
Value objects the rest of the program uses), and its one region holds copies of the member ops
over fresh values: block arguments for the inputs, a ``stablehlo.return`` of the outputs. The IR
stays plain records, and the region alone is a complete unfused program of the group (the
lowering rule plans it as the fallback). Attribute ``input_kinds`` says how the fused loop reads
each input (see ``codegen.InputKind``). A constant of one repeated element a member reads
becomes a rank-0 input (a new rank-0 constant for a bigger one, which is dropped when nothing
else uses it), broadcast inside the region, and attribute ``literals`` gives its value. The
fused loop reads it from its argument like any rank-0 input, so programs that differ only in
constants share one compiled kernel; ``kernel.baked_literals`` says which few it writes into
the source instead (integer divisors, which LLVM turns into multiplies). The region keeps
computing on an argument too (a constant there would be folded into a full-size array at
every compile); native loops (``pjrtkit_cpu.loops.fused``) use the literals.

Ops are re-emitted in a topological order that keeps the original order wherever it can (and
always among effectful ops); nested regions (while/if/case bodies, called functions) are
rewritten the same way. The input Program is not modified.
"""
from __future__ import annotations

import dataclasses

from pjrtkit.stablehlo.ir import (Block, Op, Program, Region, TensorType, Value, free_uses,
                                  fresh_value, topological_order)

from pjrtkit_cpu.fusion import codegen, rows
from pjrtkit_cpu.fusion.groups import EFFECTFUL, Group, find_groups, member_shape
from pjrtkit_cpu.loopnest.values import strides

FUSED_OP = "pjrtkit_cpu.fused_elementwise"


def fuse_program(program: Program) -> Program:
    """A new Program with every fusable group replaced by one fused op (or ``program`` itself
    when nothing is fusable)."""
    rewriter = _Rewriter()
    functions = {}
    for name, function in program.functions.items():
        body = rewriter.region(function.body)
        functions[name] = (function if body is function.body
                           else dataclasses.replace(function, body=body))
    if not rewriter.changed:
        return program
    return dataclasses.replace(program, functions=functions)


def fuse_block(block: Block, groups: list[Group]) -> Block | None:
    """``block`` with each of ``groups`` (found in it by ``find_groups``) one fused op, or
    None when none could be fused (no row programs: ``fusion.whole`` wants the one op)."""
    return _Rewriter()._fuse_block(block, groups)  # noqa: SLF001 - this module's own class


def split_scalar_broadcasts(block: Block) -> Block:
    """``block`` with a broadcast of one element that several ops read as an operand split into
    one broadcast per reader (``block`` itself when there is none). A group absorbs a broadcast
    it contains (the loop reads the element), but a broadcast belongs to one group only: a
    shared ``broadcast(0)`` went to the forward pass's relu, and the backward pass's
    ``select(mask, g, broadcast(0))`` was left a lone op reading a materialized zero array, too
    little for a loop (the MLP step's two selects ran unfused: NumPy's ``where`` on 16k random
    elements takes longer than an add on them). Readers through a region, readers no group of
    the broadcast's shape can hold (a dot, a return), and the first reader keep the
    original."""
    readers: dict[int, list[Op]] = {}
    for op in block.ops:
        for v in dict.fromkeys(op.operands):
            readers.setdefault(v.id, []).append(op)
    clones: dict[int, list[Op]] = {}  # id(broadcast) -> its clones, emitted right after it
    renamed: dict[tuple[int, int], Value] = {}  # (id(reader), value id) -> the clone's result
    for broadcast in block.ops:
        if (broadcast.name != codegen.BROADCAST or len(broadcast.operands) != 1
                or not isinstance(broadcast.operands[0].type, TensorType)
                or broadcast.operands[0].type.shape not in ((), (1,))):
            continue
        shape = member_shape(broadcast)
        vid = broadcast.results[0].id
        for reader in readers.get(vid, [])[1:]:
            if shape is None or member_shape(reader) != shape:
                continue  # it could never share a loop with the broadcast
            value = fresh_value(broadcast.results[0])
            clones.setdefault(id(broadcast), []).append(
                dataclasses.replace(broadcast, results=(value,)))
            renamed[(id(reader), vid)] = value
    if not renamed:
        return block
    ops = []
    for op in block.ops:
        if any((id(op), v.id) in renamed for v in op.operands):
            ops.append(dataclasses.replace(op, operands=tuple(
                renamed.get((id(op), v.id), v) for v in op.operands)))
        else:
            ops.append(op)
        ops.extend(clones.get(id(op), ()))
    return Block(block.arguments, ops)


class _Rewriter:
    def __init__(self):
        self.changed = False

    def region(self, region: Region) -> Region:
        blocks = [self.block(b) for b in region.blocks]
        if all(new is old for new, old in zip(blocks, region.blocks)):
            return region
        return Region(blocks)

    def block(self, block: Block) -> Block:
        ops = []
        nested_changed = False
        for op in block.ops:
            if op.regions:
                regions = tuple(self.region(r) for r in op.regions)
                if any(new is not old for new, old in zip(regions, op.regions)):
                    op = dataclasses.replace(op, regions=regions)
                    nested_changed = True
            ops.append(op)
        block = Block(block.arguments, ops) if nested_changed else block
        split = split_scalar_broadcasts(block)
        groups = find_groups(split)
        if not groups:
            return block
        fused = self._fuse_block(split, groups)
        if fused is None:
            return block
        self.changed = True
        if rows.ENABLED:
            fused = rows.group_rows(fused, FUSED_OP)
        return fused

    # -- one block ---------------------------------------------------------------------------
    def _fuse_block(self, block: Block, groups: list[Group]) -> Block | None:
        group_of_op = {id(op): g for g in groups for op in g.members}
        # value id -> the groups (None: an op outside every group) whose ops use it
        users: dict[int, set] = {}
        for op in block.ops:
            owner = group_of_op.get(id(op))
            for vid in free_uses(op):
                users.setdefault(vid, set()).add(None if owner is None else id(owner))
        replacement: dict[int, Op] = {}  # id(first member) -> fused op
        kept_broadcasts: set[int] = set()
        fused_groups: set[int] = set()
        for g in groups:
            outside_uses = {r.id for op in g.members for r in op.results
                            if users.get(r.id, set()) - {id(g)}}
            fused, constants = self._fused_op(g, outside_uses)
            if fused is None:
                for op in g.members:
                    group_of_op.pop(id(op))
                continue
            replacement[id(g.members[0])] = (*constants, fused)
            fused_groups.add(id(g))
            for op in g.members:
                if op.name in codegen.ABSORBED and op.results[0].id in outside_uses:
                    kept_broadcasts.add(id(op))
        if not replacement:
            return None
        nodes: list[Op] = []
        for op in block.ops:
            if id(op) in replacement:
                nodes.extend(replacement[id(op)])
            if (op.name == "stablehlo.constant" and len(op.results) == 1
                    and op.results[0].type.shape  # (rank 0 ones are read as inputs)
                    and users.get(op.results[0].id, {None}) <= fused_groups
                    and any(op.results[0].id in g.splats for g in groups
                            if id(g) in fused_groups)):
                continue  # a splat constant every user now reads as a rank-0 input
            if id(op) not in group_of_op or id(op) in kept_broadcasts:
                nodes.append(op)
        ordered = topological_order(nodes, EFFECTFUL)
        return None if ordered is None else Block(block.arguments, ordered)

    def _fused_op(self, group: Group, outside_uses: set[int]
                  ) -> tuple[Op | None, list[Op]]:
        """The fused op of ``group`` (None if it has no outputs) and the rank-0 constants
        to insert before it."""
        defined = {r.id for op in group.members for r in op.results}
        inputs: list[Value] = []
        kinds: list[tuple] = []
        arg_of: dict[tuple, Value] = {}
        inner: dict[int, Value] = {}

        def input_arg(v: Value, kind: tuple) -> Value:
            key = (v.id, kind)
            if key not in arg_of:
                inputs.append(v)
                kinds.append(kind)
                arg_of[key] = fresh_value(v)
            return arg_of[key]

        body: list[Op] = []
        splat_of: dict[int, Value] = {}
        constants: list[Op] = []
        literals: dict[int, object] = {}  # input index -> its value

        def splat(v: Value) -> Value:
            """The region's value for the constant ``v``: a rank-0 input (``v`` itself, or a new
            rank-0 constant), broadcast when ``v`` is not rank 0."""
            if v.id not in splat_of:
                value = group.splats[v.id]
                source = v
                if v.type.shape:
                    source = fresh_value(TensorType((), v.type.dtype))
                    constants.append(Op("stablehlo.constant", (), (source,), {"value": value}))
                arg = input_arg(source, ("scalar", ()))
                literals[inputs.index(source)] = value
                splat_of[v.id] = arg
                if v.type.shape:
                    splat_of[v.id] = fresh_value(v)
                    body.append(Op(codegen.BROADCAST, (arg,), (splat_of[v.id],),
                                   {"broadcast_dimensions": ()}))
            return splat_of[v.id]

        for op in group.members:
            operands = []
            for v in op.operands:
                if v.id in defined:
                    operands.append(inner[v.id])
                elif v.id in group.splats:
                    operands.append(splat(v))
                elif op.name == codegen.TRANSPOSE:
                    perm = op.attributes["permutation"]
                    source = strides(v.type.shape)
                    operands.append(input_arg(v, ("strided", tuple(source[p] for p in perm))))
                elif v.type.shape == group.shape:
                    operands.append(input_arg(v, ("full", ())))
                elif v.type.rank == 0:
                    operands.append(input_arg(v, ("scalar", ())))
                else:  # the operand of an absorbed broadcast_in_dim
                    aligned = [1] * len(group.shape)
                    for src, dst in enumerate(op.attributes["broadcast_dimensions"]):
                        aligned[dst] = v.type.shape[src]
                    operands.append(input_arg(v, ("broadcast", tuple(aligned))))
            results = tuple(fresh_value(r) for r in op.results)
            inner.update((old.id, new) for old, new in zip(op.results, results))
            body.append(dataclasses.replace(op, operands=tuple(operands), results=results,
                                            location=op.location))
        outputs = [r for op in group.members if op.name not in codegen.ABSORBED
                   for r in op.results if r.id in outside_uses]
        if not outputs:
            return None, []
        body.append(Op("stablehlo.return", tuple(inner[r.id] for r in outputs), (), {}))
        args = tuple(arg_of[(v.id, kind)] for v, kind in zip(inputs, kinds))
        region = Region([Block(args, body)])
        return Op(FUSED_OP, tuple(inputs), tuple(outputs),
                  {"shape": group.shape, "input_kinds": tuple(kinds),
                   "literals": tuple(sorted(literals.items()))}, (region,),
                  location=group.members[-1].location), constants
