"""The fused-group driver's loop nest: one loop over a group's elements (or rows), every op of
the group as scalar code from the op table (``pjrtkit_cpu.loopnest.optable``).

``kernel.stage_parts`` turns a fused op's region into body statements with the op table;
``generate`` wraps them in the loop (inputs read per their ``InputKind``, outputs stored,
reductions over the innermost dimension by ``rowreduce``) and ``loopnest.module`` makes the
module. ``stage_row`` is one row of such a loop, which row programs (``rows``) chain.
float16/bfloat16 are not fused (XLA rounds through f32 once per op; the unfused kernels already
do that), nor per-element libm calls (``optable.emit(..., vectorized=True)`` declines them).

``supports(op)`` says whether an op can be a member of a fused group.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrtkit.stablehlo.ir import Op, TensorType

from pjrtkit_cpu.loopnest import module, optable
from pjrtkit_cpu.loopnest.values import FLOAT_DTYPES, scalar_type, strides

BROADCAST = "stablehlo.broadcast_in_dim"
TRANSPOSE = "stablehlo.transpose"
# Ops a group absorbs: no code, their operand is read with other strides (see InputKind).
ABSORBED = frozenset({BROADCAST, TRANSPOSE})
# The table this driver emits with (a test checks every driver names the same one).
OP_TABLE = optable.OP_TABLE


def supports(op: Op) -> bool:
    """Whether the op table emits ``op`` as vectorizable code (no per-element libm call)."""
    return optable.supports(op, vectorized=True)


# -- the kernel ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputKind:
    """How the kernel reads one input: ``full`` (flat, the group's shape), ``scalar`` (one
    element, read once), ``broadcast`` (rank of the group, size-1 dims where it repeats; this
    aligned shape in ``aligned``) or ``strided`` (any C-contiguous array, e.g. the operand of a
    transpose; ``aligned`` holds its element stride along each dimension of the group)."""

    kind: str
    aligned: tuple[int, ...] = ()


# -- reductions ----------------------------------------------------------------------------------

_REDUCE_BODIES = {"stablehlo.add": "add", "stablehlo.maximum": "maximum",
                  "stablehlo.minimum": "minimum"}


def reduction_kind(op: Op) -> str | None:
    """"add", "maximum" or "minimum" when ``op`` is a ``stablehlo.reduce`` a fused loop can end
    in: one float32/float64 operand reduced over its innermost dimension only, with a rank-0
    init value and a body that is that one binary op of its two arguments."""
    if op.name != "stablehlo.reduce" or len(op.operands) != 2 or len(op.results) != 1:
        return None
    operand, init = op.operands
    if not isinstance(operand.type, TensorType) or operand.type.dtype not in FLOAT_DTYPES:
        return None
    if (not isinstance(init.type, TensorType) or init.type.shape != ()
            or init.type.dtype != operand.type.dtype or operand.type.rank == 0):
        return None
    if tuple(op.attributes.get("dimensions", ())) != (operand.type.rank - 1,):
        return None
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        return None
    block = op.regions[0].entry
    if len(block.arguments) != 2 or len(block.ops) != 2:
        return None
    inner, ret = block.ops
    if inner.name not in _REDUCE_BODIES or len(ret.operands) != 1 or (
            ret.operands[0].id != inner.results[0].id):
        return None
    a, b = (v.id for v in block.arguments)
    if tuple(v.id for v in inner.operands) not in ((a, b), (b, a)):
        return None
    return _REDUCE_BODIES[inner.name]


@dataclasses.dataclass(frozen=True)
class Reduction:
    """One reduced output of a fused loop: ``kind`` ("add", "maximum", "minimum") of the local
    ``operand`` over the innermost dimension, combined with the local ``init`` (read once)."""

    kind: str
    dtype: np.dtype
    operand: str
    init: str


def _combine(reduction: Reduction, row_value: str, result: str) -> list[str]:
    """The row's reduced value combined with the init value, by the table's rule of the
    reduction's op (so max/min keep their NaN and signed-zero semantics)."""
    rule = optable.OP_TABLE[f"stablehlo.{reduction.kind}"]
    element = optable.Element((reduction.init, row_value), (reduction.dtype,) * 2,
                              reduction.dtype, result, {})
    return rule.emit(element)


def _row_reduce_call(reduction: Reduction, buffer: str) -> str:
    if reduction.kind == "add":
        return f"rowreduce.sum_row({buffer}, {scalar_type(reduction.dtype)}(0))"
    width = 8 * reduction.dtype.itemsize
    return f"rowreduce.{'max' if reduction.kind == 'maximum' else 'min'}_row_f{width}({buffer})"


# -- the loop ------------------------------------------------------------------------------------

