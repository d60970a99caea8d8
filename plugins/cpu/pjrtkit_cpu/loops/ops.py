"""Per-op code for native loops: constants, elementwise ops, broadcasts, reshapes, dynamic
slices and updates. Each emitter binds the op's results in a ``LoopSource`` and appends the
statements computing them to ``lines``; an op or shape it cannot express raises
``Unsupported``.

Elementwise ops reuse the fused-loop code generator (``fusion.codegen.emit``), so they have
exactly the same XLA semantics (integer wrap-around, shift and division edge cases, saturating
float->int converts, NaN-propagating max/min) as fused groups; transcendentals come from
``mathfns``. An elementwise op whose operands are all scalars or splats runs once, not once
per element.
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.stablehlo.ir import Op

from pjrtkit_cpu.fusion import codegen
from pjrtkit_cpu.loops import mathfns
from pjrtkit_cpu.loops.emitter import LoopSource, Unsupported, Val, literal, tensor_type
from pjrtkit_cpu.loops.ownership import IN_PLACE_UPDATE

I = "    "


def _strides(shape) -> list[int]:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def constant(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    value = np.asarray(op.attributes["value"])
    value = np.broadcast_to(value, t.shape).astype(t.dtype)
    if value.size == 0:
        raise Unsupported("empty constant")
    flat = value.reshape(-1)
    uniform = (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all()
    if uniform:
        kind = "scalar" if not t.shape else "splat"
        src.bind(op.results[0], Val(kind, literal(flat[0], t.dtype), t.shape, t.dtype))
    else:
        src.bind(op.results[0], Val("array", src.constant(flat, t.dtype), t.shape, t.dtype))
        src.invariant.add(op.results[0].id)


def elementwise(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    if len(op.results) != 1:
        raise Unsupported(op.name)
    operands = [src.get(v) for v in op.operands]
    for v in op.operands:
        tensor_type(v)
    result = src.name("t")
    if all(o.kind != "array" for o in operands):
        body = _element_lines(op, [o.expr for o in operands], result)
        lines.extend(body)
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat", result, t.shape,
                                    t.dtype))
        return
    out = src.buffer(t.shape, t.dtype)
    names = []
    loads = []
    for i, o in enumerate(operands):
        if o.kind == "array":
            names.append(f"{result}_{i}")
            loads.append(f"{result}_{i} = {o.expr}[q]")
        else:
            names.append(o.expr)
    lines.append(f"for q in range({t.size}):")
    lines.extend(I + line for line in loads + _element_lines(op, names, result))
    lines.append(f"{I}{out}[q] = {result}")
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def _element_lines(op: Op, names: list[str], result: str) -> list[str]:
    body = codegen.emit(op, names, result)
    if body is None:
        body = mathfns.emit(op, names, result)
    if body is None:
        raise Unsupported(op.describe())
    return body


def broadcast_in_dim(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat", x.expr, t.shape,
                                    t.dtype))
        return
    dims = tuple(op.attributes["broadcast_dimensions"])
    if x.size == t.size and list(dims) == sorted(dims):
        src.bind(op.results[0], src.alias(x, t.shape))  # only size-1 dims are added
        return
    in_strides = _strides(x.shape)
    stride_of = [0] * len(t.shape)
    for src_dim, dst_dim in enumerate(dims):
        if x.shape[src_dim] != 1:
            stride_of[dst_dim] = in_strides[src_dim]
    out = src.buffer(t.shape, t.dtype)
    counter = src.name("o")
    lines.append(f"{counter} = 0")
    indent = ""
    terms = []
    for d, size in enumerate(t.shape):
        if size == 1:
            continue
        index = src.name("i")
        lines.append(f"{indent}for {index} in range({size}):")
        indent += I
        if stride_of[d]:
            terms.append(f"{index} * {stride_of[d]}")
    lines.append(f"{indent}{out}[{counter}] = {x.expr}[{' + '.join(terms) or '0'}]")
    lines.append(f"{indent}{counter} += 1")
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def reshape(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat", x.expr, t.shape,
                                    t.dtype))
    elif not t.shape:
        name = src.name("s")
        lines.append(f"{name} = {x.expr}[0]")
        src.bind(op.results[0], Val("scalar", name, (), t.dtype))
    else:
        src.bind(op.results[0], src.alias(x, t.shape))
    if op.operands[0].id in src.invariant:
        src.invariant.add(op.results[0].id)


def _clamped_starts(src: LoopSource, op: Op, first: int, operand_shape, sizes,
                    lines: list[str]) -> list[str]:
    """Locals holding each start index clamped into [0, dim - size], as XLA does."""
    names = []
    for v, dim, size in zip(op.operands[first:], operand_shape, sizes):
        s = src.get(v)
        if s.kind != "scalar" or s.dtype.kind not in "iu":
            raise Unsupported("dynamic start index")
        limit = dim - size
        name = src.name("st")
        if s.dtype.kind == "u":
            u = f"np.{s.dtype.name}"
            lines.append(f"{name} = np.int64({s.expr}) if {s.expr} <= {u}({limit}) "
                         f"else np.int64({limit})")
        else:
            lines.append(f"{name} = np.int64({s.expr})")
            lines.append(f"if {name} < 0:")
            lines.append(f"{I}{name} = np.int64(0)")
            lines.append(f"if {name} > {limit}:")
            lines.append(f"{I}{name} = np.int64({limit})")
        names.append(name)
    return names


def _box(src: LoopSource, shape, sizes, starts: list[str], lines: list[str]):
    """Loops over a box of ``sizes`` at ``starts`` of an array of ``shape``: returns (indent,
    flat index expression into the array, counter of the box's flat index)."""
    strides = _strides(shape)
    base = src.name("base")
    lines.append(f"{base} = " + (" + ".join(f"{s} * {st}" for s, st in zip(starts, strides))
                                 or "0"))
    counter = src.name("o")
    lines.append(f"{counter} = 0")
    indent = ""
    terms = [base]
    for d, size in enumerate(sizes):
        if size == 1:
            continue
        index = src.name("i")
        lines.append(f"{indent}for {index} in range({size}):")
        indent += I
        terms.append(f"{index} * {strides[d]}")
    return indent, " + ".join(terms), counter


def _contiguous(shape, sizes) -> bool:
    """Whether a box of ``sizes`` is one contiguous run of a row-major array of ``shape``."""
    started = False
    for dim, size in zip(shape, sizes):
        if started and size != dim:
            return False
        if size != 1:
            started = True
    return True


def dynamic_slice(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    sizes = tuple(op.attributes["slice_sizes"])
    if x.kind != "array":
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat", x.expr, t.shape,
                                    t.dtype))
        return
    starts = _clamped_starts(src, op, 1, x.shape, sizes, lines)
    if not t.shape:
        src.bind(op.results[0], Val("scalar", f"{x.expr}[0]", (), t.dtype))
        return
    if _contiguous(x.shape, sizes):
        # A view: the ownership rules treat every value computed from a carry as sharing it.
        base = src.name("base")
        strides = _strides(x.shape)
        lines.append(f"{base} = " + " + ".join(f"{s} * {st}" for s, st in zip(starts, strides)))
        view = src.name("v")
        lines.append(f"{view} = {x.expr}[{base}:{base} + {t.size}]")
        src.bind(op.results[0], src.alias(x, t.shape, view))
        return
    out = src.buffer(t.shape, t.dtype)
    indent, index, counter = _box(src, x.shape, sizes, starts, lines)
    lines.append(f"{indent}{out}[{counter}] = {x.expr}[{index}]")
    lines.append(f"{indent}{counter} += 1")
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def dynamic_update_slice(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    update = src.get(op.operands[1])
    sizes = op.operands[1].type.shape
    if not t.shape:
        src.bind(op.results[0], Val("scalar", update.expr if update.kind != "array"
                                    else f"{update.expr}[0]", (), t.dtype))
        return
    starts = _clamped_starts(src, op, 2, t.shape, sizes, lines)
    if op.name == IN_PLACE_UPDATE and x.kind == "array" and x.expr == x.storage:
        out = x.expr  # a carry nobody reads again (see ownership): write into it
    else:
        out = src.buffer(t.shape, t.dtype)
        lines.append(f"for q in range({t.size}):")
        lines.append(f"{I}{out}[q] = {x.element('q')}")
    if out == x.expr and update.kind == "array" and update.storage == x.storage:
        raise Unsupported("in-place update read from the array it updates")
    indent, index, counter = _box(src, t.shape, sizes, starts, lines)
    lines.append(f"{indent}{out}[{index}] = {update.element(counter)}")
    lines.append(f"{indent}{counter} += 1")
    if out == x.expr:
        src.bind(op.results[0], x)
    else:
        src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def iota(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    dim = op.attributes["iota_dimension"]
    line = np.arange(t.shape[dim], dtype=np.int64).astype(t.dtype)  # wraps like the kernel
    shape = [1] * len(t.shape)
    shape[dim] = t.shape[dim]
    value = np.ascontiguousarray(np.broadcast_to(line.reshape(shape), t.shape))
    if value.size == 1:
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat",
                                    literal(value.reshape(-1)[0], t.dtype), t.shape, t.dtype))
        return
    src.bind(op.results[0], Val("array", src.constant(value, t.dtype), t.shape, t.dtype))
    src.invariant.add(op.results[0].id)


