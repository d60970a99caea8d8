"""Rewriting a program's values of one kind of type into other types (one value into N parts).

The complex pass (each complex value becomes its real and imaginary parts) and the narrow-type
pass (each float8/int4 value becomes one value of a wider type) are one walk with different
rules: a ``TypeLowering`` says which types it rewrites, into which part types, how a stored
value is split into parts and joined back, and gives one rule per op. The walk
(``lower_types``) does the rest for every function, block and region:

- the entry function keeps its signature (JAX's buffers arrive and leave in their own types):
  its arguments are split at the top of its body and its results joined before it returns;
  the other functions take and return parts, and their calls follow;
- region arguments (loop carries, reduce accumulators, comparator scalars) become parts;
- an op that touches no rewritten type is kept (its regions are still walked); an op that does
  goes to its rule, which emits ops computing the parts of each result; an op without a rule
  is UNIMPLEMENTED naming it and the type.

Rules read their operands' parts from ``ins`` (one tuple per operand; a value the lowering
does not rewrite is a 1-tuple of itself) and return one tuple of parts per result. Generic rules
for every lowering live here: ``per_part`` (structural ops, applied to each part alike),
``flattened`` (ops whose operands, results and region arguments are lists: while, if, reduce,
...), ``composite`` (a call of its decomposition) and ``opaque`` (an op the backend runs on
stored values: joined before, split after).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from pjrtkit.errors import Unimplemented
from pjrtkit.expansions.build import OpBuilder
from pjrtkit.stablehlo.ir import (TERMINATORS, Block, Function, Op, Program, Region,
                                  TensorType, TupleType, Value, fresh_value)

Parts = tuple[Value, ...]


class TypeLowering(Protocol):
    """One pass's rewriting of types (see the module docstring)."""

    description: str  # "complex numbers onto pairs of reals", for messages

    def lowers(self, type) -> bool:
        """Whether values of ``type`` are rewritten."""

    def part_types(self, type: TensorType) -> tuple[TensorType, ...]:
        """The types of a rewritten value's parts."""

    def split(self, b: OpBuilder, value: Value) -> Parts:
        """The parts of a stored value (an entry argument, an opaque op's result)."""

    def join(self, b: OpBuilder, parts: Parts, type: TensorType) -> Value:
        """A stored value of ``type`` from its parts."""

    def rule(self, op: Op) -> "Rule | None":
        """The rule for an op that touches a rewritten type, or None."""


