"""Helpers of the expansion tests: apply expansions to a loaded program and run it with the
reference rules (which have no fft or linear-algebra rule), compared with XLA's CPU backend.

``expand(program, table)`` replaces every op a table key names (``"stablehlo.fft"``, or
``custom_call_rule("Target")``) by the ops its expansion returns, inside regions and
called functions too, repeating until none is left (an expansion may emit ops another
expands).
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from pjrtkit.lowering.plan import build_plan
from pjrtkit.lowering.registry import CUSTOM_CALL, custom_call_rule
from pjrtkit.reference import REFERENCE
from pjrtkit.stablehlo.ir import Block, Program, Region
from pjrtkit.testing.programs import lower_program


def key_of(op) -> str:
    """The key of ``op``'s expansion: its name, or ``custom_call_rule(target)``."""
    if op.name == CUSTOM_CALL:
        return custom_call_rule(op.attributes.get("call_target_name", ""))
    return op.name


def _expand_ops(ops, table, program, counts):
    out = []
    for op in ops:
        expansion = table.get(key_of(op))
        if expansion is not None:
            counts[key_of(op)] = counts.get(key_of(op), 0) + 1
            out.extend(_expand_ops(expansion(op, program), table, program, counts))
            continue
        if op.regions:
            op = dataclasses.replace(op, regions=tuple(
                Region([Block(block.arguments, _expand_ops(block.ops, table, program, counts))
                        for block in region.blocks]) for region in op.regions))
        out.append(op)
    return out


def expand(program: Program, table) -> tuple[Program, dict[str, int]]:
    """``program`` with every op ``table`` names expanded; and how many of each were."""
    counts: dict[str, int] = {}
    functions = {}
    for name, function in program.functions.items():
        body = Region([Block(block.arguments, _expand_ops(block.ops, table, program, counts))
                       for block in function.body.blocks])
        functions[name] = dataclasses.replace(function, body=body)
    return Program(functions, program.entry, program.attributes), counts


def run_expanded(fn, args, table, *, platform=None, registry=REFERENCE):
    """``fn`` lowered (for ``platform``), expanded with ``table``, run with ``registry``;
    the flat outputs and the expansion counts."""
    program = lower_program(fn, *args, platform=platform)
    expanded, counts = expand(program, table)
    plan = build_plan(expanded, registry)
    flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(list(args))]
    with np.errstate(all="ignore"):
        return tuple(np.asarray(r) for r in plan(*flat)), counts


