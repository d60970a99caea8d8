"""Expansions: what a backend lacks, rewritten into the primitive set it declares.

A backend that implements ``pjrtkit_primitive_set`` gets every program rewritten by
``expand(program, primitives)`` before its ``pjrtkit_compile`` sees it (the core's
``Backend.compile`` calls it). Backend-neutral, on the plain-Python IR, in three steps:

1. **Op expansions**, applied until none applies: an op the set does not implement (its name,
   or its custom-call target, is not declared, or one of its types is not) and for which an
   expansion exists is replaced by the expansion's ops. An expansion is a function
   ``(op, program) -> list[Op]`` returning standard StableHLO ops that compute exactly
   ``op.results`` (the same ``Value`` objects, of the same types); it may add functions to
   ``program.functions``. Every module of this package may contribute a table
   ``EXPANSIONS = {key: expansion}``, keyed by op name (``"stablehlo.fft"``) or custom-call
   target (``"custom_call @Qr"``, or ``custom_call_rule("Qr")``'s spelling); a key claimed
   twice is an error. The ops they return may use complex and narrow types: the next steps
   lower those. A module may also export ``JAX_LOWERING_RULES`` (a function returning
   ``JaxLoweringRule`` records): JAX rules for primitives JAX lowers only on its own platforms,
   registered for backends declaring a primitive set (``jax_lowering_rules``).
2. **Complex numbers onto pairs of reals** (``complex.py``), for the complex types the set
   lacks.
3. **float8, float4_e2m1fn, int2/int4/uint2/uint4 onto their compute types** (``narrow.py``),
   for those the set lacks.

What remains outside the set after that stays in the program: the backend's compile answers
UNIMPLEMENTED for it, naming it, as before. A backend's own rule always wins, because only ops
the set does not implement are touched.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable

import numpy as np

from pjrtkit.errors import Unimplemented
from pjrtkit.lowering.registry import CUSTOM_CALL, custom_call_rule
from pjrtkit.stablehlo.ir import TERMINATORS, Block, Op, Program, Region, TensorType, walk_ops
from pjrtkit.types import Capabilities, PrimitiveSet

Expansion = Callable[[Op, Program], list[Op]]

# Ops every plan runs whatever the set says: the plan builder makes constants through the
# backend's payloads, calls functions and returns.
ALWAYS = frozenset({"stablehlo.constant", "func.call", *TERMINATORS})
# Expansions applied to ops they produced, at most this deep (an expansion that keeps
# producing its own op is a bug, reported instead of looping).
MAX_DEPTH = 32
# Modules of this package that are the mechanism, not expansions.
_MECHANISM = frozenset({"build", "legalize", "formats", "narrow_codec"})
# Modules with rewrites that backends call from their own rules (``lower_by_expansion``) for a
# case of an op they otherwise implement: they have no EXPANSIONS table.


def expansion_key(op: Op) -> str:
    """The key an op's expansion is registered under: its name, or for a custom call
    ``custom_call_rule(target)``."""
    if op.name == CUSTOM_CALL:
        return custom_call_rule(op.attributes.get("call_target_name", ""))
    return op.name


def _normalized(key: str) -> str:
    """``"custom_call @Qr"`` and ``"stablehlo.custom_call@Qr"`` are the same key."""
    if key.startswith("custom_call @"):
        return custom_call_rule(key[len("custom_call @"):])
    return key


def _expansion_modules():
    return [importlib.import_module(f"{__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
            if info.name not in _MECHANISM]


@functools.cache
def op_expansions() -> dict[str, Expansion]:
    """Every module's ``EXPANSIONS`` table, merged (imported on first use)."""
    table: dict[str, Expansion] = {}
    owner: dict[str, str] = {}
    for module in _expansion_modules():
        for key, expansion in getattr(module, "EXPANSIONS", {}).items():
            key = _normalized(key)
            if key in table:
                raise ValueError(f"expansion {key!r} is defined by both {owner[key]} and "
                                 f"{module.__name__}")
            table[key] = expansion
            owner[key] = module.__name__
    return table


def jax_lowering_rules() -> list:
    """JAX lowering rules the expansions bring (``JaxLoweringRule`` records) for primitives JAX
    lowers only on its own platforms (eigh, svd, ...): every module's ``JAX_LOWERING_RULES``, a
    function returning them (JAX is imported only when it is called). ``Backend`` adds them
    for a backend declaring a primitive set, where its plugin gives no rule of its own."""
    rules = []
    for module in _expansion_modules():
        make = getattr(module, "JAX_LOWERING_RULES", None)
        if make is not None:
            rules.extend(make())
    return rules


def implements(primitives: PrimitiveSet, op: Op) -> bool:
    """Whether the backend runs ``op`` itself: its name (or custom-call target) is declared and
    every operand and result type is one of the declared dtypes."""
    if op.name in ALWAYS:
        return True
    if op.name == CUSTOM_CALL:
        if op.attributes.get("call_target_name") not in primitives.custom_call_targets:
            return False
    elif op.name not in primitives.ops:
        return False
    return all(v.type.dtype.name in primitives.dtypes for v in (*op.operands, *op.results)
               if isinstance(v.type, TensorType))


