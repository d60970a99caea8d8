"""dynamic_slice, dynamic_update_slice and scatter in native loops, with XLA's start clamping
(each start moved into [0, dim - size], unsigned starts compared before any cast). A slice that
is one contiguous run of its operand is a view; an update marked in place by ``ownership``
writes into its carry, any other update into a copy. A scatter writes into a copy of its
operand, skipping an update window that does not fit (as XLA does), its combiner emitted per
element with the driver's rules."""
from __future__ import annotations

from pjrtkit.stablehlo.ir import TERMINATORS, Op

from pjrtkit_cpu.loopnest.values import contiguous, strides
from pjrtkit_cpu.loops.emitter import (INDENT, LoopSource, Unsupported, Val, rank0_expr,
                                        tensor_type)
from pjrtkit_cpu.loops.ownership import IN_PLACE_UPDATE


def _clamped_starts(src: LoopSource, op: Op, first: int, operand_shape, sizes,
                    lines: list[str]) -> list[str]:
    """Locals holding each start index clamped into [0, dim - size], as XLA does."""
    names = []
    for v, dim, size in zip(op.operands[first:], operand_shape, sizes):
        s = src.get(v)
        if s.dtype.kind not in "iu":
            raise Unsupported("dynamic start index")
        expr = rank0_expr(s, "dynamic start index")
        limit = dim - size
        name = src.name("st")
        if s.dtype.kind == "u":
            u = f"np.{s.dtype.name}"
            lines.append(f"{name} = np.int64({expr}) if {expr} <= {u}({limit}) "
                         f"else np.int64({limit})")
        else:
            lines.append(f"{name} = np.int64({expr})")
            lines.append(f"if {name} < 0:")
            lines.append(f"{INDENT}{name} = np.int64(0)")
            lines.append(f"if {name} > {limit}:")
            lines.append(f"{INDENT}{name} = np.int64({limit})")
        names.append(name)
    return names


