"""Build an executable plan from a Program with a LoweringRegistry.

A plan is a flat list of steps ``(kernel, operand slots, result slots)`` over a list of value
slots. Building it walks the IR once and runs every rule; running it touches only kernels and
arrays, never MLIR or IR decoding. Regions (reduce bodies, while/if/case branches) and called
functions become nested plans through the same builder.

The builder never looks inside a payload (it imports no NumPy): constants are made by the
backend (``registry.payloads.make_constant``), constant subexpressions are folded by running
the backend's own kernels on its own payloads (``payloads.fold``, which may decline), and
``PJRTKIT_CHECK_KERNELS`` reads results through ``payloads.describe``. See
``pjrtkit.lowering.payloads``.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any

from pjrtkit import profiling
from pjrtkit.errors import Internal, PjrtError, Unimplemented, host_out_of_memory
from pjrtkit.lowering.payloads import Payloads
from pjrtkit.lowering.registry import CONSTANT, Kernel, LoweringContext, LoweringRegistry
from pjrtkit.stablehlo.ir import (TERMINATORS, Block, Op, Program, Region, TensorType, Value,
                                  free_values)


_CHECK_KERNELS = os.environ.get("PJRTKIT_CHECK_KERNELS", "") not in ("", "0")


class Plan:
    """A lowered block: call it with the block's argument arrays, get the terminator's operands.

    Built once at compile time. The steps are turned into one straight-line Python function
    (``_generate``): each value is a local variable, each kernel a global, and every value is
    released right after its last use, so execution pays one call per kernel and nothing else,
    and large temporaries are freed (and their memory reused) as early as possible.
    """

    __slots__ = ("num_slots", "arg_slots", "steps", "result_slots", "constants", "name",
                 "template", "_run", "source")

    def __init__(self, name: str, num_slots: int, arg_slots: tuple[int, ...],
                 steps: list[tuple[Kernel, tuple[int, ...], tuple[int, ...], Op]],
                 result_slots: tuple[int, ...], constants: dict[int, Any],
                 codes: dict[tuple[str, str], CodeType] | None = None):
        self.name = name
        self.num_slots = num_slots
        self.arg_slots = arg_slots
        self.steps = steps
        self.result_slots = result_slots
        self.constants = constants
        self.template = [None] * num_slots
        for slot, value in constants.items():
            self.template[slot] = value
        self._run, self.source = _generate(name, arg_slots, steps, result_slots, constants, codes)

    def __call__(self, *args):
        return self._run(*args)

    def __len__(self) -> int:
        return len(self.steps)


class ProfiledPlan(Plan):
    """A Plan whose loop times every step (``PJRTKIT_PROFILE``, see ``pjrtkit.profiling``).
    Chosen at build time, so plans built without the variable pay nothing."""

    __slots__ = ()

    def __call__(self, *args):
        return profiling.run_plan(self, args)


_PLAN = ProfiledPlan if profiling.ENABLED else Plan


class PlanBuilder:
    """Lowers blocks of one Program with one registry. Implements ``LoweringContext``."""

    def __init__(self, program: Program, registry: LoweringRegistry):
        self.program = program
        self.registry = registry
        self.backend = registry.backend
        self.payloads = registry.payloads
        self._functions: dict[str, Kernel] = {}
        self._in_progress: set[str] = set()
        self._lowering: list[tuple[Value, ...]] = []  # captures of the ops being lowered
        # Compiled plan code by (name, source): regions of one shape (the reduce bodies of a
        # program, ...) generate the same source, compiled once per build.
        self._codes: dict[tuple[str, str], CodeType] = {}

    # -- LoweringContext -------------------------------------------------------------------
    def compile_region(self, region: Region) -> Kernel:
        """Plan for a region of the op being lowered, called as ``plan(*block_args, *captures)``
        where ``captures`` are ``self.captures(op)`` of that op (often empty)."""
        if len(region.blocks) != 1:
            raise Unimplemented(f"{self.backend}: regions with {len(region.blocks)} blocks "
                                f"are not supported (only single-block regions)")
        captures = self._lowering[-1] if self._lowering else ()
        return self.build_block(region.entry, "region", captures)

    def captures(self, op: Op) -> tuple[Value, ...]:
        """Values defined outside ``op`` that its regions use, in a fixed order. The kernel of
        ``op`` receives them after its operands: ``kernel(*operands, *captures)``."""
        return free_values(op)

    def compile_function(self, name: str) -> Kernel:
        if name in self._functions:
            return self._functions[name]
        if name in self._in_progress:
            raise Unimplemented(f"{self.backend}: recursive call of function @{name}")
        try:
            function = self.program.functions[name]
        except KeyError:
            raise Internal(f"{self.backend}: call of unknown function @{name}") from None
        self._in_progress.add(name)
        try:
            plan = self.build_block(function.body.entry, name)
            plan.name = name
        finally:
            self._in_progress.discard(name)
        self._functions[name] = plan
        return plan

    def unimplemented(self, op: Op, why: str) -> Unimplemented:
        return Unimplemented(f"{self.backend}: {op.name} is not supported: {why} "
                             f"({op.describe()})")

    # -- building ----------------------------------------------------------------------------
    def check_dtypes(self, op: Op) -> None:
        if not self.registry.dtypes:
            return
        for value in (*op.operands, *op.results):
            if isinstance(value.type, TensorType) and value.type.dtype not in self.registry.dtypes:
                raise Unimplemented(
                    f"{self.backend}: {op.name} on dtype {value.type.dtype.name} is not "
                    f"supported; supported dtypes: "
                    f"{', '.join(sorted(d.name for d in self.registry.dtypes))} "
                    f"({op.describe()})")

    def build_block(self, block: Block, name: str, captures: tuple[Value, ...] = ()) -> Plan:
        slots: dict[int, int] = {}

        def slot_of(value: Value) -> int:
            if value.id not in slots:
                slots[value.id] = len(slots)
            return slots[value.id]

        arg_slots = tuple(slot_of(v) for v in (*block.arguments, *captures))
        steps = []
        constants: dict[int, Any] = {}
        result_slots: tuple[int, ...] = ()
        for op in block.ops:
            if op.name in TERMINATORS:
                result_slots = tuple(self._outer_slot(slot_of, v) for v in op.operands)
                break
            self.check_dtypes(op)
            rule = _constant_rule if op.name == CONSTANT else self.registry.lookup(op)
            op_captures = self.captures(op) if op.regions else ()
            self._lowering.append(op_captures)
            try:
                kernel = rule(op, self)
            except PjrtError:
                raise
            except MemoryError as exc:  # folding a constant too big for the host
                raise host_out_of_memory(exc, f"{self.backend}: lowering {op.name} "
                                              f"({op.describe()})") from exc
            except Exception as exc:
                # Only an explicit Unimplemented means "not supported"; anything else would
                # hide a bug in the rule behind a plausible UNSUPPORTED.
                raise Internal(f"{self.backend}: bug in the lowering rule for {op.name} "
                               f"({getattr(rule, '__qualname__', rule)}): it raised "
                               f"{type(exc).__name__}: {exc} while lowering {op.describe()}; a "
                               f"rule reports an unsupported case by raising "
                               f"pjrtkit.errors.Unimplemented") from exc
            finally:
                self._lowering.pop()
            ins = tuple(slot_of(v) for v in (*op.operands, *op_captures))
            outs = tuple(slot_of(v) for v in op.results)
            if _CHECK_KERNELS:
                kernel = _checked(kernel, op, self.payloads)
            if all(i in constants for i in ins) and _foldable(op):
                folded = self.payloads.fold(kernel, [constants[i] for i in ins])
                if folded is not None:
                    constants.update(zip(outs, folded))
                    continue
            steps.append((kernel, ins, outs, op))
        used = {i for _, ins, _, _ in steps for i in ins} | set(result_slots)
        constants = {slot: v for slot, v in constants.items() if slot in used}
        return _PLAN(name, len(slots), arg_slots, steps, result_slots, constants, self._codes)

    @staticmethod
    def _outer_slot(slot_of: Callable[[Value], int], value: Value) -> int:
        return slot_of(value)


# Ops whose result may differ between runs or that carry effects are never folded.
_NOT_FOLDABLE = frozenset({
    "stablehlo.rng", "stablehlo.rng_bit_generator", "stablehlo.custom_call",
    "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv",
    "stablehlo.after_all", "stablehlo.create_token", "stablehlo.optimization_barrier",
    "stablehlo.partition_id", "stablehlo.replica_id", "func.call", "stablehlo.composite",
})


def _foldable(op: Op) -> bool:
    return not op.regions and op.name not in _NOT_FOLDABLE


def _constant_rule(op: Op, ctx: LoweringContext) -> Kernel:
    """``stablehlo.constant``: the backend's payload of the value, made once; the kernel (no
    operands) is folded like any other, so it runs per call only if ``payloads.fold``
    declines to keep its result."""
    payload = ctx.payloads.make_constant(op.attributes["value"], op.results[0].type)

    def kernel():
        return (payload,)

    return kernel


def _generate(name, arg_slots, steps, result_slots, constants, codes=None):
    """Straight-line Python for a plan: ``(function, source)``. ``codes`` keeps compiled code
    by (name, source) for reuse; the kernels and constants are bound per plan (``namespace``)."""
    names: dict[int, str] = {slot: f"c{slot}" for slot in constants}
    namespace: dict[str, object] = {f"c{slot}": value for slot, value in constants.items()}
    for slot in arg_slots:
        names[slot] = f"v{slot}"
    last_read: dict[int, int] = {}
    for index, (_kernel, ins, _outs, _op) in enumerate(steps):
        for slot in ins:
            last_read[slot] = index
    keep = set(result_slots) | set(constants)
    lines = [f"def run({', '.join(names[s] for s in arg_slots)}):"]
    for slot in arg_slots:  # arguments nobody reads
        if slot not in last_read and slot not in keep:
            lines.append(f"    del v{slot}")
    for index, (kernel, ins, outs, _op) in enumerate(steps):
        namespace[f"k{index}"] = kernel
        try:
            call = f"k{index}({', '.join(names[s] for s in ins)})"
        except KeyError as exc:
            raise Internal(f"plan {name}: step {index} reads slot {exc} before it is defined"
                           ) from None
        for slot in outs:
            names[slot] = f"v{slot}"
        targets = ", ".join(names[s] for s in outs)
        lines.append(f"    {targets}{',' if len(outs) == 1 else ''} = {call}" if outs
                     else f"    {call}")
        dead = [s for s in dict.fromkeys((*ins, *outs))
                if s not in keep and last_read.get(s, -1) <= index]
        if dead:
            lines.append(f"    del {', '.join(names[s] for s in dead)}")
    results = ", ".join(names[s] for s in result_slots)
    lines.append(f"    return ({results}{',' if len(result_slots) == 1 else ''})")
    source = "\n".join(lines) + "\n"
    code = codes.get((name, source)) if codes is not None else None
    if code is None:
        code = compile(source, f"<pjrtkit plan {name}>", "exec")
        if codes is not None:
            codes[(name, source)] = code
    exec(code, namespace)  # noqa: S102 - our own generated code, no user input in it
    return namespace["run"], source


def _checked(kernel: Kernel, op: Op, payloads: Payloads) -> Kernel:
    """Wrap a kernel so every result is checked against the op's declared types (tests),
    as far as ``payloads.describe`` can tell shape and dtype."""

    def run(*args):
        results = kernel(*args)
        if len(results) != len(op.results):
            raise Internal(f"kernel for {op.describe()} returned {len(results)} results")
        for value, result in zip(op.results, results):
            if isinstance(value.type, TensorType):
                described = payloads.describe(result)
                if described is None:
                    continue
                shape, dtype = described
                if tuple(shape) != value.type.shape or dtype != value.type.dtype:
                    name = getattr(dtype, "name", dtype)
                    raise Internal(f"kernel for {op.describe()} returned "
                                   f"{name}{list(shape)}, expected {value.type}")
        return results

    run.__wrapped__ = kernel  # inspect.unwrap(kernel) finds the plugin's own kernel (tests)
    return run


def build_plan(program: Program, registry: LoweringRegistry,
               function: str | None = None) -> Plan:
    """Lower ``function`` (default: the entry point) of ``program`` to a Plan."""
    builder = PlanBuilder(program, registry)
    return builder.compile_function(function or program.entry)


def run_plan(plan: Plan, args: Sequence[Any]) -> tuple[Any, ...]:
    return plan(*args)
