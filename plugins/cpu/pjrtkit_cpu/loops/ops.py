"""The native-loop driver's rules: elementwise ops from the op table, and the loop-nest rules
of the ops that are not one element per element (constants, reductions; structural ops in
``shapes``, dynamic slices in ``indexing``, dots in ``dot``, if/case in ``branches``, inner
loops in ``inner_while``, fused groups in ``fused``). Each rule binds the op's results in a
``LoopSource`` and appends the statements computing them to ``lines``; an op or shape it
cannot express raises ``Unsupported``.

Elementwise ops are the op table's rules (``loopnest.optable``), the same objects fused groups
and row programs use, so they have exactly the same XLA semantics; here per-element libm calls
are allowed (``vectorized=False``: the alternative is the interpreted loop). An elementwise op
whose operands are all scalars or splats runs once, not once per element.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.stablehlo.ir import Op, free_uses

from pjrtkit_cpu.fusion.rewrite import FUSED_OP
from pjrtkit_cpu.fusion.rows import ROWS_OP
from pjrtkit_cpu.loopnest import optable
from pjrtkit_cpu.loopnest.values import BOOL, literal, scalar_type, strides
from pjrtkit_cpu.loops import branches, fused, indexing, inner_while, shapes
from pjrtkit_cpu.loops.dot import dot_general
from pjrtkit_cpu.loops.emitter import (INDENT, LoopSource, Unsupported, Val, element_lines,
                                        tensor_type)
from pjrtkit_cpu.loops.ownership import DYNAMIC_UPDATE_SLICE, IN_PLACE_UPDATE

# The table this driver emits elementwise ops with (a test checks every driver names the same).
OP_TABLE = optable.OP_TABLE


def constant(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    value = np.asarray(op.attributes["value"])
    value = np.broadcast_to(value, t.shape).astype(t.dtype)
    if value.size == 0:
        raise Unsupported("empty constant")
    flat = value.reshape(-1)
    uniform = (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all()
    if uniform:
        src.bind(op.results[0], Val.uniform(literal(flat[0], t.dtype), t))
    else:
        src.bind(op.results[0], Val("array", src.constant(flat, t.dtype), t.shape, t.dtype))
        src.invariant.add(op.results[0].id)


def elementwise(src: LoopSource, op: Op, lines: list[str], element=element_lines) -> None:
    """One element per element: ``element(op, operand element names, result name)`` gives the
    statements (the op table's by default)."""
    t = tensor_type(op.results[0])
    if len(op.results) != 1:
        raise Unsupported(op.name)
    operands = [src.get(v) for v in op.operands]
    for v in op.operands:
        tensor_type(v)
    result = src.name("t")
    if all(o.kind not in ("array", "chained") for o in operands):
        lines.extend(element(op, [o.expr for o in operands], result))
        src.bind(op.results[0], Val.uniform(result, t))
        return
    names = []
    loads = []
    for i, o in enumerate(operands):
        if o.kind == "array":
            names.append(f"{result}_{i}")
            loads.append(f"{result}_{i} = {o.expr}[q]")
        elif o.kind == "chained":
            names.append(o.expr)
            loads.extend(src.chained_code.pop(o.expr))
        else:
            names.append(o.expr)
    code = loads + element(op, names, result)
    if op.results[0].id in src.chainable:  # its reader's loop computes it
        src.chained_code[result] = code
        src.bind(op.results[0], Val("chained", result, t.shape, t.dtype))
        return
    out = src.buffer(t.shape, t.dtype)
    src.element_loop(lines, t.size, [*code, f"{out}[q] = {result}"])
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def _bitcast_element(op: Op, names: list[str], result: str) -> list[str]:
    source, target = tensor_type(op.operands[0]).dtype, tensor_type(op.results[0]).dtype
    if source.itemsize != target.itemsize or BOOL in (source, target):
        raise Unsupported(f"bitcast_convert from {source} to {target}")
    if source.kind in "iu" and target.kind in "iu":  # between integers of one width: a cast
        return [f"{result} = {scalar_type(target)}({names[0]})"]
    return [f"{result} = {scalar_type(source)}({names[0]}).view({scalar_type(target)})"]


def bitcast_convert(src: LoopSource, op: Op, lines: list[str]) -> None:
    """A bitcast between types of one width (random bits made floats, floats' sign bits): per
    element, the op table's spelling of a scalar bitcast."""
    elementwise(src, op, lines, element=_bitcast_element)


def reduce(src: LoopSource, op: Op, lines: list[str]) -> None:
    """One input, a scalar init and a body ``return op(a, b)``: the combine step is the op
    table's rule of the body's op, so max/min/NaN/wrap-around are XLA's."""
    if len(op.operands) != 2 or len(op.regions) != 1:
        raise Unsupported("variadic reduce")
    block = op.regions[0].entry
    if len(block.ops) != 2 or len(block.arguments) != 2:
        raise Unsupported("reduce body")
    combine, ret = block.ops
    if ret.operands != combine.results or set(combine.operands) != set(block.arguments) \
            or len(combine.operands) != 2:
        raise Unsupported("reduce body")
    t = tensor_type(op.results[0])
    x, init = src.get(op.operands[0]), src.get(op.operands[1])
    if init.kind != "scalar" or x.kind == "chained":
        raise Unsupported(f"reduce of a {x.kind} input with a {init.kind} init")
    reduced = set(op.attributes["dimensions"])
    layout = strides(x.shape)
    kept = [d for d in range(len(x.shape)) if d not in reduced]
    acc = src.name("acc")
    element = src.name("e")
    step = src.name("r")
    out = src.buffer(t.shape, t.dtype) if t.shape else None
    counter = src.name("o")
    lines.append(f"{counter} = 0")
    indent = ""
    terms = ["0"]
    for d in kept + sorted(reduced):
        if d == (sorted(reduced) or [None])[0]:
            lines.append(f"{indent}{acc} = {init.expr}")
        if x.shape[d] == 1:
            continue
        index = src.name("i")
        lines.append(f"{indent}for {index} in range({x.shape[d]}):")
        indent += INDENT
        terms.append(f"{index} * {layout[d]}")
    if not reduced:
        lines.append(f"{indent}{acc} = {init.expr}")
    lines.append(f"{indent}{element} = {x.element(' + '.join(terms))}")
    names = [acc if v is block.arguments[0] else element for v in combine.operands]
    lines.extend(indent + line for line in element_lines(combine, names, step))
    lines.append(f"{indent}{acc} = {step}")
    if out is not None:
        indent = INDENT * sum(1 for d in kept if x.shape[d] != 1)
        lines.append(f"{indent}{out}[{counter}] = {acc}")
        lines.append(f"{indent}{counter} += 1")
        src.bind(op.results[0], Val("array", out, t.shape, t.dtype))
    else:
        src.bind(op.results[0], Val("scalar", acc, (), t.dtype))


# Loop-nest rules of the ops that are not one element per element (none of them is in the op
# table: a test checks that every op has exactly one rule).
LOOP_NEST_RULES = {
    "stablehlo.constant": constant,
    "stablehlo.bitcast_convert": bitcast_convert,
    "stablehlo.reduce": reduce,
    "stablehlo.broadcast_in_dim": shapes.broadcast_in_dim,
    "stablehlo.reshape": shapes.reshape,
    "stablehlo.iota": shapes.iota,
    "stablehlo.slice": shapes.slice_,
    "stablehlo.transpose": shapes.transpose,
    "stablehlo.concatenate": shapes.concatenate,
    "stablehlo.dynamic_slice": indexing.dynamic_slice,
    "stablehlo.dynamic_update_slice": indexing.dynamic_update_slice,
    "stablehlo.scatter": indexing.scatter,
    IN_PLACE_UPDATE: indexing.dynamic_update_slice,
    "stablehlo.dot_general": dot_general,
    "stablehlo.if": branches.if_,
    "stablehlo.case": branches.case,
    "stablehlo.while": inner_while.while_,
    FUSED_OP: fused.fused_elementwise,
    ROWS_OP: fused.inline_region,
}
_WITH_REGIONS = frozenset({"stablehlo.reduce", "stablehlo.scatter", "stablehlo.if", "stablehlo.case",
                           "stablehlo.while", FUSED_OP, ROWS_OP})


def is_elementwise(op: Op) -> bool:
    """True when ``emit_op`` emits ``op`` with ``elementwise`` (the op table's rule)."""
    return op.name not in LOOP_NEST_RULES and not op.regions and op.name in OP_TABLE


def emit_op(src: LoopSource, op: Op, lines: list[str]) -> None:
    """Appends ``op``'s code to ``lines`` (its rule by name, else the op table's)."""
    rule = LOOP_NEST_RULES.get(op.name)
    if rule is None or (op.regions and op.name not in _WITH_REGIONS):
        if op.regions or op.name not in OP_TABLE:
            raise Unsupported(op.name)
        rule = elementwise
    for v in op.results:
        if math.prod(tensor_type(v).shape) == 0:
            raise Unsupported("empty tensor")
    rule(src, op, lines)


def chainable_values(blocks) -> set[int]:
    """Ids of values ``elementwise`` hands to their reader as ``chained``: the result of an
    elementwise op, read exactly once in the whole loop (``blocks`` and their nested regions),
    as one operand of a later elementwise op of the same block, with no op between that may
    write memory the chained statements read (an update in place, a dynamic_update_slice, an op
    with regions, which may hold either)."""
    reads: dict[int, int] = {}
    for block in blocks:
        for op in block.ops:
            for u in free_uses(op):
                reads[u] = reads.get(u, 0) + 1
    found: set[int] = set()
    for block in blocks:
        pending: set[int] = set()  # elementwise results defined since the last writer
        for op in block.ops:
            if is_elementwise(op):
                for v in op.operands:
                    if (v.id in pending and reads.get(v.id) == 1
                            and sum(w is v for w in op.operands) == 1):
                        found.add(v.id)
                if len(op.results) == 1:
                    pending.add(op.results[0].id)
            if op.regions or op.name in (IN_PLACE_UPDATE, DYNAMIC_UPDATE_SLICE):
                pending.clear()
    return found