def box(src: LoopSource, shape, sizes, starts: list[str], lines: list[str]):
    """Loops over a box of ``sizes`` at ``starts`` of an array of ``shape``: returns (indent,
    flat index expression into the array, counter of the box's flat index)."""
    layout = strides(shape)
    base = src.name("base")
    lines.append(f"{base} = " + (" + ".join(f"{s} * {st}" for s, st in zip(starts, layout))
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
        indent += INDENT
        terms.append(f"{index} * {layout[d]}")
    return indent, " + ".join(terms), counter


def dynamic_slice(src: LoopSource, op: Op, lines: list[str]) -> None:
    t = tensor_type(op.results[0])
    x = src.get(op.operands[0])
    sizes = tuple(op.attributes["slice_sizes"])
    if x.kind != "array":
        src.bind(op.results[0], Val.uniform(x.expr, t))
        return
    starts = _clamped_starts(src, op, 1, x.shape, sizes, lines)
    if not t.shape:
        src.bind(op.results[0], Val("scalar", f"{x.expr}[0]", (), t.dtype))
        return
    if contiguous(x.shape, sizes):
        # A view: the ownership rules treat every value computed from a carry as sharing it.
        base = src.name("base")
        layout = strides(x.shape)
        lines.append(f"{base} = " + " + ".join(f"{s} * {st}" for s, st in zip(starts, layout)))
        view = src.name("v")
        lines.append(f"{view} = {x.expr}[{base}:{base} + {t.size}]")
        src.bind(op.results[0], src.alias(x, t.shape, view))
        return
    out = src.buffer(t.shape, t.dtype)
    indent, index, counter = box(src, x.shape, sizes, starts, lines)
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
        lines.append(f"{INDENT}{out}[q] = {x.element('q')}")
    if out == x.expr and update.kind == "array" and update.storage == x.storage:
        raise Unsupported("in-place update read from the array it updates")
    indent, index, counter = box(src, t.shape, sizes, starts, lines)
    lines.append(f"{indent}{out}[{index}] = {update.element(counter)}")
    lines.append(f"{indent}{counter} += 1")
    if out == x.expr:
        src.bind(op.results[0], x)
    else:
        src.bind(op.results[0], Val("array", out, t.shape, t.dtype))


def scatter(src: LoopSource, op: Op, lines: list[str]) -> None:
    """One operand, no batching dimensions: per update element, its start indices, whether its
    window fits, and the combiner (the region's ops on the current and the update element)."""
    if len(op.operands) != 3:
        raise Unsupported("variadic scatter")
    dn = op.attributes["scatter_dimension_numbers"]
    if dn.input_batching_dims:
        raise Unsupported("batched scatter")
    block = op.regions[0].entry
    if len(block.arguments) != 2 or block.ops[-1].name not in TERMINATORS:
        raise Unsupported("scatter combiner")
    t = tensor_type(op.results[0])
    it, ut = tensor_type(op.operands[1]), tensor_type(op.operands[2])
    x, idx, upd = (src.get(v) for v in op.operands)
    if "chained" in (x.kind, idx.kind, upd.kind) or idx.dtype.kind not in "iu":
        raise Unsupported("scatter operands")
    out = src.buffer(t.shape, t.dtype)
    lines += [f"for q in range({t.size}):", f"{INDENT}{out}[q] = {x.element('q')}"]
    window_dims = tuple(dn.update_window_dims)
    scatter_dims = [d for d in range(len(ut.shape)) if d not in window_dims]
    operand_window_dims = [d for d in range(len(t.shape)) if d not in dn.inserted_window_dims]
    window_size = {d: ut.shape[u] for d, u in zip(operand_window_dims, window_dims)}
    ustr, istr, ostr = strides(ut.shape), strides(it.shape), strides(t.shape)
    ivd = dn.index_vector_dim
    index_batch_dims = [d for d in range(len(it.shape)) if d != ivd]
    vector_stride = istr[ivd] if ivd < len(it.shape) else 0
    u = src.name("u")
    coord = {k: f"(({u} // {ustr[k]}) % {ut.shape[k]})" for k in range(len(ut.shape))}
    base = " + ".join(f"{coord[k]} * {istr[d]}"
                      for k, d in zip(scatter_dims, index_batch_dims)) or "0"
    loop: list[str] = []
    start = {}
    for j, d in enumerate(dn.scatter_dims_to_operand_dims):
        start[d] = src.name("si")
        loop.append(f"{start[d]} = np.int64({idx.element(f'{base} + {j * vector_stride}')})")
    fits = " and ".join(f"{start[d]} >= 0 and {start[d]} <= {t.shape[d] - window_size.get(d, 1)}"
                        for d in start) or "True"
    window = {d: coord[k] for d, k in zip(operand_window_dims, window_dims)}
    target = src.name("tg")
    terms = [f"({start.get(d, '0')} + {window.get(d, '0')}) * {ostr[d]}"
             for d in range(len(t.shape))]
    current, update = src.name("sc"), src.name("su")
    src.bind(block.arguments[0], Val("scalar", current, (), t.dtype))
    src.bind(block.arguments[1], Val("scalar", update, (), t.dtype))
    combine: list[str] = []
    for inner in block.ops[:-1]:
        src.emit_op(src, inner, combine)
    result = rank0_expr(src.get(block.ops[-1].operands[0]), "scatter combiner")
    loop += [f"if {fits}:",
             f"{INDENT}{target} = {' + '.join(terms) or '0'}",
             f"{INDENT}{current} = {out}[{target}]",
             f"{INDENT}{update} = {upd.element(u)}"]
    loop += [INDENT + line for line in combine]
    loop.append(f"{INDENT}{out}[{target}] = {result}")
    lines.append(f"for {u} in range({ut.size}):")
    lines += [INDENT + line for line in loop]
    src.bind(op.results[0], Val("array", out, t.shape, t.dtype))
