"""Window ops as generated kernels: ``reduce_window`` (one thread per output element folds its
window in row-major order, skipping padding and base dilation holes as XLA does; a one-op body
accumulates in the compute type, any other body of elementwise ops, over any number of
operands, is the region inlined, ``lowering.regions``) and ``convolution`` as an
implicit GEMM (rows: batch x output positions, columns: output features, contraction: input
features x window positions; the input tile is gathered from the operand on the fly, never
materialised), with any dimension numbers, strides, padding, lhs/rhs dilation and window
reversal. Grouped convolutions (feature_group_count / batch_group_count > 1) are the core's
ungrouped convolutions per group (``pjrtkit.expansions.convolution``).
"""
from __future__ import annotations

import math

from pjrtkit.expansions import lower_by_expansion
from pjrtkit.expansions.convolution import ungrouped_convolution
from pjrtkit.stablehlo.attributes import padding_pairs
from pjrtkit.stablehlo.inline import inline_region_calls
from pjrtkit_gpu import codegen, dtypes as D, kernels
from pjrtkit_gpu.elementwise_table import NoKernel
from pjrtkit_gpu.lowering.elementwise import load_template, store_template
from pjrtkit_gpu.lowering.launching import blocks, row_major_strides
from pjrtkit_gpu.lowering.reduce import body_op_name, combine_expression
from pjrtkit_gpu.lowering.regions import captured_scalars, region_lines
from pjrtkit_gpu.lowering.structural import check_operands

CONV_TILES = (32, 32, 32)
CONV_TILES_BROADCAST = (16, 16, 8)


def _window_attributes(op, rank):
    attrs = op.attributes
    ones = (1,) * rank
    padding = padding_pairs(attrs.get("padding"), rank)
    return (tuple(attrs.get("window_dimensions") or ones), tuple(attrs.get("window_strides") or ones),
            tuple(attrs.get("base_dilations") or ones), tuple(attrs.get("window_dilations") or ones),
            padding)


def _window_loop(x_t, window, strides, base, dilation, padding, lines):
    """Lines opening the loops over the window positions of output element ``o*`` (indented by
    the returned prefix), with ``ok`` (the position reads a real element: not padding, not a
    base dilation hole) and ``src`` (its offset in the operand)."""
    in_strides = row_major_strides(x_t.shape)
    indent = ""
    for d in range(x_t.rank):
        lines.append(f"{indent}for w{d} in range({window[d]}):")
        indent += "    "
    valid, terms = ["mask"], []
    for d in range(x_t.rank):
        lines.append(f"{indent}p{d} = o{d} * {strides[d]} + w{d} * {dilation[d]} - {padding[d][0]}")
        extent = (x_t.shape[d] - 1) * base[d] + 1
        valid.append(f"(p{d} >= 0) & (p{d} < {extent})"
                     + (f" & (p{d} % {base[d]} == 0)" if base[d] > 1 else ""))
        terms.append(f"(p{d} // {base[d]}) * {in_strides[d]}")
    lines.append(f"{indent}ok = {' & '.join(valid)}")
    lines.append(f"{indent}src = tl.where(ok, {' + '.join(terms) or '0'}, 0)")
    return indent


def _one_op_window_lines(op, x_t, out, attributes):
    """The kernel lines of a one-operand reduce_window whose body is one op the fold takes
    (``combine_expression``), accumulating in the compute type; None for any other body."""
    dtype = x_t.dtype
    body = body_op_name(op.regions[0])
    integer_only = ("stablehlo.and", "stablehlo.or", "stablehlo.xor")
    if len(op.operands) != 2 or body not in (
            "stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
            *integer_only) or dtype == D.BOOL or (body in integer_only and D.is_float(dtype)):
        return None
    accumulator = D.compute_language_type(dtype)
    combine = combine_expression(body, dtype)
    lines = codegen.coordinates("i", out.shape, "o")
    lines.append(f"init = tl.load(in1).to(tl.{accumulator})")
    lines.append(f"acc = tl.full([BLOCK], 0, tl.{accumulator}) + init")
    indent = _window_loop(x_t, *attributes, lines)
    lines.append(f"{indent}v = tl.load(in0 + src, mask=ok, other=0).to(tl.{accumulator})")
    # XLA skips padding and dilation holes (the init is folded in once, not per hole)
    lines.append(f"{indent}acc = tl.where(ok, {combine.format(a='acc', b='v')}, acc)")
    lines.append(f"tl.store(out0 + i, acc.to(tl.{D.storage_language_type(dtype)}), mask=mask)")
    return lines


