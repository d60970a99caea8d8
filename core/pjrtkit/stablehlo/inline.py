"""Inline ``func.call`` ops into a block, so whoever compiles the block sees every op it runs.

JAX wraps every ``fori_loop``/``scan`` step in ``func.call @closed_call``, every
``dynamic_update_index_in_dim`` in a call of its own, and every ``jnp.where`` in a reduce or sort
body in ``func.call @_where``. Called functions are planned once, for their declared types, and
shared, so nothing about the call site can be used inside them. Inlined, the ops of the callee
become ops of the block:

- a loop body's in-place update analysis and native loop compiler (the cpu plugin's
  ``ownership`` and ``native``) see through the call, and the interpreted body saves one plan
  call per call op;
- a scalar region applied to whole arrays (``pjrtkit.reference.reduce.vectorized_region``: reduce,
  sort and scatter bodies) can give the callee's ops the array shape too; a call planned for
  scalars cannot take arrays.

Inlined results get fresh value ids (a function called twice must not define the same id twice
in one block); ids start far above anything the loader assigns.
"""
from __future__ import annotations

import dataclasses

from pjrtkit.stablehlo.ir import (TERMINATORS, Block, Op, Program, Region, Value, fresh_value,
                                  rename_reads)

# Calls whose callee (with its own inlined calls) has more ops than this stay calls: inlining
# a large function into several loops would multiply compile work for little gain.
MAX_INLINED_OPS = 500


def inline_calls(block: Block, program: Program) -> Block:
    """``block`` with its top-level ``func.call`` ops replaced by the callees' ops (recursively);
    ``block`` itself when there is no call to inline."""
    if not any(op.name == "func.call" for op in block.ops):
        return block
    ops: list[Op] = []
    subst: dict[int, Value] = {}
    _splice(block.ops, subst, ops, program, depth=0)
    return Block(block.arguments, ops)


def inline_calls_everywhere(block: Block, program: Program) -> Block:
    """``inline_calls`` on ``block`` and on every block of its ops' regions, at any depth (a
    loop body's if/case branches and inner loops call functions too: numpyro's NUTS draws its
    random bits in a case branch); ``block`` itself when nothing changed."""
    block = inline_calls(block, program)
    ops: list[Op] = []
    changed = False
    for op in block.ops:
        if op.regions:
            regions = tuple(Region([inline_calls_everywhere(b, program) for b in r.blocks])
                            for r in op.regions)
            if any(new is not old for r, nr in zip(op.regions, regions)
                   for old, new in zip(r.blocks, nr.blocks)):
                op = dataclasses.replace(op, regions=regions)
                changed = True
        ops.append(op)
    return Block(block.arguments, ops) if changed else block


def inline_region_calls(region: Region, program: Program) -> Region:
    """``region`` (one block) with its calls inlined (``inline_calls``); ``region`` itself when
    it calls nothing."""
    block = inline_calls(region.entry, program)
    return region if block is region.entry else Region([block])


def _splice(source_ops, subst: dict[int, Value], out: list[Op], program: Program,
            depth: int) -> list[Value] | None:
    """Append copies of ``source_ops`` to ``out`` with operands renamed by ``subst``. Returns
    the (renamed) operands of the terminator, which is appended only at depth 0."""
    for op in source_ops:
        operands = tuple(subst.get(v.id, v) for v in op.operands)
        if op.name in TERMINATORS:
            if depth == 0:
                out.append(dataclasses.replace(op, operands=operands))
            return list(operands)
        callee = _inlinable_callee(op, program, depth)
        if callee is not None:
            inner = dict(subst)
            inner.update((a.id, v) for a, v in zip(callee.arguments, operands))
            returned = _splice(callee.body.entry.ops, inner, out, program, depth + 1)
            subst.update((r.id, v) for r, v in zip(op.results, returned))
            continue
        if depth == 0 and not op.regions and operands == op.operands:
            out.append(op)  # untouched: keep the original op (and its value ids)
            continue
        results = tuple(fresh_value(r) for r in op.results) if depth else op.results
        subst.update((old.id, new) for old, new in zip(op.results, results))
        regions = tuple(rename_reads(r, subst) for r in op.regions)
        out.append(dataclasses.replace(op, operands=operands, results=results, regions=regions))
    return None


def _inlinable_callee(op: Op, program: Program, depth: int):
    if op.name != "func.call" or depth > 8:
        return None
    callee = program.functions.get(op.attributes.get("callee", ""))
    if callee is None or len(callee.body.blocks) != 1:
        return None
    if _count_ops(callee.body.entry, program, 0) > MAX_INLINED_OPS:
        return None
    return callee


def _count_ops(block: Block, program: Program, depth: int) -> int:
    if depth > 8:
        return MAX_INLINED_OPS + 1  # (deeply nested or recursive calls: never inlined)
    total = 0
    for op in block.ops:
        total += 1
        if op.name == "func.call":
            callee = program.functions.get(op.attributes.get("callee", ""))
            if callee is not None:
                total += _count_ops(callee.body.entry, program, depth + 1)
    return total

