"""``stablehlo.if`` and ``stablehlo.case`` inside native loops: a Python if/elif chain.

Each branch's ops are emitted into its own arm; values defined in an arm are used only there
(SSA dominance), values from before the op are read directly. Every result gets one home that
all arms write: a scalar local for rank-0 results, else a buffer allocated before the loop (an
arm's result may be a splat, a view or another arm-local value, so it is copied). ``case``
sends an out-of-range index to the last branch, as the spec and XLA do.
"""
from __future__ import annotations

from pjrtkit.stablehlo.ir import TERMINATORS, Op

from pjrtkit_cpu.loops.emitter import (INDENT, LoopSource, Unsupported, Val, rank0_expr,
                                        tensor_type)


def if_(src: LoopSource, op: Op, lines: list[str]) -> None:
    pred = rank0_expr(src.get(op.operands[0]), "if predicate")
    _arms(src, op, [f"if {pred}:", "else:"], lines)


def case(src: LoopSource, op: Op, lines: list[str]) -> None:
    index = src.get(op.operands[0])
    if index.dtype.kind not in "iu":
        raise Unsupported("case index")
    expr = rank0_expr(index, "case index")
    heads = [f"{'if' if i == 0 else 'elif'} {expr} == {i}:"
             for i in range(len(op.regions) - 1)] + ["else:"]
    _arms(src, op, heads if len(heads) > 1 else ["if True:"], lines)


def _arms(src: LoopSource, op: Op, heads: list[str], lines: list[str]) -> None:
    homes = []
    for v in op.results:
        t = tensor_type(v)
        if t.shape:
            homes.append(Val("array", src.buffer(t.shape, t.dtype), t.shape, t.dtype))
        else:
            homes.append(Val("scalar", src.name("s"), (), t.dtype))
    for head, region in zip(heads, op.regions):
        if len(region.blocks) != 1 or region.entry.arguments:
            raise Unsupported("branch with arguments")
        arm: list[str] = []
        block = region.entry
        for inner in block.ops[:-1]:
            src.emit_op(src, inner, arm)
        terminator = block.ops[-1]
        if terminator.name not in TERMINATORS:
            raise Unsupported("branch without a terminator")
        for home, v in zip(homes, terminator.operands):
            val = src.get(v)
            if home.kind == "scalar":
                arm.append(f"{home.expr} = {rank0_expr(val, 'branch result')}")
            else:
                arm += [f"for q in range({home.size}):",
                        f"{INDENT}{home.expr}[q] = {val.element('q')}"]
        lines.append(head)
        lines.extend(INDENT + line for line in arm or ["pass"])
    for v, home in zip(op.results, homes):
        src.bind(v, home)