def generate(shape: tuple[int, ...], inputs: list[InputKind], body: list[str],
             results: list[str], input_locals: list[str],
             reductions: dict[str, Reduction] | None = None) -> str:
    """The module source defining ``kernel(in0, ..., out0, ...)``; every argument is a flat
    C-contiguous array (a broadcast input holds its ``aligned`` shape flattened).

    ``body`` are the statements of all ops (in order), reading ``input_locals[i]`` for input i
    and leaving each output's value in ``results[j]``. An output whose name is a key of
    ``reductions`` is that reduction of each row (its shape is the group's without the last
    dimension); the others have the group's ``shape``.

    Without broadcast inputs or reductions the kernel is one flat loop. Otherwise it is two
    loops: rows (all leading dimensions flattened; deeper nests measured up to 10x slower with
    long bodies, LLVM vectorizes them badly) and the last dimension, whose loop reads every
    operand at a unit or zero stride (row-invariant broadcast values are loaded once per row;
    only transposed inputs have other strides), so LLVM can vectorize. A reduced value is
    stored into a row buffer, reduced by ``rowreduce`` after the row.
    """
    reductions = reductions or {}
    args = [f"in{i}" for i in range(len(inputs))] + [f"out{j}" for j in range(len(results))]
    lines = [f"def kernel({', '.join(args)}):"]
    ind = "    "
    for i, kind in enumerate(inputs):
        if kind.kind == "scalar":
            lines.append(f"{ind}{input_locals[i]} = in{i}[0]")
    broadcasts = [i for i, k in enumerate(inputs) if k.kind in ("broadcast", "strided")]
    if len(shape) == 1:
        # (a rank-1 broadcast input is one element: read it as a scalar)
        for i in broadcasts:
            lines.append(f"{ind}{input_locals[i]} = in{i}[0]")
        broadcasts = []
    if not broadcasts and not reductions:
        lines.append(f"{ind}for k in range({int(np.prod(shape))}):")
        pad = ind * 2
        lines.extend(f"{pad}{input_locals[i]} = in{i}[k]" for i, k in enumerate(inputs)
                     if k.kind == "full")
        lines.extend(pad + line for line in body)
        lines.extend(f"{pad}out{j}[k] = {name}" for j, name in enumerate(results))
        return module.kernel_module(lines)
    rows, n = int(np.prod(shape[:-1])), shape[-1]
    sources = [("array", f"in{i}") for i in range(len(inputs))]
    targets = [[("array", f"out{j}")] for j in range(len(results))]
    tile = 0 if reductions else _tile(shape, inputs)
    if tile:
        lines.append(f"{ind}for rb in range(0, {rows}, {tile}):")
        lines.append(f"{ind * 2}for cb in range(0, {n}, {tile}):")
        lines.append(f"{ind * 3}for r in range(rb, min(rb + {tile}, {rows})):")
        setup, row = stage_row(shape, inputs, body, results, input_locals, reductions, sources,
                               targets, ind * 4, columns=f"range(cb, min(cb + {tile}, {n}))")
    else:
        lines.append(f"{ind}for r in range({rows}):")
        setup, row = stage_row(shape, inputs, body, results, input_locals, reductions, sources,
                               targets, ind * 2)
    lines[-1:-1] = [ind + line for line in setup]
    lines.extend(row)
    return module.kernel_module(lines)


# Rows and columns of a tile of a group that reads an input transposed. Row by row, such an
# input is read a column at a time: one cache line per element, and with a power-of-two row
# length every line of a column falls in the same few cache sets. Measured on a fused
# ``2 * x.T`` (Numba, AMD EPYC znver4): 512x512 float32 497 us row by row, 149 us in 32x32
# tiles, 141 in 16x16, 89 in 8x8; 512x784 922, 702, 218, 122 us (64x8 and 8x64 slower).
TRANSPOSE_TILE = 8


def _tile(shape: tuple[int, ...], inputs: list[InputKind]) -> int:
    """``TRANSPOSE_TILE`` when a row of the group reads some input at a stride other than 1
    and the group is larger than a tile both ways, else 0 (row by row)."""
    if len(shape) < 2 or shape[-1] <= TRANSPOSE_TILE \
            or int(np.prod(shape[:-1])) <= TRANSPOSE_TILE:
        return 0
    transposed = any(k.kind == "strided" and k.aligned and k.aligned[-1] not in (0, 1)
                     for k in inputs)
    return TRANSPOSE_TILE if transposed else 0