def region_window_kernel(op, program, captures=()):
    """The generated reduce_window kernel of ``op`` folding its windows with its region
    (``_region_window_lines``): parameters ``in<k>`` (operands, then inits), ``out<k>``,
    ``cap<k>``, ``n``; ``NoKernel`` for a body op without an expression."""
    x_t = op.operands[0].type
    lines = _region_window_lines(op, program, x_t, op.results[0].type,
                                 _window_attributes(op, x_t.rank), captures)
    return _window_kernel(op, lines, captures)


def _window_kernel(op, lines, captures):
    n = len(op.operands) // 2
    params = ([f"in{k}" for k in range(2 * n)] + [f"out{k}" for k in range(n)]
              + [f"cap{k}" for k in range(len(captures))])
    return codegen.load_kernel(codegen.linear_kernel_source("reduce_window", params, lines),
                               "reduce_window")


def _region_window_lines(op, program, x_t, out, attributes, captures):
    """The kernel lines of any reduce_window whose body is elementwise ops, over any number of
    operands: each output element folds its window in row-major order with the region, in the
    operands' compute types, skipping padding and dilation holes as XLA does."""
    n = len(op.operands) // 2
    dtypes = [v.type.dtype for v in op.operands[:n]]
    body = inline_region_calls(op.regions[0], program)
    lines, results = region_lines(body, [f"acc{k}" for k in range(n)] + [f"v{k}" for k in range(n)],
                                  "r", {v.id: f"c{k}" for k, v in enumerate(captures)})
    if len(results) != n:
        raise NoKernel(f"reduce_window body returning {len(results)} values for {n} operands")
    loads = [load_template(d) for d in dtypes]
    body_lines = codegen.coordinates("i", out.shape, "o")
    body_lines += [f"c{k} = {load}" for k, load in enumerate(captured_scalars(captures))]
    for k in range(n):
        init = loads[k].format(v=f"tl.load(in{n + k})")
        body_lines.append(f"acc{k} = tl.where(mask, {init}, {init})")
    indent = _window_loop(x_t, *attributes, body_lines)
    for k in range(n):
        body_lines.append(f"{indent}v{k} = " + loads[k].format(
            v=f"tl.load(in{k} + src, mask=ok, other=0)"))
    body_lines += [f"{indent}{line}" for line in lines]
    for k in range(n):
        body_lines.append(f"{indent}acc{k} = tl.where(ok, {results[k]}, acc{k})")
    for k, d in enumerate(dtypes):
        body_lines.append(f"tl.store(out{k} + i, {store_template(d).format(v=f'acc{k}')}, "
                          f"mask=mask)")
    return body_lines


