"""A plain-Python program IR for StableHLO, free of MLIR objects.

The loader (``pjrtkit.stablehlo.loader``) walks a deserialized StableHLO module once and builds
these records; everything after compile (plans, kernels, execute) sees only them. Attributes are
decoded to Python values (see ``pjrtkit.stablehlo.attributes`` for the decoding table), so no
MLIR handle outlives compilation.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # dtypes are NumPy's, but the records need no NumPy (pjrtkit.lowering uses them)
    import numpy as np


@dataclasses.dataclass(frozen=True)
class TensorType:
    """A ranked tensor type: static shape and a NumPy dtype (ml_dtypes for bf16/fp8/...)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    @functools.cached_property  # types are shared by the values of one program; asked often
    def size(self) -> int:
        return int(math.prod(self.shape))

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype.name}>"


@dataclasses.dataclass(frozen=True)
class TokenType:
    """``!stablehlo.token``: carries ordering only; at run time it is an empty array."""

    def __str__(self) -> str:
        return "!stablehlo.token"


@dataclasses.dataclass(frozen=True)
class TupleType:
    elements: tuple[Any, ...]


@dataclasses.dataclass(eq=False)
class Value:
    """An SSA value. ``id`` is unique within one Program; identity is by object."""

    id: int
    type: TensorType | TokenType | TupleType

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type}"


@dataclasses.dataclass(eq=False)
class Op:
    """One operation. ``name`` is the MLIR operation name, e.g. ``"stablehlo.add"``.

    ``attributes`` holds decoded attributes keyed by their MLIR name (``"comparison_direction"``,
    ``"dot_dimension_numbers"``, ``"broadcast_dimensions"``, ...). ``regions`` keep MLIR order
    (``while``: cond then body; ``if``: true then false; ``case``: branches in order).
    ``location`` is a short human-readable source location for error messages.
    """

    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attributes: dict[str, Any]
    regions: tuple["Region", ...] = ()
    location: str = ""

    def describe(self) -> str:
        ins = ", ".join(str(v.type) for v in self.operands)
        outs = ", ".join(str(v.type) for v in self.results)
        where = f" at {self.location}" if self.location else ""
        return f"{self.name}({ins}) -> ({outs}){where}"


@dataclasses.dataclass(eq=False)
class Block:
    arguments: tuple[Value, ...]
    ops: list[Op]  # the terminator (stablehlo.return / func.return) is the last op


@dataclasses.dataclass(eq=False)
class Region:
    blocks: list[Block]

    @property
    def entry(self) -> Block:
        return self.blocks[0]


@dataclasses.dataclass(eq=False)
class Function:
    """A ``func.func``. ``arg_attributes``/``result_attributes`` are decoded per position
    (e.g. ``{"tf.aliasing_output": 0}``, ``{"jax.buffer_donor": True}``, ``{"sdy.sharding": ...}``).
    """

    name: str
    arguments: tuple[Value, ...]
    result_types: tuple[Any, ...]
    body: Region
    arg_attributes: tuple[dict[str, Any], ...] = ()
    result_attributes: tuple[dict[str, Any], ...] = ()
    visibility: str = "public"


@dataclasses.dataclass(eq=False)
class Program:
    """A whole module: its functions by name, the entry point, and module attributes
    (``mhlo.num_partitions``, ``mhlo.num_replicas``, ``sdy`` meshes as text, ...)."""

    functions: dict[str, Function]
    entry: str
    attributes: dict[str, Any]

    @property
    def main(self) -> Function:
        return self.functions[self.entry]


def walk_ops(program: Program):
    """Every op of every function of ``program``, nested regions included."""
    for function in program.functions.values():
        yield from walk_region(function.body)


# Recursive helpers are module functions, not closures: a closure that calls itself is a
# reference cycle (function -> cell -> function) that only the garbage collector frees, made
# at every compile (JAX's core_test checks that a jit call leaves no cycles).
def walk_region(region: Region):
    """Every op of ``region``, nested regions included, each before the ops of its regions."""
    for block in region.blocks:
        for op in block.ops:
            yield op
            for inner in op.regions:
                yield from walk_region(inner)


def with_function_bodies(program: Program, rewrite: Callable[[Region], Region]) -> Program:
    """``program`` with ``rewrite`` applied to every function's body; ``program`` itself when
    ``rewrite`` returned every body unchanged (the same object)."""
    functions = {}
    changed = False
    for name, function in program.functions.items():
        body = rewrite(function.body)
        if body is not function.body:
            changed = True
            function = dataclasses.replace(function, body=body)
        functions[name] = function
    return dataclasses.replace(program, functions=functions) if changed else program


