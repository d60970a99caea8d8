"""Elementwise fusion: chains of elementwise ops of one shape become one
``pjrtkit_gpu.fused_elementwise`` op, which the lowering turns into one generated kernel (one
read of each input and one write of each output instead of one round trip per op).

A group grows in program order over ops of the same shape that ``elementwise_table`` renders,
and ``broadcast_in_dim`` into that shape (the kernel loads the broadcast operand through an
index, so a scalar constant or a row's mean is never written out in full); ops in between that
do not read the group may stay outside it. The fused op takes the place of the group's last
member, so every input is defined before it; an outside op between members that reads a
member's value closes the group first. Group outputs are the members' values read by anything
outside the group. Groups of one op are left alone (the op's own rule makes the same kernel).
"""
from __future__ import annotations

import dataclasses

from pjrtkit.stablehlo.ir import Block, Op, Program, Region, fresh_value, free_uses

from pjrtkit_gpu import dtypes as D

FUSED = "pjrtkit_gpu.fused_elementwise"


BROADCAST = "stablehlo.broadcast_in_dim"


def fusible_broadcast(op: Op) -> bool:
    """A ``broadcast_in_dim`` a fused kernel reads through an index (its operand is loaded
    where each output element comes from, never materialized): dimensions kept in order, of a
    supported dtype, to a larger shape."""
    if op.name != BROADCAST or len(op.operands) != 1:
        return False
    source, result = op.operands[0].type, op.results[0].type
    dims = tuple(op.attributes.get("broadcast_dimensions", ()))
    return (hasattr(source, "dtype") and D.is_supported(source.dtype)
            and list(dims) == sorted(set(dims)) and source.shape != result.shape)


def _fusible(op: Op) -> bool:
    from pjrtkit_gpu.elementwise_table import OPS, renders

    if fusible_broadcast(op):
        return True
    if op.name not in OPS or len(op.results) != 1 or op.regions:
        return False
    shape = op.results[0].type.shape
    return all(hasattr(v.type, "dtype") and v.type.shape == shape
               and D.is_supported(v.type.dtype) for v in (*op.operands, *op.results)) \
        and renders(op)


def _fuse_block(block: Block) -> Block:
    ops = [dataclasses.replace(op, regions=tuple(_fuse_region(r) for r in op.regions))
           for op in block.ops]
    readers: dict[int, int] = {}
    for op in ops:
        for used in free_uses(op):
            readers[used] = readers.get(used, 0) + 1
    out: list[Op] = []
    group: list[Op] = []
    deferred: list[Op] = []  # outside ops met while the group was open, in order
    members: set[int] = set()

    def close():
        nonlocal group, deferred, members
        if len(group) >= 2:
            out.extend(deferred)
            out.append(_fused_op(group, readers))
        else:
            # Restore program order: the lone member came before the deferred ops.
            out.extend(sorted(group + deferred, key=lambda o: order[id(o)]))
        group, deferred, members = [], [], set()

    order = {id(op): i for i, op in enumerate(ops)}
    for op in ops:
        uses = free_uses(op)
        if group and _fusible(op) and op.results[0].type.shape == group[0].results[0].type.shape:
            group.append(op)
            members.add(op.results[0].id)
            continue
        if group and uses & members:
            close()
        if _fusible(op) and not group:
            group.append(op)
            members.add(op.results[0].id)
            continue
        if group:
            deferred.append(op)
        else:
            out.append(op)
    close()
    return Block(block.arguments, out)


def _fused_op(group: list[Op], readers: dict[int, int]) -> Op:
    produced = {op.results[0].id for op in group}
    inputs, renamed = [], {}
    for op in group:
        for v in op.operands:
            if v.id not in produced and v.id not in renamed:
                inputs.append(v)
                renamed[v.id] = fresh_value(v)
    inner_reads: dict[int, int] = {}
    for op in group:
        for used in {v.id for v in op.operands}:  # counted like free_uses: once per op
            inner_reads[used] = inner_reads.get(used, 0) + 1
    outputs = [op.results[0] for op in group
               if readers.get(op.results[0].id, 0) > inner_reads.get(op.results[0].id, 0)]
    arguments = tuple(renamed[v.id] for v in inputs)
    cloned = []
    for op in group:
        operands = tuple(renamed.get(v.id, v) for v in op.operands)
        result = fresh_value(op.results[0])
        renamed[op.results[0].id] = result
        cloned.append(dataclasses.replace(op, operands=operands, results=(result,)))
    ret = Op("stablehlo.return", tuple(renamed[v.id] for v in outputs), (), {})
    return Op(FUSED, tuple(inputs), tuple(outputs), {},
              (Region([Block(arguments, [*cloned, ret])]),), group[-1].location)


def _fuse_region(region: Region) -> Region:
    return Region([_fuse_block(b) for b in region.blocks])


def fuse_elementwise(program: Program) -> Program:
    """``program`` with its elementwise chains fused (a new Program; the input is unchanged)."""
    functions = {name: dataclasses.replace(f, body=_fuse_region(f.body))
                 for name, f in program.functions.items()}
    return dataclasses.replace(program, functions=functions)