def expand(program: Program, primitives: PrimitiveSet) -> Program:
    """``program`` rewritten into ``primitives`` as far as the expansions reach (see the module
    docstring); ``program`` itself is not changed."""
    from pjrtkit.expansions.complex import ComplexLowering
    from pjrtkit.expansions.legalize import lower_types
    from pjrtkit.expansions.narrow import NarrowLowering

    program = _apply_op_expansions(program, primitives)
    lacking = _lacking_dtypes(program, primitives)
    complex_types = [d for d in lacking if d.kind == "c"]
    if complex_types:
        program = lower_types(program, ComplexLowering(complex_types),
                              primitives.custom_call_targets)
        lacking = _lacking_dtypes(program, primitives)
    from pjrtkit.expansions.formats import NARROW

    narrow_types = [d for d in lacking if d in NARROW]
    if narrow_types:
        program = lower_types(program, NarrowLowering(narrow_types),
                              primitives.custom_call_targets)
    return program


def _lacking_dtypes(program: Program, primitives: PrimitiveSet) -> set[np.dtype]:
    found = set()

    def visit(values):
        for v in values:
            if isinstance(v.type, TensorType) and v.type.dtype.name not in primitives.dtypes:
                found.add(v.type.dtype)

    def walk(region: Region):
        for block in region.blocks:
            visit(block.arguments)
            for op in block.ops:
                visit(op.results)
                for inner in op.regions:
                    walk(inner)

    for function in program.functions.values():
        visit(function.arguments)
        walk(function.body)
    return found


def _apply_op_expansions(program: Program, primitives: PrimitiveSet) -> Program:
    table = op_expansions()
    if not table:
        return program
    if not any(_expandable(op, primitives, table) for op in walk_ops(program)):
        return program
    functions = dict(program.functions)
    work = dataclasses.replace(program, functions=functions)
    done: set[str] = set()
    while len(done) < len(functions):  # expansions may add functions
        for name in [n for n in functions if n not in done]:
            done.add(name)
            function = functions[name]
            functions[name] = dataclasses.replace(
                function, body=_expand_region(function.body, work, primitives, table, 0))
    return work


def _expandable(op: Op, primitives: PrimitiveSet, table) -> bool:
    return not implements(primitives, op) and expansion_key(op) in table


def _expand_region(region: Region, program: Program, primitives, table, depth: int) -> Region:
    return Region([Block(block.arguments, _expand_ops(block.ops, program, primitives, table,
                                                      depth))
                   for block in region.blocks])


def _expand_ops(ops, program, primitives, table, depth: int) -> list[Op]:
    out: list[Op] = []
    for op in ops:
        expansion = None if implements(primitives, op) else table.get(expansion_key(op))
        if expansion is None:
            if op.regions:
                op = dataclasses.replace(op, regions=tuple(
                    _expand_region(r, program, primitives, table, depth) for r in op.regions))
            out.append(op)
            continue
        if depth >= MAX_DEPTH:
            raise Unimplemented(f"expansion of {op.name} did not terminate after {MAX_DEPTH} "
                                f"levels ({op.describe()})")
        replacement = expansion(op, program)
        out.extend(_expand_ops(replacement, program, primitives, table, depth + 1))
    return out


def lower_by_expansion(op: Op, ctx, expansion: Expansion):
    """For a lowering rule that lacks a case of its op (a batched gather, a grouped
    convolution): the kernel of ``expansion``'s ops, compiled with the backend's own rules as a
    region taking the op's operands (``ctx.compile_region``). The expansion must not give the
    same case back."""
    ops = expansion(op, ctx.program)
    terminator = Op("stablehlo.return", tuple(op.results), (), {}, (), op.location)
    operands = tuple(op.operands)
    first: dict[int, int] = {}  # value id -> its first position (x @ x reads one value twice)
    for i, value in enumerate(operands):
        first.setdefault(value.id, i)
    unique = tuple(operands[i] for i in first.values())
    kernel = ctx.compile_region(Region([Block(unique, [*ops, terminator])]))
    if len(unique) == len(operands):
        return kernel
    picks, count = tuple(first.values()), len(operands)

    def run_with_repeated_operands(*args):
        return kernel(*(args[i] for i in picks), *args[count:])  # (then the captures)

    return run_with_repeated_operands


def reachable_dtypes(primitives: PrimitiveSet) -> frozenset[str]:
    """The dtype names a backend with ``primitives`` runs through the expansions: complex
    types over their part type, narrow types over the integer and float ops their rounding
    needs."""
    from pjrtkit.expansions.formats import COMPLEX_PARTS, FLOAT8_AND_FLOAT4, NARROW_INTS

    have = primitives.dtypes
    out = {c.name for c, part in COMPLEX_PARTS.items() if part.name in have}
    if {"uint8", "uint32", "float32", "float16", "bool"} <= have:
        out.update(d.name for d in FLOAT8_AND_FLOAT4)
    if {"uint8", "int8", "bool"} <= have:
        out.update(d.name for d in NARROW_INTS)
    return frozenset(out)


def widened(capabilities: Capabilities, primitives: PrimitiveSet) -> Capabilities:
    """``capabilities`` with what the expansions add to a backend declaring ``primitives``:
    the dtypes they reach and the ops they expand."""
    dtypes = capabilities.dtypes
    if dtypes is not None:
        dtypes = dtypes | reachable_dtypes(primitives)
    ops = capabilities.ops
    if ops is not None:
        prefix = custom_call_rule("")
        ops = ops | {k for k in op_expansions() if not k.startswith(prefix)}
    return dataclasses.replace(capabilities, dtypes=dtypes, ops=ops)
