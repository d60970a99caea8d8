"""Simplifications a plugin may run on a loaded program before it plans it: rewrites that
change no result, only what a code generator sees (each a ``Program -> Program`` that returns
its input itself when there is nothing to do). ``drop_scheduling_hints`` is the one the core
runs on every program before the plugin sees it."""
from __future__ import annotations

import dataclasses

from pjrtkit.semantics.ops import EFFECTFUL
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
        blocks.append(_block_with(block, ops))
    return _region_with(region, blocks)


def _block_with(block: Block, ops: list) -> Block:
    """``block`` with ``ops`` (``block`` itself when they are its own)."""
    same = len(ops) == len(block.ops) and all(a is b for a, b in zip(ops, block.ops))
    return block if same else Block(block.arguments, ops)


def _region_with(region: Region, blocks: list) -> Region:
    """``region`` with ``blocks`` (``region`` itself when they are its own)."""
    if all(new is old for new, old in zip(blocks, region.blocks)):
        return region
    return Region(blocks)


# Ops never dropped even when nothing reads their results: what has effects or an order
# (``semantics.ops.EFFECTFUL``), and collectives, which meet the other devices of a launch.
_KEPT = EFFECTFUL | frozenset({
    "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter",
    "stablehlo.all_to_all", "stablehlo.collective_permute", "stablehlo.collective_broadcast",
})


def drop_dead_ops(program: Program) -> Program:
    """``program`` without the ops whose results nothing reads, when dropping them changes
    nothing else: ops without regions, effects, collectives or tokens (the results of a
    rewrite that gave their readers another value, such as ``x * (lr * c)`` for
    ``lr * (x * c)``, would otherwise still be computed at every execution). Dead chains go
    whole, in nested regions too."""
    return with_function_bodies(program, _drop_dead_in_body)


def _drop_dead_in_body(body: Region) -> Region:
    uses: dict[int, int] = {}
    _count_uses(body, uses)
    return _drop_dead(body, uses)


def _count_uses(region: Region, uses: dict[int, int]) -> None:
    for block in region.blocks:
        for op in block.ops:
            for v in op.operands:
                uses[v.id] = uses.get(v.id, 0) + 1
            for inner in op.regions:
                _count_uses(inner, uses)


def _removable(op) -> bool:
    return (not op.regions and op.name not in _KEPT and bool(op.results)
            and all(isinstance(r.type, TensorType) for r in op.results)
            and all(isinstance(v.type, TensorType) for v in op.operands))


def _drop_dead(region: Region, uses: dict[int, int]) -> Region:
    """``region`` without its dead ops (``region`` itself when it has none); ``uses`` is kept
    up to date. Blocks are walked last op first, so a dead op's operands are counted down
    before their producers are looked at."""
    blocks = []
    for block in region.blocks:
        kept = []
        changed = False
        for op in reversed(block.ops):
            if op.regions:
                regions = tuple(_drop_dead(r, uses) for r in op.regions)
                if any(new is not old for new, old in zip(regions, op.regions)):
                    op = dataclasses.replace(op, regions=regions)
                    changed = True
            elif _removable(op) and not any(uses.get(r.id, 0) for r in op.results):
                for v in op.operands:
                    uses[v.id] -= 1
                changed = True
                continue
            kept.append(op)
        blocks.append(Block(block.arguments, kept[::-1]) if changed else block)
    if all(new is old for new, old in zip(blocks, region.blocks)):
        return region
    return Region(blocks)


# Custom calls that order the schedule and nothing else: no results, no effect on any value.
# ``jax.experimental.control_deps.control_dep(a, b)`` emits ``control_dep`` (b after a) for
# XLA's scheduler, to overlap an asynchronous collective with math.
SCHEDULING_CUSTOM_CALLS = frozenset({"control_dep"})


def drop_scheduling_hints(program: Program) -> Program:
    """``program`` without its ``SCHEDULING_CUSTOM_CALLS``. Every value is still computed
    after the values it reads; a pjrtkit plugin runs a program's ops in an order data
    dependences allow, and a hint about which of two independent ops goes first changes no
    result (XLA honours it for speed only)."""
    return with_function_bodies(program, _drop_hints)


def _scheduling_hint(op) -> bool:
    return (op.name == "stablehlo.custom_call" and not op.results
            and op.attributes.get("call_target_name") in SCHEDULING_CUSTOM_CALLS)


def _drop_hints(region: Region) -> Region:
    blocks = []
    for block in region.blocks:
        ops = []
        for op in block.ops:
            if _scheduling_hint(op):
                continue
            if op.regions:
                regions = tuple(_drop_hints(r) for r in op.regions)
                if any(new is not old for new, old in zip(regions, op.regions)):
                    op = dataclasses.replace(op, regions=regions)
            ops.append(op)
        blocks.append(_block_with(block, ops))
    return _region_with(region, blocks)