class Walk:
    """The state of one ``lower_types`` run; rules receive it as ``ctx``."""

    def __init__(self, lowering: TypeLowering, program: Program, custom_call_targets):
        self.lowering = lowering
        self.program = program
        self.custom_call_targets = frozenset(custom_call_targets)
        self.parts: dict[int, Parts] = {}

    # -- what rules use --------------------------------------------------------------------
    def touches(self, value: Value) -> bool:
        return self.lowering.lowers(value.type)

    def part_types(self, value: Value) -> tuple:
        t = value.type
        return self.lowering.part_types(t) if self.lowering.lowers(t) else (t,)

    def read(self, value: Value) -> Parts:
        return self.parts.get(value.id, (value,))

    def unimplemented(self, op: Op, why: str = "") -> Unimplemented:
        types = sorted({str(getattr(v.type, "dtype", v.type)) for v in (*op.operands, *op.results)
                        if self.lowering.lowers(v.type)})
        return Unimplemented(
            f"{op.name} on {', '.join(types)} has no rewrite ({self.lowering.description})"
            f"{': ' + why if why else ''} ({op.describe()})")

    def lower_region(self, region: Region,
                     order: Callable[[list[Parts]], Sequence[Value]] | None = None) -> Region:
        """``region`` with its arguments and everything inside rewritten; ``order`` arranges
        the arguments' parts (default: each argument's parts in its place)."""
        blocks = []
        for block in region.blocks:
            b = OpBuilder()
            arg_parts = []
            for arg in block.arguments:
                parts = (tuple(fresh_value(t) for t in self.lowering.part_types(arg.type))
                         if self.lowering.lowers(arg.type) else (arg,))
                self.parts[arg.id] = parts
                arg_parts.append(parts)
            arguments = (tuple(order(arg_parts)) if order is not None
                         else tuple(v for parts in arg_parts for v in parts))
            self._lower_ops(block.ops, b, boundary=False)
            blocks.append(Block(arguments, b.ops))
        return Region(blocks)

    # -- the walk --------------------------------------------------------------------------
    def _lower_ops(self, ops: list[Op], b: OpBuilder, boundary: bool) -> None:
        for op in ops:
            b.location = op.location
            if op.name in TERMINATORS:
                operands = []
                for v in op.operands:
                    parts = self.read(v)
                    if boundary and self.lowering.lowers(v.type):
                        operands.append(self.lowering.join(b, parts, v.type))
                    else:
                        operands.extend(parts)
                b.emit_into(op.name, operands, (), op.attributes)
                continue
            touched = any(self.lowering.lowers(v.type) for v in (*op.operands, *op.results))
            if op.name == "func.call":
                touched = touched or self._callee_changes(op.attributes.get("callee"))
            if not touched:
                regions = tuple(self.lower_region(r) for r in op.regions)
                b.emit_into(op.name, [self.read(v)[0] for v in op.operands], op.results,
                            op.attributes, regions)
                continue
            rule = self.lowering.rule(op)
            if rule is None:
                raise self.unimplemented(op)
            ins = [self.read(v) for v in op.operands]
            outs = rule(op, b, ins, self)
            if len(outs) != len(op.results):
                raise AssertionError(f"rule for {op.name} gave {len(outs)} results")
            for result, parts in zip(op.results, outs):
                self.parts[result.id] = tuple(parts)

    def _callee_changes(self, name) -> bool:
        function = self.program.functions.get(name)
        return function is not None and _signature_touches(function, self.lowering)

    def lower_function(self, function: Function, entry: bool) -> Function:
        b = OpBuilder()
        arguments = []
        for arg in function.arguments:
            if not self.lowering.lowers(arg.type):
                arguments.append(arg)
                self.parts[arg.id] = (arg,)
            elif entry:
                arguments.append(arg)
                self.parts[arg.id] = tuple(self.lowering.split(b, arg))
            else:
                parts = tuple(fresh_value(t) for t in self.lowering.part_types(arg.type))
                arguments.extend(parts)
                self.parts[arg.id] = parts
        self._lower_ops(function.body.entry.ops, b, boundary=entry)
        body = Region([Block(tuple(arguments), b.ops), *function.body.blocks[1:]])
        if entry:
            return dataclasses.replace(function, body=body)
        result_types = tuple(t for rt in function.result_types for t in self._types(rt))
        arg_attributes = function.arg_attributes
        if len(arguments) != len(function.arguments):
            arg_attributes = ()
        result_attributes = function.result_attributes
        if len(result_types) != len(function.result_types):
            result_attributes = ()
        return dataclasses.replace(function, arguments=tuple(arguments),
                                   result_types=result_types, body=body,
                                   arg_attributes=arg_attributes,
                                   result_attributes=result_attributes)

    def _types(self, t) -> tuple:
        return self.lowering.part_types(t) if self.lowering.lowers(t) else (t,)


def _signature_touches(function: Function, lowering: TypeLowering) -> bool:
    return any(lowering.lowers(v.type) for v in function.arguments) or \
        any(lowering.lowers(t) for t in function.result_types)


def _program_touches(program: Program, lowering: TypeLowering) -> bool:
    def in_region(region: Region) -> bool:
        for block in region.blocks:
            if any(lowering.lowers(v.type) for v in block.arguments):
                return True
            for op in block.ops:
                if any(lowering.lowers(v.type) for v in (*op.operands, *op.results)):
                    return True
                if any(in_region(r) for r in op.regions):
                    return True
        return False

    return any(_signature_touches(f, lowering) or in_region(f.body)
               for f in program.functions.values())


def lower_types(program: Program, lowering: TypeLowering,
                custom_call_targets=frozenset()) -> Program:
    """``program`` with every value of a type ``lowering`` rewrites replaced by its parts (see
    the module docstring); ``program`` itself is left as it was. ``custom_call_targets``: the
    targets the backend runs, which ``opaque`` hands stored values."""
    if not _program_touches(program, lowering):
        return program
    walk = Walk(lowering, program, custom_call_targets)
    functions = {name: walk.lower_function(f, entry=name == program.entry)
                 for name, f in program.functions.items()}
    return dataclasses.replace(program, functions=functions)


Rule = Callable[[Op, OpBuilder, list[Parts], Walk], list[Parts]]


# -- generic rules ------------------------------------------------------------------------------

