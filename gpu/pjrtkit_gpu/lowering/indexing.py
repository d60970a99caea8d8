"""``gather`` and ``scatter`` as generated kernels: one thread per output (gather) or update
(scatter) element computes its operand position from the start indices it loads, with
StableHLO's rules (gather clamps a start so the slice fits; scatter skips an update window that
does not fit). Scatter's combiner: replace (a store), add (``tl.atomic_add``; float32, float64
and 32/64-bit integers, whose atomics every target has) or max/min (``tl.atomic_max``/``min``,
32/64-bit integers); any other combiner of elementwise ops (16-bit float add, float max/min,
``.at[].apply``) is the ordered scatter: one program folds the updates in order with the region
inlined, as XLA's CPU backend does (sequential in the updates, so slower). Batched gathers and
scatters (operand_batching_dims) are first rewritten without batching dimensions by the core
(``pjrtkit.expansions.batched_indexing``). A scatter of several operands whose combiner keeps
them apart (a complex scatter after the complex expansion) becomes one scatter per operand
(``pjrtkit.expansions.variadic_scatter``); one whose combiner mixes them (or whose region the
fusion pass grouped) is the ordered scatter over all of them."""
from __future__ import annotations

import math

from pjrtkit.expansions import lower_by_expansion
from pjrtkit.expansions.batched_indexing import gather_without_batching, scatter_without_batching
from pjrtkit.expansions.variadic_scatter import scatter_per_operand, separable_combiner
from pjrtkit.stablehlo.inline import inline_region_calls
from pjrtkit_gpu import codegen, dtypes as D, kernels
from pjrtkit_gpu.elementwise_table import NoKernel
from pjrtkit_gpu.lowering.elementwise import load_template, store_template
from pjrtkit_gpu.lowering.launching import blocks, row_major_strides
from pjrtkit_gpu.lowering.reduce import body_op_name
from pjrtkit_gpu.lowering.regions import captured_scalars, region_lines
from pjrtkit_gpu.lowering.structural import check_operands

_ATOMIC_ADD = (D.FLOAT32, D.FLOAT64, *(d for d in D.INTEGERS if d.itemsize >= 4))
# Integer max/min atomics every target has (float ones would drop XLA's NaN propagation).
_ATOMIC_MAX = tuple(d for d in D.INTEGERS if d.itemsize >= 4)


def _start_index_loads(indices_shape, index_vector_dim, batch_coords, count, lines, *,
                       lane: str = "i", mask: str | None = "mask"):
    """Lines loading ``s0..s{count-1}`` (int64) for the batch coordinates ``batch_coords``
    (expressions, in the order of the start indices' dims other than index_vector_dim), masked
    by ``mask`` (None: unmasked, the coordinates then being scalars broadcast over ``lane``)."""
    strides = row_major_strides(indices_shape)
    other = [d for d in range(len(indices_shape)) if d != index_vector_dim]
    terms = [f"{c} * {strides[d]}" for c, d in zip(batch_coords, other)]
    # One start index for every lane (no block coordinates): still a block of offsets, since
    # a load through a scalar pointer takes no block mask.
    if not terms or mask is None:
        terms.append(f"{lane} * 0")
    vector_stride = strides[index_vector_dim] if index_vector_dim < len(indices_shape) else 0
    lines.append(f"base = {' + '.join(terms)}")
    masked = f", mask={mask}, other=0" if mask is not None else ""
    for k in range(count):
        lines.append(f"s{k} = tl.load(idx + base + {k * vector_stride}{masked}).to(tl.int64)")


