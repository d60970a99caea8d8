"""Structural ops in native loops: broadcast_in_dim, reshape, iota, static slice, transpose
and concatenate. Reshapes, and slices that are one contiguous run, are views (``alias``):
the ownership rules already treat every value computed from a carry as sharing its memory.
Broadcasts of scalars stay splats; other results are written into buffers."""
from __future__ import annotations

import numpy as np

from pjrtkit.stablehlo.ir import Op

from pjrtkit_cpu.loops.dot import permuted
from pjrtkit_cpu.loopnest.values import contiguous, literal, strides
from pjrtkit_cpu.loops.emitter import INDENT, LoopSource, Val, tensor_type
from pjrtkit_cpu.loops.indexing import box


def gather(src: LoopSource, x: Val, t, base: int, step_of: list[int],
            lines: list[str]) -> Val:
    """A buffer of type ``t`` holding x[base + sum(i_d * step_of[d])] in row-major order
    (a step of 0 repeats the element: broadcasting)."""
    out = src.buffer(t.shape, t.dtype)
    counter = src.name("o")
    lines.append(f"{counter} = 0")
    indent = ""
    terms = [str(base)] if base else []
    for d, size in enumerate(t.shape):
        if size == 1:
            continue
        index = src.name("i")
        lines.append(f"{indent}for {index} in range({size}):")
        indent += INDENT
        if step_of[d]:
            terms.append(f"{index} * {step_of[d]}")
    lines.append(f"{indent}{out}[{counter}] = {x.expr}[{' + '.join(terms) or '0'}]")
    lines.append(f"{indent}{counter} += 1")
    return Val("array", out, t.shape, t.dtype)


def broadcast_in_dim(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val.uniform(x.expr, t))
        return
    dims = tuple(op.attributes["broadcast_dimensions"])
    if x.size == t.size and list(dims) == sorted(dims):
        src.bind(op.results[0], src.alias(x, t.shape))  # only size-1 dims are added
        return
    in_strides = strides(x.shape)
    stride_of = [0] * len(t.shape)
    for src_dim, dst_dim in enumerate(dims):
        if x.shape[src_dim] != 1:
            stride_of[dst_dim] = in_strides[src_dim]
    src.bind(op.results[0], gather(src, x, t, 0, stride_of, lines))


def reshape(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val.uniform(x.expr, t))
    elif not t.shape:
        name = src.name("s")
        lines.append(f"{name} = {x.expr}[0]")
        src.bind(op.results[0], Val("scalar", name, (), t.dtype))
    else:
        src.bind(op.results[0], src.alias(x, t.shape))
    if op.operands[0].id in src.invariant:
        src.invariant.add(op.results[0].id)


def iota(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    dim = op.attributes["iota_dimension"]
    line = np.arange(t.shape[dim], dtype=np.int64).astype(t.dtype)  # wraps like the kernel
    shape = [1] * len(t.shape)
    shape[dim] = t.shape[dim]
    value = np.ascontiguousarray(np.broadcast_to(line.reshape(shape), t.shape))
    if value.size == 1:
        src.bind(op.results[0], Val.uniform(literal(value.reshape(-1)[0], t.dtype), t))
        return
    src.bind(op.results[0], Val("array", src.constant(value, t.dtype), t.shape, t.dtype))
    src.invariant.add(op.results[0].id)


def slice_(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val.uniform(x.expr, t))
        return
    starts = list(op.attributes["start_indices"])
    steps = list(op.attributes["strides"])
    layout = strides(x.shape)
    if not t.shape:
        name = src.name("s")
        lines.append(f"{name} = {x.expr}[0]")
        src.bind(op.results[0], Val("scalar", name, (), t.dtype))
        return
    base = sum(s * st for s, st in zip(starts, layout))
    if all(step == 1 for step in steps) and contiguous(x.shape, t.shape):
        view = src.name("v")
        lines.append(f"{view} = {x.expr}[{base}:{base + t.size}]")
        src.bind(op.results[0], src.alias(x, t.shape, view))
        return
    step_of = [layout[d] * steps[d] for d in range(len(t.shape))]
    src.bind(op.results[0], gather(src, x, t, base, step_of, lines))


def transpose(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val.uniform(x.expr, t))
        return
    invariant = op.operands[0].id in src.invariant
    out = permuted(src, x, list(op.attributes["permutation"]), invariant, lines)
    val = Val("array", out, t.shape, t.dtype) if out != x.expr else src.alias(x, t.shape)
    src.bind(op.results[0], val)
    if invariant:
        src.invariant.add(op.results[0].id)


def concatenate(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    axis = op.attributes["dimension"]
    out = src.buffer(t.shape, t.dtype)
    offset = 0
    for v in op.operands:
        x = src.get(v)
        starts = ["0"] * len(t.shape)
        starts[axis] = str(offset)
        indent, index, counter = box(src, t.shape, tensor_type(v).shape, starts, lines)
        lines.append(f"{indent}{out}[{index}] = {x.element(counter)}")
        lines.append(f"{indent}{counter} += 1")
        offset += tensor_type(v).shape[axis]
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))