def slice_(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat", x.expr, t.shape,
                                    t.dtype))
        return
    starts = list(op.attributes["start_indices"])
    steps = list(op.attributes["strides"])
    strides = _strides(x.shape)
    if not t.shape:
        name = src.name("s")
        lines.append(f"{name} = {x.expr}[0]")
        src.bind(op.results[0], Val("scalar", name, (), t.dtype))
        return
    base = sum(s * st for s, st in zip(starts, strides))
    if all(step == 1 for step in steps) and _contiguous(x.shape, t.shape):
        view = src.name("v")
        lines.append(f"{view} = {x.expr}[{base}:{base + t.size}]")
        src.bind(op.results[0], src.alias(x, t.shape, view))
        return
    out = src.buffer(t.shape, t.dtype)
    counter = src.name("o")
    lines.append(f"{counter} = 0")
    indent = ""
    terms = [str(base)]
    for d, size in enumerate(t.shape):
        if size == 1:
            continue
        index = src.name("i")
        lines.append(f"{indent}for {index} in range({size}):")
        indent += I
        terms.append(f"{index} * {strides[d] * steps[d]}")
    lines.append(f"{indent}{out}[{counter}] = {x.expr}[{' + '.join(terms)}]")
    lines.append(f"{indent}{counter} += 1")
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def transpose(src: LoopSource, op: Op, lines: list[str]) -> None:
    from pjrtkit_cpu.loops.dot import permuted
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    if x.kind != "array":
        src.bind(op.results[0], Val("scalar" if not t.shape else "splat", x.expr, t.shape,
                                    t.dtype))
        return
    invariant = op.operands[0].id in src.invariant
    out = permuted(src, x, list(op.attributes["permutation"]), invariant, lines)
    val = Val("array", out, t.shape, t.dtype) if out != x.expr else src.alias(x, t.shape)
    src.bind(op.results[0], val)
    if invariant:
        src.invariant.add(op.results[0].id)