def gather(op, ctx):
    check_operands(op, ctx)
    dn = op.attributes["dimension_numbers"]
    operand, indices = op.operands[0].type, op.operands[1].type
    out = op.results[0].type
    if dn.operand_batching_dims:
        return lower_by_expansion(op, ctx, gather_without_batching)
    sizes = tuple(op.attributes["slice_sizes"])
    offset_dims = tuple(dn.offset_dims)
    batch_dims = [d for d in range(out.rank) if d not in offset_dims]
    window_dims = [d for d in range(operand.rank) if d not in dn.collapsed_slice_dims]
    lines = codegen.coordinates("i", out.shape, "c")
    _start_index_loads(indices.shape, dn.index_vector_dim, [f"c{d}" for d in batch_dims],
                       len(dn.start_index_map), lines)
    start = {d: f"tl.minimum(tl.maximum(s{k}, 0), {operand.shape[d] - sizes[d]})"
             for k, d in enumerate(dn.start_index_map)}
    window_coord = {d: f"c{o}" for d, o in zip(window_dims, offset_dims)}
    strides = row_major_strides(operand.shape)
    terms = [f"({start.get(d, '0')} + {window_coord.get(d, '0')}) * {strides[d]}"
             for d in range(operand.rank)]
    lines.append(f"source = {' + '.join(terms) or '0'}")
    lines.append("tl.store(out + i, tl.load(x + source, mask=mask), mask=mask)")
    kernel = codegen.load_kernel(codegen.linear_kernel_source("gather", ["x", "idx", "out"],
                                                               lines), "gather")
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    n = out.size

    def run_gather(x, idx):
        result = driver.empty(device, out.shape, out.dtype)
        if n:
            driver.launch(device, kernel, (blocks(n, kernels.ELEMENTWISE_BLOCK),),
                          [x, idx, result, n], {"BLOCK": kernels.ELEMENTWISE_BLOCK})
        return (result,)

    return run_gather


def _combiner(op) -> str | None:
    """How the scatter kernel combines: "replace" (a store), "add"/"max"/"min" (an atomic the
    dtype has), or None (any other region: the ordered scatter folds it)."""
    block = op.regions[0].entry
    if (len(block.ops) == 1 and len(block.arguments) == 2
            and [v.id for v in block.ops[0].operands] == [block.arguments[1].id]):
        return "replace"
    body = body_op_name(op.regions[0])
    dtype = op.operands[0].type.dtype
    if body == "stablehlo.add" and dtype in _ATOMIC_ADD:
        return "add"
    if body in ("stablehlo.maximum", "stablehlo.minimum") and dtype in _ATOMIC_MAX:
        return "max" if body == "stablehlo.maximum" else "min"
    return None


def _layout(op):
    """(scatter dims of the updates, operand window dims, window size per operand dim, start
    index per operand dim (``s<k>``), window coordinate per operand dim (``c<update dim>``))."""
    dn = op.attributes["scatter_dimension_numbers"]
    count = (len(op.operands) - 1) // 2  # operands, indices, updates
    operand, updates = op.operands[0].type, op.operands[count + 1].type
    window_dims = tuple(dn.update_window_dims)
    scatter_dims = [d for d in range(updates.rank) if d not in window_dims]
    operand_window_dims = [d for d in range(operand.rank) if d not in dn.inserted_window_dims]
    window_size = {d: updates.shape[u] for d, u in zip(operand_window_dims, window_dims)}
    start = {d: f"s{k}" for k, d in enumerate(dn.scatter_dims_to_operand_dims)}
    window_coord = {d: f"c{u}" for d, u in zip(operand_window_dims, window_dims)}
    return scatter_dims, window_size, start, window_coord


def _target_lines(op, lines):
    """Lines computing ``inside`` (the update's window fits the operand and the lane is live:
    ``mask``) and ``target`` (its operand offset), from ``s<k>`` and ``c<d>``."""
    operand = op.operands[0].type
    _, window_size, start, window_coord = _layout(op)
    strides = row_major_strides(operand.shape)
    fits = [f"({s} >= 0) & ({s} <= {operand.shape[d] - window_size.get(d, 1)})"
            for d, s in start.items()]
    lines.append(f"inside = mask & {' & '.join(fits) if fits else 'mask'}")
    terms = [f"({start.get(d, '0')} + {window_coord.get(d, '0')}) * {strides[d]}"
             for d in range(operand.rank)]
    lines.append(f"target = tl.where(inside, {' + '.join(terms) or '0'}, 0)")


