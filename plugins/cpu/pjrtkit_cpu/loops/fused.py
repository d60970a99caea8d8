"""Fused groups and row programs inside native loops.

Fusion runs on while bodies too, so a loop body arrives with its elementwise chains already
grouped into ``pjrtkit_cpu.fused_elementwise`` ops. A group becomes one loop over its elements
here: each input is read per element (an array at the loop index, a scalar or splat once), the
members are the op table's rules, each output is stored once (``LoopSource.element_loop``: a
loop of the same count written just before is continued). An input the group reads through
an absorbed broadcast or transpose is first gathered into the group's layout (before the loop
when it never changes during the loop). Groups ending in a reduction, and row programs, run
their region's ops one by one through the driver (``LoopSource.emit_op``).
"""
from __future__ import annotations

import math

from pjrtkit.stablehlo.ir import TERMINATORS, Op

from pjrtkit_cpu.fusion import codegen
from pjrtkit_cpu.loopnest.values import literal, strides
from pjrtkit_cpu.loops.emitter import (LoopSource, Unsupported, Val, element_lines,
                                        tensor_type)
from pjrtkit_cpu.loops.shapes import gather


def inline_region(src: LoopSource, op: Op, lines: list[str]) -> None:
    """``op``'s one-block region, its arguments bound to ``op``'s operands, op by op."""
    block = op.regions[0].entry
    terminator = block.ops[-1]
    if terminator.name not in TERMINATORS:
        raise Unsupported("region without a terminator")
    for arg, v in zip(block.arguments, op.operands):
        src.bind(arg, src.get(v))
        if v.id in src.invariant:
            src.invariant.add(arg.id)
    for inner in block.ops[:-1]:
        src.emit_op(src, inner, lines)
    for result, v in zip(op.results, terminator.operands):
        src.bind(result, src.get(v))


def _input(src: LoopSource, op: Op, i: int, shape, lines: list[str]) -> Val:
    """Input ``i`` of the fused ``op`` as a scalar/splat or an array in the group's layout."""
    v = op.operands[i]
    val = src.get(v)
    kind, aligned = op.attributes["input_kinds"][i]
    if val.kind != "array" or kind == "full":
        return val
    t = tensor_type(v)
    if kind == "scalar":
        return Val("scalar", f"{val.expr}[0]", (), t.dtype)
    if kind == "broadcast":
        steps = [0 if a == 1 and size != 1 else st
                 for a, size, st in zip(aligned, shape, strides(aligned))]
    else:  # "strided": ``aligned`` holds its element strides along the group's dimensions
        steps = list(aligned)
    target = src.prologue if v.id in src.invariant else lines
    group_type = type(t)(tuple(shape), t.dtype)
    return gather(src, val, group_type, 0, steps, target)


def fused_elementwise(src: LoopSource, op: Op, lines: list[str]) -> None:
    block = op.regions[0].entry
    if any(codegen.reduction_kind(inner) is not None for inner in block.ops):
        inline_region(src, op, lines)
        return
    shape = tuple(op.attributes["shape"])
    literals = dict(op.attributes.get("literals", ()))
    local: dict[int, str] = {}
    loads: list[str] = []
    arrays = False
    for i, arg in enumerate(block.arguments):
        if i in literals:
            local[arg.id] = literal(literals[i], arg.type.dtype)
            continue
        val = _input(src, op, i, shape, lines)
        if val.kind == "array":
            arrays = True
            local[arg.id] = src.name("x")
            loads.append(f"{local[arg.id]} = {val.expr}[q]")
        else:
            local[arg.id] = val.expr
    body: list[str] = []
    terminator = block.ops[-1]
    for inner in block.ops[:-1]:
        if inner.name in codegen.ABSORBED:  # its input is already in the group's layout
            local[inner.results[0].id] = local[inner.operands[0].id]
            continue
        name = src.name("f")
        body += element_lines(inner, [local[v.id] for v in inner.operands], name)
        local[inner.results[0].id] = name
    if terminator.name not in TERMINATORS:
        raise Unsupported("fused region without a terminator")
    if not arrays:  # every input one scalar: the group runs once
        lines.extend(body)
        for result, v in zip(op.results, terminator.operands):
            src.bind(result, Val.uniform(local[v.id], tensor_type(result)))
        return
    stores = []
    for result, v in zip(op.results, terminator.operands):
        t = tensor_type(result)
        out = src.buffer(t.shape, t.dtype)
        stores.append(f"{out}[q] = {local[v.id]}")
        src.bind(result, Val("array", out, t.shape, t.dtype))
    src.element_loop(lines, math.prod(shape), loads + body + stores)
