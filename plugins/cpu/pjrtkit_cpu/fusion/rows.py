"""Row programs: fused loops over the same rows, chained through per-row values, as one loop.

Layernorm fuses into three loops over ``x`` (a row sum for the mean, a row sum of squares for
the variance, the normalization) with small ops on the ``[rows, 1]`` statistics between them;
each loop streams the whole input from memory. A row program runs them as one loop over rows:
for each row, stage 1 runs over the row (and reduces it), then the per-row ops, then stage 2
reads the same row again from L1, and so on, so the input is read from memory once.

After ``rewrite`` has made the fused ops of a block, ``group_rows`` chains, in block order:

- stages: ``fused_elementwise`` ops of one shape S (rank >= 2), whose inputs made inside the
  program are per-row values read as broadcast along the row (``input_kinds`` aligned shape
  ``S[:-1] + (1,)``) or full-shape outputs of earlier stages (read from the same row);
- per-row ops: elementwise ops ``codegen`` can emit, and broadcasts/reshapes that only
  reshape, on values with one element per row (any shape whose non-1 sizes are those of
  ``S[:-1]``) or rank 0.

An op never joins when it reads a value computed outside the program from the program's own
values (the program would depend on itself). A program of at least two stages becomes one
``pjrtkit_cpu.fused_rows`` op whose region holds the member ops (the stages with their own
regions): planned by the ordinary rules it is the fallback that runs until the row kernel is
compiled (``lowering.fused``), exactly as a fused group falls back to its region.

Full-shape stage outputs read only by later stages live in a row buffer; per-row values are
locals. Per-op code comes from the op table (``loopnest.optable``), the row loop of each stage
from ``codegen.stage_row``, reductions from ``rowreduce``.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from pjrtkit.stablehlo.ir import (TERMINATORS, Block, Op, Region, TensorType, Value,
                                  clone_ops, free_uses, fresh_value, topological_order)

from pjrtkit_cpu.fusion import cache, codegen
from pjrtkit_cpu.fusion.groups import EFFECTFUL
from pjrtkit_cpu.fusion.kernel import STATS as kernel_stats
from pjrtkit_cpu.loopnest import module, optable
from pjrtkit_cpu.loopnest.values import DTYPES, scalar_type

ROWS_OP = "pjrtkit_cpu.fused_rows"
ENABLED = os.environ.get("PJRTKIT_CPU_FUSION_ROWS", "1") not in ("", "0")
MIN_STAGES = 2
RESHAPE = "stablehlo.reshape"
# The table this driver emits with (a test checks every driver names the same one).
OP_TABLE = optable.OP_TABLE

PREFETCH_BYTES = 16 << 10          # how far ahead rows are prefetched (4 rows of f32[1024])
PREFETCH_MAX_ROW_BYTES = 64 << 10  # longer rows: the hardware prefetcher sees enough misses

# Calls served by the row kernel vs its fallback plan (tests read these).
STATS = {"rows": 0, "fallback": 0}


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _per_row(shape, stage_shape) -> bool:
    return shape is not None and _squeezed(shape) == _squeezed(stage_shape[:-1])


def _shape(v: Value):
    return v.type.shape if isinstance(v.type, TensorType) else None


def _stage_shape(op: Op, fused_op: str):
    if op.name != fused_op:
        return None
    shape = tuple(op.attributes["shape"])
    return shape if len(shape) >= 2 else None


def _per_row_op(op: Op, shape) -> bool:
    """Whether ``op`` computes one value per row of stage shape ``shape``."""
    if len(op.results) != 1 or op.regions:
        return False
    result = op.results[0]
    if (not isinstance(result.type, TensorType) or result.type.dtype not in DTYPES
            or not _per_row(result.type.shape, shape)):
        return False
    if op.name in (codegen.BROADCAST, RESHAPE):
        operand = _shape(op.operands[0])
        if operand is None or op.operands[0].type.dtype != result.type.dtype:
            return False
        if op.name == codegen.BROADCAST:
            dims = tuple(op.attributes.get("broadcast_dimensions", ()))
            if list(dims) != sorted(set(dims)) or len(dims) != len(operand):
                return False
            # rank 0: repeated; otherwise the same element count, so only a reshape
        return operand == () or _per_row(operand, shape)
    if op.name in (codegen.TRANSPOSE, "stablehlo.constant"):
        return False
    if any(_shape(v) is None or (_shape(v) != () and not _per_row(_shape(v), shape))
           for v in op.operands):
        return False
    if any(_shape(v) not in ((), result.type.shape) for v in op.operands):
        return False
    return codegen.supports(op)


@dataclasses.dataclass(eq=False)
class _Program:
    shape: tuple[int, ...]
    members: list[Op] = dataclasses.field(default_factory=list)
    stages: int = 0
    per_row: set = dataclasses.field(default_factory=set)  # ids of per-row values made inside
    full: set = dataclasses.field(default_factory=set)     # ids of full values made inside
    tainted: set = dataclasses.field(default_factory=set)  # outside values that read ours

    @property
    def defined(self) -> set:
        return self.per_row | self.full

    def stage_can_join(self, op: Op) -> bool:
        row_aligned = tuple(self.shape[:-1]) + (1,)
        for v, (kind, aligned) in zip(op.operands, op.attributes["input_kinds"]):
            if v.id in self.tainted:
                return False
            if v.id in self.per_row:
                if kind != "broadcast" or tuple(aligned) != row_aligned:
                    return False
            elif v.id in self.full:
                if kind != "full":
                    return False
        return True

    def add_stage(self, op: Op) -> None:
        self.members.append(op)
        self.stages += 1
        for r in op.results:
            (self.full if r.type.shape == self.shape else self.per_row).add(r.id)


def find_row_programs(block: Block, fused_op: str) -> list[list[Op]]:
    """Member lists (block order) of the row programs of ``block``."""
    programs: list[_Program] = []
    current: _Program | None = None

    def close():
        if current is not None and current.stages >= MIN_STAGES:
            # trailing per-row ops after the last stage stay outside
            while current.members and current.members[-1].name != fused_op:
                current.members.pop()
            programs.append(current)

    for op in block.ops:
        uses = free_uses(op)
        shape = _stage_shape(op, fused_op)
        if shape is not None:
            if current is not None and current.shape == shape and current.stage_can_join(op):
                current.add_stage(op)
                continue
            # Starts the next program (it may read this one's values: the programs run in
            # order, and no member of this one reads anything made after it).
            close()
            current = _Program(shape)
            current.add_stage(op)
            continue
        elif (current is not None and not uses & current.tainted
              and _per_row_op(op, current.shape)
              and not any(v.id in current.full for v in op.operands)):
            current.members.append(op)
            current.per_row.add(op.results[0].id)
            continue
        if current is not None and uses & (current.defined | current.tainted):
            current.tainted.update(r.id for r in op.results)
    close()
    return [p.members for p in programs]


def group_rows(block: Block, fused_op: str) -> Block:
    """``block`` with its row programs as ``ROWS_OP`` ops (``block`` itself if none)."""
    programs = find_row_programs(block, fused_op)
    if not programs:
        return block
    used_by: dict[int, set] = {}
    for op in block.ops:
        for vid in free_uses(op):
            used_by.setdefault(vid, set()).add(id(op))
    replaced: dict[int, Op | None] = {}
    for members in programs:
        op = _program_op(members, used_by)
        if op is None:
            continue
        replaced[id(members[0])] = op
        for m in members[1:]:
            replaced[id(m)] = None
    if not replaced:
        return block
    nodes = []
    for op in block.ops:
        if id(op) not in replaced:
            nodes.append(op)
        elif replaced[id(op)] is not None:
            nodes.append(replaced[id(op)])
    ordered = topological_order(nodes, EFFECTFUL)
    return block if ordered is None else Block(block.arguments, ordered)


def _program_op(members: list[Op], used_by: dict) -> Op | None:
    member_ids = {id(m) for m in members}
    defined = {r.id for m in members for r in m.results}
    inputs: list[Value] = []
    renamed: dict[int, Value] = {}  # an input's id -> its block argument; a member's result
    for m in members:                # id -> the copy's result
        for v in m.operands:
            if v.id not in defined and v.id not in renamed:
                inputs.append(v)
                renamed[v.id] = fresh_value(v)
    arguments = tuple(renamed[v.id] for v in inputs)
    body = clone_ops(members, renamed)
    outputs = [r for m in members for r in m.results
               if used_by.get(r.id, set()) - member_ids]
    if not outputs:
        return None
    body.append(Op("stablehlo.return", tuple(renamed[r.id] for r in outputs), (), {}))
    region = Region([Block(arguments, body)])
    shape = tuple(members[0].attributes["shape"])
    return Op(ROWS_OP, tuple(inputs), tuple(outputs), {"shape": shape}, (region,),
              location=members[-1].location)


# -- the kernel ----------------------------------------------------------------------------------

def _flat(shape) -> int:
    return int(np.prod(shape))


def kernel_source(op: Op, fused_op: str, stage_parts) -> str:
    """Numba source of ``kernel(in0, ..., out0, ...)`` for the row program ``op`` (flat
    C-contiguous arrays; a per-row output holds one element per row)."""
    shape = tuple(op.attributes["shape"])
    rows, n = _flat(shape[:-1]), shape[-1]
    block = op.regions[0].entry
    terminator = block.ops[-1]
    assert terminator.name in TERMINATORS
    out_index: dict[int, list[int]] = {}
    for j, v in enumerate(terminator.operands):
        out_index.setdefault(v.id, []).append(j)
    readers: dict[int, int] = {}  # value id -> members reading it
    for m in block.ops[:-1]:
        for v in m.operands:
            readers[v.id] = readers.get(v.id, 0) + 1
    arg_index = {a.id: i for i, a in enumerate(block.arguments)}
    prologue: list[str] = []   # before the row loop
    row: list[str] = []        # inside it
    pad = "        "
    scalar: dict[int, str] = {}    # value id -> a local holding it (rank 0: for every row)
    per_row: dict[int, str] = {}   # value id -> a local holding this row's element
    full: dict[int, tuple[str, str]] = {}  # value id -> where this row of it is

    def row_value(v: Value) -> str:
        """The local of ``v``'s element for this row (or of a rank-0 ``v``)."""
        if v.id in per_row:
            return per_row[v.id]
        if v.id in scalar:
            return scalar[v.id]
        if v.id not in arg_index:
            raise ValueError(f"row program: %{v.id} is read before the member that makes it "
                             "(members must be in dependency order)")
        i = arg_index[v.id]
        if v.type.shape == ():
            scalar[v.id] = f"a{i}"
            prologue.append(f"a{i} = in{i}[0]")
            return scalar[v.id]
        per_row[v.id] = f"a{i}_r"
        row.append(f"{pad}a{i}_r = in{i}[r]")
        return per_row[v.id]

    for s, m in enumerate(block.ops[:-1]):
        if m.name == fused_op:
            tag = f"s{s}_"
            kinds, body, results, input_locals, reductions = stage_parts(m, tag)
            sources = []
            for i, v in enumerate(m.operands):
                if v.id in full:  # an earlier stage's output, this row of it
                    sources.append(full[v.id])
                elif v.id in per_row:  # made in this row: constant along it (see stage_can_join)
                    sources.append(("local", per_row[v.id]))
                elif v.id not in arg_index:
                    raise ValueError(f"row program: stage {s} reads %{v.id} before the member "
                                     "that makes it (members must be in dependency order)")
                else:  # an input of the program, read as the stage reads it
                    sources.append(("array", f"in{arg_index[v.id]}"))
                    if kinds[i].kind == "scalar":
                        prologue.append(f"{input_locals[i]} = in{arg_index[v.id]}[0]")
            targets = []
            for j, (name, r) in enumerate(zip(results, m.results)):
                where = [("array", f"out{o}") for o in out_index.get(r.id, ())]
                if name in reductions:
                    per_row[r.id] = name
                elif readers.get(r.id):
                    if not where:
                        where = [("rowbuf", f"{tag}t{j}")]
                        dtype = scalar_type(r.type.dtype)
                        prologue.append(f"{tag}t{j} = np.empty({n}, {dtype})")
                    full[r.id] = where[0]
                targets.append(where)
            setup, lines = codegen.stage_row(shape, kinds, body, results, input_locals,
                                             reductions, sources, targets, pad, tag)
            prologue.extend(setup)
            row.extend(lines)
            continue
        result = m.results[0]
        name = f"u{s}"
        if m.name in (codegen.BROADCAST, RESHAPE):
            row.append(f"{pad}{name} = {row_value(m.operands[0])}")
        else:
            lines = optable.emit(m, [row_value(v) for v in m.operands], name)
            if lines is None:
                raise ValueError(f"cannot fuse {m.describe()}")
            row.extend(pad + line for line in lines)
        per_row[result.id] = name
        for o in out_index.get(result.id, ()):
            row.append(f"{pad}out{o}[r] = {name}")
    # Inputs of the stage shape are streamed: fetch a row PREFETCH_BYTES ahead (see rowmem).
    itemsize = max([a.type.dtype.itemsize for a in block.arguments
                    if a.type.shape == shape] or [0])
    if itemsize and n * itemsize <= PREFETCH_MAX_ROW_BYTES:
        ahead = max(1, PREFETCH_BYTES // (n * itemsize))
        line = max(1, 64 // itemsize)
        fetch = [f"{pad}if r + {ahead} < {rows}:", f"{pad}    f = (r + {ahead}) * {n}",
                 f"{pad}    for c in range(0, {n}, {line}):"]
        fetch += [f"{pad}        prefetch(in{i}, f + c)"
                  for i, a in enumerate(block.arguments) if a.type.shape == shape]
        row[:0] = fetch
    args = [f"in{i}" for i in range(len(block.arguments))] + [
        f"out{j}" for j in range(len(terminator.operands))]
    lines = [f"def kernel({', '.join(args)}):"]
    lines.extend("    " + line for line in prologue)
    lines.append(f"    for r in range({rows}):")
    lines.extend(row)
    return module.kernel_module(lines)


class RowKernel(cache.BackgroundCompiled):
    """Calls the row kernel once compiled, the fallback plan of the region before (or if the
    compile failed)."""

    __slots__ = ("_fallback", "_outputs")

    def __init__(self, op: Op, fallback, source: str):
        self._fallback = fallback  # (None until with_fallback: the compile is queued first)
        self._outputs = tuple((v.type.dtype, v.type.shape, _flat(v.type.shape))
                              for v in op.results)
        signature = [(v.type.dtype, 1, True) for v in op.operands]
        signature += [(dtype, 1, False) for dtype, _, _ in self._outputs]
        self._compile_in_background(source, signature, f"the row program {op.describe()}")

    def with_fallback(self, fallback) -> RowKernel:
        self._fallback = fallback
        return self

    def __call__(self, *args):
        fast = self._fast
        if fast is None:
            if self._retry is not None:
                self._retry_skipped()
            STATS["fallback"] += 1
            return self._fallback(*args)
        outs = [np.empty(size, dtype) for dtype, _, size in self._outputs]
        fast(*[np.ascontiguousarray(a).reshape(-1) for a in args], *outs)
        STATS["rows"] += 1
        kernel_stats["fused"] += 1  # (a row program is a fused loop too)
        return tuple(o.reshape(shape) for o, (_, shape, _) in zip(outs, self._outputs))