def ordered_scatter_kernel(op, program, captures=()):
    """One program folds the updates into the results in XLA's order, one scatter position
    after the other (its lanes cover the position's window, whose targets are distinct), with
    the combiner region inlined: any elementwise combiner on any dtype and any number of
    operands (one that mixes them: a complex combiner after the complex expansion), bit for bit
    as XLA's CPU backend folds duplicates. Sequential in the updates: the path of combiners
    without an atomic (16-bit float add, float max/min with NaN, ``.at[].apply``). Returns
    (kernel, scatter positions, window elements); its parameters: ``idx``, ``upd<k>``,
    ``out<k>``, ``cap<k>``, ``n`` (the positions), ``BLOCK``."""
    dn = op.attributes["scatter_dimension_numbers"]
    count_operands = (len(op.operands) - 1) // 2
    indices, updates = op.operands[count_operands].type, op.operands[count_operands + 1].type
    dtypes = [v.type.dtype for v in op.operands[:count_operands]]
    scatter_dims, _, _, _ = _layout(op)
    window_dims = list(dn.update_window_dims)
    body = inline_region_calls(op.regions[0], program)
    region, results = region_lines(
        body, [f"old{k}" for k in range(count_operands)] + [f"new{k}" for k in range(count_operands)],
        "r", {v.id: f"cp{k}" for k, v in enumerate(captures)})
    if len(results) != count_operands:
        raise NoKernel(f"scatter combiner returning {len(results)} values for "
                       f"{count_operands} operands")
    positions = [updates.shape[d] for d in scatter_dims]
    window = [updates.shape[d] for d in window_dims]
    lines = [f"cp{k} = {c}" for k, c in enumerate(captured_scalars(captures))]
    lines.append("lanes = tl.arange(0, BLOCK).to(tl.int64)")
    lines.append("for u in range(0, n):")
    inner = codegen.coordinates("u", positions, "q")
    # every lane loads the position's start
    _start_index_loads(indices.shape, dn.index_vector_dim,
                       [f"q{k}" for k in range(len(positions))],
                       len(dn.scatter_dims_to_operand_dims), inner, lane="lanes", mask=None)
    count = math.prod(window)
    inner.append(f"for w0 in range(0, {count}, BLOCK):")
    chunk = ["w = w0 + lanes", f"mask = w < {count}"]
    chunk += codegen.coordinates("w", window, "p")
    coordinate = {d: f"q{k}" for k, d in enumerate(scatter_dims)}
    coordinate.update((d, f"p{k}") for k, d in enumerate(window_dims))
    chunk += [f"c{d} = {coordinate[d]}" for d in range(updates.rank)]
    update_strides = row_major_strides(updates.shape)
    # (+ w * 0: a block even when the updates have no window dimensions)
    chunk.append("j = " + " + ".join([*(f"c{d} * {update_strides[d]}"
                                       for d in range(updates.rank)), "w * 0"]))
    _target_lines(op, chunk)
    for k, dtype in enumerate(dtypes):
        load = load_template(dtype)
        # .cg: read the result from L2, where an earlier position's store from another lane is
        chunk.append(f"old{k} = " + load.format(
            v=f"tl.load(out{k} + target, mask=inside, other=0, cache_modifier='.cg')"))
        chunk.append(f"new{k} = " + load.format(v=f"tl.load(upd{k} + j, mask=inside, other=0)"))
    chunk += region
    for k, dtype in enumerate(dtypes):
        chunk.append(f"tl.store(out{k} + target, {store_template(dtype).format(v=results[k])}, "
                     f"mask=inside)")
    inner += [f"    {line}" for line in chunk]
    inner.append("tl.debug_barrier()  # this position's stores before the next one's loads")
    lines += [f"    {line}" for line in inner]
    params = ["idx", *(f"upd{k}" for k in range(count_operands)),
              *(f"out{k}" for k in range(count_operands)),
              *(f"cap{k}" for k in range(len(captures)))]
    source = (codegen.HEADER + "@triton.jit\n"
              + f"def ordered_scatter({', '.join(params)}, n, BLOCK: tl.constexpr):\n"
              + "\n".join(f"    {line}" for line in lines) + "\n")
    return codegen.load_kernel(source, "ordered_scatter"), math.prod(positions), count