def reduce_window(op, ctx):
    check_operands(op, ctx)
    n = len(op.operands) // 2
    x_t = op.operands[0].type
    outs = [v.type for v in op.results]
    if any(v.type.shape != x_t.shape for v in op.operands[:n]):
        raise ctx.unimplemented(op, "reduce_window of operands of different shapes")
    attributes = _window_attributes(op, x_t.rank)
    captures = ctx.captures(op)
    lines = None if captures else _one_op_window_lines(op, x_t, outs[0], attributes)
    if lines is None:
        try:
            lines = _region_window_lines(op, ctx.program, x_t, outs[0], attributes, captures)
        except NoKernel as exc:
            inner = getattr(exc, "op", None)
            what = f" ({inner.describe()})" if inner is not None else ""
            names = ", ".join(v.type.dtype.name for v in op.operands[:n])
            raise ctx.unimplemented(op, f"reduce_window body on {names}: {exc}{what}") from None
    kernel = _window_kernel(op, lines, captures)
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    size = outs[0].size

    def run_reduce_window(*args):
        inputs, captured = args[:2 * n], args[2 * n:]
        results = tuple(driver.empty(device, t.shape, t.dtype) for t in outs)
        if size:
            driver.launch(device, kernel, (blocks(size, kernels.ELEMENTWISE_BLOCK),),
                          [*inputs, *results, *captured, size],
                          {"BLOCK": kernels.ELEMENTWISE_BLOCK})
        return results

    return run_reduce_window


