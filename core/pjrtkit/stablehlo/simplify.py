"""Simplifications a plugin may run on a loaded program before it plans it: rewrites that
change no result, only what a code generator sees (each a ``Program -> Program`` that returns
its input itself when there is nothing to do)."""
from __future__ import annotations

import dataclasses

from pjrtkit.stablehlo.ir import Block, Program, Region, TensorType, Value, with_function_bodies

CONVERT = "stablehlo.convert"


def drop_identity_converts(program: Program) -> Program:
    """``program`` without the ``stablehlo.convert`` ops whose result type is their operand's;
    their readers read the operand. JAX emits one for every weak-typed Python scalar
    (``x * 0.999`` reads ``convert(f32[]) -> f32[]``), and it would keep an elementwise
    program from being one fused loop; XLA's algebraic simplifier drops them the same way."""
    return with_function_bodies(program, _drop_in_body)


def _drop_in_body(body: Region) -> Region:
    renamed: dict[int, Value] = {}
    _collect(body, renamed)
    return _rewrite(body, renamed) if renamed else body


def _identity_convert(op) -> bool:
    if op.name != CONVERT or len(op.operands) != 1 or len(op.results) != 1:
        return False
    source, result = op.operands[0].type, op.results[0].type
    return isinstance(source, TensorType) and source == result


def _collect(region: Region, renamed: dict[int, Value]) -> None:
    for block in region.blocks:
        for op in block.ops:
            if _identity_convert(op):
                source = op.operands[0]
                renamed[op.results[0].id] = renamed.get(source.id, source)
            for inner in op.regions:
                _collect(inner, renamed)


def _rewrite(region: Region, renamed: dict[int, Value]) -> Region:
    """``region`` without the dropped converts and reading their operands (``region`` itself
    when nothing in it changed)."""
    blocks = []
    for block in region.blocks:
        ops = []
        for op in block.ops:
            if op.results and op.results[0].id in renamed and _identity_convert(op):
                continue
            operands = tuple(renamed.get(v.id, v) for v in op.operands)
            regions = tuple(_rewrite(r, renamed) for r in op.regions)
            if any(new is not old for new, old in zip(operands, op.operands)) or any(
                    new is not old for new, old in zip(regions, op.regions)):
                op = dataclasses.replace(op, operands=operands, regions=regions)
            ops.append(op)
        same = len(ops) == len(block.ops) and all(a is b for a, b in zip(ops, block.ops))
        blocks.append(block if same else Block(block.arguments, ops))
    if all(new is old for new, old in zip(blocks, region.blocks)):
        return region
    return Region(blocks)