def _ordered_scatter(op, ctx, captures):
    """The rule's function running ``ordered_scatter_kernel``: UNIMPLEMENTED naming the op the
    combiner has no expression for."""
    count_operands = (len(op.operands) - 1) // 2
    updates = op.operands[count_operands + 1].type
    try:
        kernel, positions, count = ordered_scatter_kernel(op, ctx.program, captures)
    except NoKernel as exc:
        inner = getattr(exc, "op", None)
        what = f" ({inner.describe()})" if inner is not None else ""
        names = ", ".join(v.type.dtype.name for v in op.operands[:count_operands])
        raise ctx.unimplemented(op, f"scatter combiner on {names}: {exc}{what}") from None
    block = min(kernels.ELEMENTWISE_BLOCK, max(16, 1 << max(count - 1, 0).bit_length()))
    driver, device = ctx.payloads.driver, ctx.payloads.device_index

    def run_ordered_scatter(*args):
        xs, idx = args[:count_operands], args[count_operands]
        upds = args[count_operands + 1:2 * count_operands + 1]
        captured = args[2 * count_operands + 1:]
        results = tuple(driver.duplicate(x) for x in xs)
        if positions and updates.size:
            driver.launch(device, kernel, (1,), [idx, *upds, *results, *captured, positions],
                          {"BLOCK": block})
        return results

    return run_ordered_scatter


def scatter(op, ctx):
    check_operands(op, ctx)
    dn = op.attributes["scatter_dimension_numbers"]
    if dn.input_batching_dims:
        return lower_by_expansion(op, ctx, scatter_without_batching)
    captures = ctx.captures(op)
    if len(op.operands) != 3:
        if separable_combiner(op):  # one scatter per operand, each maybe with an atomic
            return lower_by_expansion(op, ctx, scatter_per_operand)
        return _ordered_scatter(op, ctx, captures)
    operand, indices, updates = (v.type for v in op.operands)
    combine = None if captures else _combiner(op)
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    if combine is None:
        return _ordered_scatter(op, ctx, captures)
    scatter_dims, _, _, _ = _layout(op)
    lines = codegen.coordinates("i", updates.shape, "c")
    _start_index_loads(indices.shape, dn.index_vector_dim, [f"c{d}" for d in scatter_dims],
                       len(dn.scatter_dims_to_operand_dims), lines)
    _target_lines(op, lines)
    lines.append("value = tl.load(upd + i, mask=mask)")
    if combine in ("add", "max", "min"):
        lines.append(f"tl.atomic_{combine}(out + target, value, mask=inside)")
    else:
        lines.append("tl.store(out + target, value, mask=inside)")
    kernel = codegen.load_kernel(codegen.linear_kernel_source(
        "scatter", ["idx", "upd", "out"], lines), "scatter")
    n = math.prod(updates.shape)

    def run_scatter(x, idx, upd):
        result = driver.duplicate(x)
        if n:
            driver.launch(device, kernel, (blocks(n, kernels.ELEMENTWISE_BLOCK),),
                          [idx, upd, result, n], {"BLOCK": kernels.ELEMENTWISE_BLOCK})
        return (result,)

    return run_scatter


INDEXING_RULES = {"stablehlo.gather": gather, "stablehlo.scatter": scatter}