def per_part(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    """The op applied to each part alike (part k of every rewritten operand, the other operands
    as they are): reshapes, transposes, slices, selects, gathers, ... ."""
    count = max(len(p) for p in ins) if ins else len(ctx.part_types(op.results[0]))
    outs: list[list[Value]] = [[] for _ in op.results]
    for k in range(count):
        operands = [parts[k] if len(parts) == count else parts[0] for parts in ins]
        types = [ctx.part_types(r)[k] if ctx.touches(r) else r.type for r in op.results]
        regions = tuple(ctx.lower_region(r) for r in op.regions)
        for out, value in zip(outs, b.emit(op.name, operands, types, op.attributes, regions)):
            out.append(value)
    return [tuple(out) if ctx.touches(r) else (out[0],) for r, out in zip(op.results, outs)]


def flattened(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk,
              order: Callable[[list[Parts]], Sequence[Value]] | None = None) -> list[Parts]:
    """The op with every operand, result and region argument replaced by its parts in place:
    while, if, case, reduce, reduce_window, scatter, func.call, optimization_barrier, ... ."""
    operands = [v for parts in ins for v in parts]
    types = [t for r in op.results for t in ctx.part_types(r)]
    regions = tuple(ctx.lower_region(r, order) for r in op.regions)
    results = b.emit(op.name, operands, types, op.attributes, regions)
    outs, i = [], 0
    for r in op.results:
        n = len(ctx.part_types(r))
        outs.append(tuple(results[i:i + n]))
        i += n
    return outs


def opaque(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    """An op the backend runs on stored values (a custom call it implements, a bitcast): its
    rewritten operands joined back into their types before it, its results split after."""
    if op.name == "stablehlo.custom_call" and \
            op.attributes.get("call_target_name") not in ctx.custom_call_targets:
        raise ctx.unimplemented(op, f"the backend has no custom call "
                                    f"@{op.attributes.get('call_target_name')}")
    operands = [ctx.lowering.join(b, parts, v.type) if ctx.touches(v) else parts[0]
                for v, parts in zip(op.operands, ins)]
    regions = tuple(ctx.lower_region(r) for r in op.regions)
    results = b.emit(op.name, operands, [r.type for r in op.results], op.attributes, regions)
    return [tuple(ctx.lowering.split(b, v)) if ctx.touches(v) else (v,) for v in results]


def composite(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    """A composite touching a rewritten type: a call of its decomposition function (the
    composite's meaning, plain StableHLO), which the walk rewrites like every other function
    (complex acos, asinh, ... are composites in JAX's programs)."""
    call = dataclasses.replace(op, name="func.call",
                               attributes={"callee": op.attributes["decomposition"]})
    return flattened(call, b, ins, ctx)


def is_tensor(t) -> bool:
    return isinstance(t, TensorType)


def is_tuple(t) -> bool:
    return isinstance(t, TupleType)


# Ops that move or pick elements without computing on them: each part alike.
STRUCTURAL = ("stablehlo.reshape", "stablehlo.transpose", "stablehlo.broadcast_in_dim",
              "stablehlo.slice", "stablehlo.reverse", "stablehlo.concatenate", "stablehlo.pad",
              "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice", "stablehlo.gather",
              "stablehlo.select", "stablehlo.copy", "mhlo.copy", "stablehlo.dynamic_reshape",
              "stablehlo.dynamic_broadcast_in_dim", "stablehlo.real_dynamic_slice",
              "stablehlo.get_tuple_element")
# Ops whose operands, results and region arguments are lists of values.
LISTS = ("stablehlo.while", "stablehlo.if", "stablehlo.case", "stablehlo.reduce",
         "stablehlo.reduce_window", "stablehlo.scatter", "func.call",
         "stablehlo.optimization_barrier", "stablehlo.all_reduce", "stablehlo.all_gather",
         "stablehlo.all_to_all", "stablehlo.collective_permute",
         "stablehlo.collective_broadcast", "stablehlo.reduce_scatter")


def sort_order(arg_parts: list[Parts]) -> list[Value]:
    """A sort comparator's arguments come in (lhs, rhs) pairs per operand; an operand of N
    parts becomes N operands, so its pair becomes N pairs (lhs_k, rhs_k)."""
    out = []
    for lhs, rhs in zip(arg_parts[0::2], arg_parts[1::2]):
        for a, c in zip(lhs, rhs):
            out.extend((a, c))
    return out


def sort(op: Op, b: OpBuilder, ins: list[Parts], ctx: Walk) -> list[Parts]:
    return flattened(op, b, ins, ctx, order=sort_order)


GENERIC_RULES: dict[str, Rule] = {
    **{name: per_part for name in STRUCTURAL},
    **{name: flattened for name in LISTS},
    "stablehlo.sort": sort,
    "stablehlo.composite": composite,
    "stablehlo.bitcast_convert": opaque,
    "stablehlo.custom_call": opaque,
}