# -- IR utilities every pass needs -----------------------------------------------------------

# Terminators hand their operands back to whoever runs the block (a plan's caller, a loop, a
# branch) instead of computing anything.
TERMINATORS = frozenset({"stablehlo.return", "func.return", "sdy.return"})

# Values made by passes after loading (inlined calls, fused regions) get ids from one counter
# that starts far above anything the loader assigns, so they never clash with a program's own
# ids and two passes never hand out the same id. (``next`` on a count is atomic under the GIL.)
FRESH_ID_START = 1 << 44
_fresh_ids = itertools.count(FRESH_ID_START)


def fresh_value(like: Value | TensorType | TokenType | TupleType) -> Value:
    """A new Value, unique in every program of this process, of ``like``'s type (or of
    ``like`` itself when it is a type)."""
    return Value(next(_fresh_ids), like.type if isinstance(like, Value) else like)


def free_values(op: Op) -> tuple[Value, ...]:
    """Values defined outside ``op``'s regions that the regions read (at any depth), in order
    of first use: what a kernel of ``op`` must receive besides its operands."""
    found: dict[int, Value] = {}
    _free_in(op.regions, found, set())
    return tuple(found.values())


def _free_in(regions, found: dict[int, Value], defined: set[int]) -> None:
    for region in regions:
        for block in region.blocks:
            defined.update(v.id for v in block.arguments)
            for inner in block.ops:
                for v in inner.operands:
                    if v.id not in defined:
                        found.setdefault(v.id, v)
                _free_in(inner.regions, found, defined)
                defined.update(v.id for v in inner.results)


def free_uses(op: Op) -> set[int]:
    """Ids of every value defined outside ``op`` that ``op`` reads: its operands and what its
    regions read from outside. An op depends on exactly these."""
    uses = {v.id for v in op.operands}
    if op.regions:
        uses.update(v.id for v in free_values(op))
    return uses


def topological_order(ops: list[Op], effectful: frozenset[str] = frozenset()
                      ) -> list[Op] | None:
    """``ops`` in dependency order, as close to the given order as possible: among ops that
    are ready, the earliest in ``ops`` comes first. Ops named in ``effectful`` and terminators
    keep their order among themselves, and a terminator stays after everything before it.
    None when the ops depend on each other in a cycle."""
    producer: dict[int, int] = {}
    for i, op in enumerate(ops):
        for r in op.results:
            producer[r.id] = i
    users: list[list[int]] = [[] for _ in ops]
    waiting = []
    last_effect = None
    for i, op in enumerate(ops):
        deps = {producer[u] for u in free_uses(op) if u in producer and producer[u] != i}
        if op.name in TERMINATORS:
            deps |= set(range(i))
        if op.name in effectful or op.name in TERMINATORS:
            if last_effect is not None:
                deps.add(last_effect)
            last_effect = i
        waiting.append(len(deps))
        for j in deps:
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(ops[i])
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return out if len(out) == len(ops) else None


def clone_ops(ops, renamed: dict[int, Value]) -> list[Op]:
    """Copies of ``ops`` reading ``renamed[id]`` instead of each value whose id is a key, with
    fresh values for their results (added to ``renamed``, so later ops read the copies).
    Nested regions are copied with their outside reads renamed; values defined inside them
    keep their ids (a region is its own scope)."""
    out = []
    for op in ops:
        operands = tuple(renamed.get(v.id, v) for v in op.operands)
        results = tuple(fresh_value(r) for r in op.results)
        renamed.update((old.id, new) for old, new in zip(op.results, results))
        out.append(dataclasses.replace(op, operands=operands, results=results,
                                       regions=tuple(rename_reads(r, renamed)
                                                     for r in op.regions)))
    return out


def rename_reads(region: Region, renamed: dict[int, Value]) -> Region:
    """``region`` with its reads of each value whose id is a key of ``renamed`` replaced."""
    blocks = []
    for block in region.blocks:
        ops = [dataclasses.replace(op, operands=tuple(renamed.get(v.id, v) for v in op.operands),
                                   regions=tuple(rename_reads(r, renamed) for r in op.regions))
               for op in block.ops]
        blocks.append(Block(block.arguments, ops))
    return Region(blocks)