def reduce(src: LoopSource, op: Op, lines: list[str]) -> None:
    """One input, a scalar init and a body ``return op(a, b)``: the combine step is the body's
    own op through the elementwise emitter, so max/min/NaN/wrap-around are XLA's."""
    if len(op.operands) != 2 or len(op.regions) != 1:
        raise Unsupported("variadic reduce")
    block = op.regions[0].entry
    if len(block.ops) != 2 or len(block.arguments) != 2:
        raise Unsupported("reduce body")
    combine, ret = block.ops
    if ret.operands != combine.results or set(combine.operands) != set(block.arguments) \
            or len(combine.operands) != 2:
        raise Unsupported("reduce body")
    t = tensor_type(op.results[0])
    x, init = src.get(op.operands[0]), src.get(op.operands[1])
    if init.kind != "scalar" or x.kind != "array":
        raise Unsupported("reduce of a splat")
    reduced = set(op.attributes["dimensions"])
    strides = _strides(x.shape)
    kept = [d for d in range(len(x.shape)) if d not in reduced]
    acc = src.name("acc")
    element = src.name("e")
    step = src.name("r")
    out = src.buffer(t.shape, t.dtype) if t.shape else None
    counter = src.name("o")
    lines.append(f"{counter} = 0")
    indent = ""
    terms = ["0"]
    for d in kept + sorted(reduced):
        if d == (sorted(reduced) or [None])[0]:
            lines.append(f"{indent}{acc} = {init.expr}")
        if x.shape[d] == 1:
            continue
        index = src.name("i")
        lines.append(f"{indent}for {index} in range({x.shape[d]}):")
        indent += I
        terms.append(f"{index} * {strides[d]}")
    if not reduced:
        lines.append(f"{indent}{acc} = {init.expr}")
    lines.append(f"{indent}{element} = {x.expr}[{' + '.join(terms)}]")
    names = [acc if v is block.arguments[0] else element for v in combine.operands]
    lines.extend(indent + line for line in _element_lines(combine, names, step))
    lines.append(f"{indent}{acc} = {step}")
    if out is not None:
        indent = I * sum(1 for d in kept if x.shape[d] != 1)
        lines.append(f"{indent}{out}[{counter}] = {acc}")
        lines.append(f"{indent}{counter} += 1")
        src.bind(op.results[0], Val("array", out, t.shape, t.dtype))
    else:
        src.bind(op.results[0], Val("scalar", acc, (), t.dtype))