def convolution(op, ctx):
    check_operands(op, ctx)
    attrs = op.attributes
    x_t, w_t, out = op.operands[0].type, op.operands[1].type, op.results[0].type
    groups = (int(attrs.get("feature_group_count", 1)), int(attrs.get("batch_group_count", 1)))
    if groups != (1, 1):  # one ungrouped convolution per group, concatenated (the core's)
        return lower_by_expansion(op, ctx, ungrouped_convolution)
    use_dot = x_t.dtype == w_t.dtype and x_t.dtype in (D.FLOAT16, D.BFLOAT16, D.FLOAT32) \
        and out.dtype in (D.FLOAT16, D.BFLOAT16, D.FLOAT32)
    if not use_dot and (x_t.dtype != w_t.dtype or x_t.dtype != out.dtype
                        or x_t.dtype == D.BOOL):
        raise ctx.unimplemented(op, f"convolution of {x_t.dtype.name} x {w_t.dtype.name} -> "
                                    f"{out.dtype.name}")
    dn = attrs["dimension_numbers"]
    k = len(dn.input_spatial_dimensions)
    ones = (1,) * k
    strides = tuple(attrs.get("window_strides") or ones)
    lhs_dilation = tuple(attrs.get("lhs_dilation") or ones)
    rhs_dilation = tuple(attrs.get("rhs_dilation") or ones)
    padding = padding_pairs(attrs.get("padding"), k)
    reversal = tuple(bool(r) for r in (attrs.get("window_reversal") or (False,) * k))
    batch, features = x_t.shape[dn.input_batch_dimension], x_t.shape[dn.input_feature_dimension]
    out_features = w_t.shape[dn.kernel_output_feature_dimension]
    window = [w_t.shape[d] for d in dn.kernel_spatial_dimensions]
    positions = [out.shape[d] for d in dn.output_spatial_dimensions]
    rows, depth = batch * math.prod(positions), features * math.prod(window)
    xs, ws, os_ = (row_major_strides(t.shape) for t in (x_t, w_t, out))
    lines = ["rm = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM).to(tl.int64)",
             "rn = tl.program_id(1).to(tl.int64) * BN + tl.arange(0, BN).to(tl.int64)"]
    lines += codegen.coordinates("rm", (batch, *positions), "m")
    accumulator = "tl.float32" if use_dot else f"tl.{D.compute_language_type(out.dtype)}"
    lines.append(f"acc = tl.zeros((BM, BN), dtype={accumulator})")
    lines.append(f"for kk in range(0, {depth}, BK):")
    body = ["rk = kk + tl.arange(0, BK).to(tl.int64)"]
    body += codegen.coordinates("rk", (features, *window), "q")
    ok = [f"(rm[:, None] < {rows})", f"(rk[None, :] < {depth})"]
    a_terms = [f"m0[:, None] * {xs[dn.input_batch_dimension]}",
               f"q0[None, :] * {xs[dn.input_feature_dimension]}"]
    b_terms = [f"q0[:, None] * {ws[dn.kernel_input_feature_dimension]}",
               f"rn[None, :] * {ws[dn.kernel_output_feature_dimension]}"]
    for s in range(k):
        extent = (x_t.shape[dn.input_spatial_dimensions[s]] - 1) * lhs_dilation[s] + 1
        body.append(f"p{s} = m{s + 1}[:, None] * {strides[s]} + q{s + 1}[None, :] * "
                    f"{rhs_dilation[s]} - {padding[s][0]}")
        ok.append(f"(p{s} >= 0) & (p{s} < {extent})"
                  + (f" & (p{s} % {lhs_dilation[s]} == 0)" if lhs_dilation[s] > 1 else ""))
        a_terms.append(f"(p{s} // {lhs_dilation[s]}) * {xs[dn.input_spatial_dimensions[s]]}")
        tap = f"({window[s] - 1} - q{s + 1})" if reversal[s] else f"q{s + 1}"
        b_terms.append(f"{tap}[:, None] * {ws[dn.kernel_spatial_dimensions[s]]}")
    body.append(f"ok = {' & '.join(ok)}")
    body.append(f"a = tl.load(x + tl.where(ok, {' + '.join(a_terms)}, 0), mask=ok, other=0)")
    body.append(f"bok = (rk[:, None] < {depth}) & (rn[None, :] < {out_features})")
    body.append(f"b = tl.load(w + tl.where(bok, {' + '.join(b_terms)}, 0), mask=bok, other=0)")
    widen = use_dot and x_t.dtype == D.BFLOAT16 and ctx.payloads.driver.interprets
    if use_dot:  # the interpreter's tl.dot multiplies bfloat16's raw bits (kernels.batched_matmul);
        # a constexpr, so the source (and what precompile builds from it) is the GPU's too
        body += ["if WIDEN:", "    a = a.to(tl.float32)", "    b = b.to(tl.float32)"]
    if use_dot:
        precision = ', input_precision="ieee"' if x_t.dtype == D.FLOAT32 else ""
        body.append(f"acc += tl.dot(a, b{precision})")
    else:
        body.append(f"acc += tl.sum(a.to({accumulator})[:, :, None] * "
                    f"b.to({accumulator})[None, :, :], axis=1).to({accumulator})")
    lines += [f"    {line}" for line in body]
    o_terms = [f"m0[:, None] * {os_[dn.output_batch_dimension]}",
               f"rn[None, :] * {os_[dn.output_feature_dimension]}"]
    o_terms += [f"m{s + 1}[:, None] * {os_[dn.output_spatial_dimensions[s]]}" for s in range(k)]
    lines.append(f"done = (rm[:, None] < {rows}) & (rn[None, :] < {out_features})")
    lines.append(f"tl.store(out + tl.where(done, {' + '.join(o_terms)}, 0), "
                 f"acc.to(tl.{D.storage_language_type(out.dtype)}), mask=done)")
    source = (codegen.HEADER + "@triton.jit\ndef convolution(x, w, out, BM: tl.constexpr, "
              "BN: tl.constexpr, BK: tl.constexpr, WIDEN: tl.constexpr):\n"
              + "".join(f"    {line}\n" for line in lines))
    kernel = codegen.load_kernel(source, "convolution")
    bm, bn, bk = CONV_TILES if use_dot else CONV_TILES_BROADCAST
    grid = (blocks(rows, bm), blocks(out_features, bn))
    driver, device = ctx.payloads.driver, ctx.payloads.device_index

    def run_convolution(x, w):
        result = driver.empty(device, out.shape, out.dtype)
        if rows and out_features:
            driver.launch(device, kernel, grid, [x, w, result],
                          {"BM": bm, "BN": bn, "BK": bk, "WIDEN": widen})
        return (result,)

    return run_convolution


WINDOWED_RULES = {"stablehlo.reduce_window": reduce_window, "stablehlo.convolution": convolution}
