"""``stablehlo.while`` inside a native loop: a Python ``while True`` nested in the loop's code.

A loop inside a loop body (numpyro's NUTS checks the U-turn condition with one inside its
tree-building loop) would otherwise leave the whole outer loop interpreted. Each carry gets one
home for the inner loop's whole run: a scalar local for rank 0, else a buffer allocated before
the outer loop, into which the initial value is copied each time the inner loop starts; the
cond and body ops are emitted with the driver's rules, and the end of each inner iteration
updates the homes as the outer loop's does (``emitter.carry_updates``). The results are the
homes.
"""
from __future__ import annotations

from pjrtkit.stablehlo.ir import TERMINATORS, Op

from pjrtkit_cpu.loops.emitter import (INDENT, LoopSource, Unsupported, Val, carry_updates,
                                        rank0_expr, tensor_type)


def while_(src: LoopSource, op: Op, lines: list[str]) -> None:
    cond, body = (region.entry for region in op.regions)
    if cond.ops[-1].name not in TERMINATORS or body.ops[-1].name not in TERMINATORS:
        raise Unsupported("inner loop blocks without a terminator")
    types = [tensor_type(v) for v in op.operands]
    homes: list[Val] = []
    for v, t in zip(op.operands, types):
        init = src.get(v)
        if t.shape:
            home = Val("array", src.buffer(t.shape, t.dtype, prefix="w"), t.shape, t.dtype)
            lines += [f"for q in range({t.size}):", f"{INDENT}{home.expr}[q] = {init.element('q')}"]
        else:
            home = Val("scalar", src.name("w"), (), t.dtype)
            lines.append(f"{home.expr} = {init.element('0')}")
        homes.append(home)
    for block in (cond, body):
        for argument, home in zip(block.arguments, homes):
            src.bind(argument, home)
    cond_lines: list[str] = []
    for inner in cond.ops[:-1]:
        src.emit_op(src, inner, cond_lines)
    pred = rank0_expr(src.get(cond.ops[-1].operands[0]), "inner loop condition")
    body_lines: list[str] = []
    for inner in body.ops[:-1]:
        src.emit_op(src, inner, body_lines)
    body_lines += carry_updates(src, body.ops[-1].operands, [h.expr for h in homes], types)
    lines.append("while True:")
    lines += [INDENT + line for line in cond_lines]
    lines += [f"{INDENT}if not {pred}:", f"{2 * INDENT}break"]
    lines += [INDENT + line for line in body_lines]
    for v, home in zip(op.results, homes):
        src.bind(v, home)