def stage_row(shape: tuple[int, ...], inputs: list[InputKind], body: list[str],
              results: list[str], input_locals: list[str], reductions: dict[str, Reduction],
              sources: list[tuple[str, str]], targets: list[list[tuple[str, str]]], pad: str,
              tag: str = "", columns: str | None = None) -> tuple[list[str], list[str]]:
    """One row of a fused group (rank >= 2): (lines before the row loop, unindented; lines of
    the row, indented by ``pad``). The row loop defines ``r``; scalar inputs are read by the
    caller before the loop.

    ``sources[i]`` says where input i comes from: ``("array", name)`` (a flat array read per its
    kind), ``("local", expr)`` (a value constant along the row: ``input_locals[i] = expr`` once
    per row) or ``("rowbuf", name)`` (a full input held in a row buffer, read at ``[c]``).
    ``targets[j]`` lists where output j goes: ``("array", name)`` (``[k]``, or ``[r]`` for a
    reduction) or ``("rowbuf", name)``; a reduction's value is also left in its local after
    the row. ``tag`` prefixes the names this row introduces (several stages in one kernel).
    ``columns``: the range of columns to run (a tile's), default the whole row.
    """
    n = shape[-1]
    below = strides(shape[:-1])  # rows per step of each leading dimension
    setup: list[str] = []
    # A reduction of an input as it is reads that input's row in place; others store the
    # reduced value into a row buffer.
    row_of_input = {}
    for i, (where, name) in enumerate(sources):
        if where == "array" and inputs[i].kind == "full":
            row_of_input[input_locals[i]] = f"{name}[o:o + {n}]"
        elif where == "rowbuf":
            row_of_input[input_locals[i]] = name
    for j, name in enumerate(results):  # (an output held in a row buffer: reduced there)
        if name not in reductions:
            row_of_input.update((name, target) for where, target in targets[j]
                                if where == "rowbuf")
    direct = {}
    buffers = {}
    for j, name in enumerate(results):
        if name not in reductions or name in buffers or name in direct:
            continue
        if reductions[name].operand in row_of_input:
            direct[name] = row_of_input[reductions[name].operand]
        else:
            buffers[name] = f"{tag}row{j}"
            setup.append(f"{tag}row{j} = np.empty({n}, {scalar_type(reductions[name].dtype)})")
    lines = [f"{pad}o = r * {n}"]
    inner_stride = {}
    for i, (where, name) in enumerate(sources):
        if inputs[i].kind == "scalar":
            continue
        if where == "local":
            lines.append(f"{pad}{input_locals[i]} = {name}")
            continue
        if where != "array" or inputs[i].kind not in ("broadcast", "strided"):
            continue
        aligned = inputs[i].aligned
        steps = (list(aligned) if inputs[i].kind == "strided" else
                 [0 if a == 1 and size != 1 else st
                  for a, size, st in zip(aligned, shape, strides(aligned))])
        terms = [f"((r // {below[d]}) % {shape[d]}) * {steps[d]}"
                 for d in range(len(shape) - 1) if steps[d]]
        lines.append(f"{pad}{tag}p{i} = {' + '.join(terms) if terms else '0'}")
        inner_stride[i] = steps[-1]
        if not steps[-1]:  # constant along the row: loaded once per row
            lines.append(f"{pad}{input_locals[i]} = {name}[{tag}p{i}]")
    lines.append(f"{pad}for c in {columns or f'range({n})'}:")
    inner = pad + "    "
    lines.append(f"{inner}k = o + c")
    for i, (where, name) in enumerate(sources):
        kind = inputs[i].kind
        if where == "rowbuf":
            lines.append(f"{inner}{input_locals[i]} = {name}[c]")
        elif where != "array":
            continue
        elif kind == "full":
            lines.append(f"{inner}{input_locals[i]} = {name}[k]")
        elif kind in ("broadcast", "strided") and inner_stride[i]:
            step = "c" if inner_stride[i] == 1 else f"c * {inner_stride[i]}"
            lines.append(f"{inner}{input_locals[i]} = {name}[{tag}p{i} + {step}]")
    lines.extend(inner + line for line in body)
    for name, buffer in buffers.items():
        lines.append(f"{inner}{buffer}[c] = {reductions[name].operand}")
    for j, name in enumerate(results):
        if name not in reductions:
            for where, target in targets[j]:
                lines.append(f"{inner}{target}[{'c' if where == 'rowbuf' else 'k'}] = {name}")
    for name, row in {**buffers, **direct}.items():
        reduction = reductions[name]
        lines.append(f"{pad}{name}_row = {_row_reduce_call(reduction, row)}")
        lines.extend(pad + line for line in _combine(reduction, f"{name}_row", name))
    for j, name in enumerate(results):
        if name in reductions:
            lines.extend(f"{pad}{target}[r] = {name}" for where, target in targets[j]
                         if where == "array")
    return setup, lines