def concatenate(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    axis = op.attributes["dimension"]
    out = src.buffer(t.shape, t.dtype)
    offset = 0
    for v in op.operands:
        x = src.get(v)
        starts = ["0"] * len(t.shape)
        starts[axis] = str(offset)
        indent, index, counter = _box(src, t.shape, tensor_type(v).shape, starts, lines)
        lines.append(f"{indent}{out}[{index}] = {x.element(counter)}")
        lines.append(f"{indent}{counter} += 1")
        offset += tensor_type(v).shape[axis]
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def _dot(src, op, lines):
    from pjrtkit_cpu.loops import dot
    dot.dot_general(src, op, lines)


EMITTERS = {
    "stablehlo.constant": constant,
    "stablehlo.broadcast_in_dim": broadcast_in_dim,
    "stablehlo.reshape": reshape,
    "stablehlo.dynamic_slice": dynamic_slice,
    "stablehlo.dynamic_update_slice": dynamic_update_slice,
    IN_PLACE_UPDATE: dynamic_update_slice,
    "stablehlo.dot_general": _dot,
    "stablehlo.iota": iota,
    "stablehlo.slice": slice_,
    "stablehlo.transpose": transpose,
    "stablehlo.reduce": reduce,
    "stablehlo.concatenate": concatenate,
}


def emit_op(src: LoopSource, op: Op, lines: list[str]) -> None:
    emitter = EMITTERS.get(op.name)
    if emitter is None or (op.regions and emitter is not reduce):
        if op.regions or not op.name.startswith(codegen.PREFIX):
            raise Unsupported(op.name)
        emitter = elementwise
    for v in op.results:
        if math.prod(tensor_type(v).shape) == 0:
            raise Unsupported("empty tensor")
    emitter(src, op, lines)
