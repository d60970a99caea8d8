"""Elementwise ops: one generated Triton kernel per chain (a single op, or a group the fusion
pass (``fusion.py``) made into one ``pjrtkit_gpu.fused_elementwise`` op), from the expressions
of ``elementwise_table`` (the Triton rendering of pjrtkit.semantics)."""
from __future__ import annotations

import math

from pjrtkit_gpu import codegen, dtypes as D, kernels
from pjrtkit_gpu.elementwise_table import (OPS, NoKernel, bfloat16_load, bfloat16_store,
                                           statements)
from pjrtkit_gpu.fusion import BROADCAST
from pjrtkit_gpu.lowering.launching import blocks, row_major_strides

FUSED = "pjrtkit_gpu.fused_elementwise"


def load_template(dtype) -> str:
    if dtype == D.BOOL:
        return "({v} != 0)"
    if dtype == D.BFLOAT16:
        return bfloat16_load("{v}")
    if dtype in D.NARROW_FLOATS:
        return "{v}.to(tl.float32)"
    return "{v}"


def store_template(dtype) -> str:
    if dtype == D.BOOL:
        return "{v}.to(tl.uint8)"
    if dtype == D.BFLOAT16:
        return bfloat16_store("{v}")
    if dtype in D.NARROW_FLOATS:
        return f"{{v}}.to(tl.{D.storage_language_type(dtype)})"
    return "{v}"


def broadcast_index(source_shape, shape, dimensions) -> str | None:
    """The flat index into a row-major operand of ``source_shape`` that element ``i`` of the
    row-major ``shape`` reads when broadcast along ``dimensions`` (None: one element)."""
    out_strides = row_major_strides(shape)
    in_strides = row_major_strides(source_shape)
    terms = []
    for k, d in enumerate(dimensions):
        if source_shape[k] == 1:
            continue
        term = "i" if out_strides[d] == 1 else f"(i // {out_strides[d]})"
        if d > 0:
            term = f"({term} % {shape[d]})"
        terms.append(term if in_strides[k] == 1 else f"{term} * {in_strides[k]}")
    return " + ".join(terms) or None


def chain_source(ops, inputs, outputs) -> str:
    """The generated kernel's source for ``ops`` (elementwise, in order; a ``broadcast_in_dim``
    reads its operand through ``broadcast_index``) from ``inputs`` to ``outputs``; ``NoKernel``
    (with the op, as ``exc.op``) for an op or dtype it lacks."""
    shape = outputs[0].type.shape
    names: dict[int, str] = {}
    positions = {value.id: k for k, value in enumerate(inputs)}
    # inputs read elementwise (a broadcast reads its operand itself, unless it is one element)
    direct = {v.id for inner in ops for v in inner.operands
              if inner.name != BROADCAST or broadcast_index(
                  v.type.shape, shape, inner.attributes.get("broadcast_dimensions", ())) is None}
    loaded = []
    for k, value in enumerate(inputs):
        names[value.id] = f"x{k}"
        if not D.is_supported(value.type.dtype):
            raise NoKernel(f"operand of {value.type.dtype.name}: the GPU kernels take "
                           f"{', '.join(d.name for d in D.SUPPORTED)}")
        scalar = value.type.size == 1 and len(shape) > 0
        loaded.append((load_template(value.type.dtype), scalar,
                       f"x{k}" if value.id in direct else None))
    body = []
    for k, inner in enumerate(ops):
        if inner.name == BROADCAST:
            source = inner.operands[0]
            index = broadcast_index(source.type.shape, shape,
                                    inner.attributes.get("broadcast_dimensions", ()))
            if index is None:  # one element, loaded once: every member value stays a block
                body.append(f"v{k} = tl.broadcast_to({names[source.id]}, (BLOCK,))")
                names[inner.results[0].id] = f"v{k}"
                continue
            raw = f"tl.load(in{positions[source.id]} + ({index}), mask=mask)"
            body.append(f"v{k} = {load_template(source.type.dtype).format(v=raw)}")
            names[inner.results[0].id] = f"v{k}"
            continue
        try:
            body += statements(inner, [names[v.id] for v in inner.operands], f"v{k}")
        except NoKernel as exc:
            exc.op = inner
            raise
        names[inner.results[0].id] = f"v{k}"
    stores = [(names[v.id], store_template(v.type.dtype)) for v in outputs]
    return codegen.elementwise_source("elementwise", loaded, body, stores)


def chain_kernel(op, ctx, ops, inputs, outputs):
    """The kernel running ``ops`` from the payloads of ``inputs`` to those of ``outputs``;
    UNIMPLEMENTED (naming op and dtype) for an op without an expression."""
    try:
        source = chain_source(ops, inputs, outputs)
    except NoKernel as exc:
        raise ctx.unimplemented(getattr(exc, "op", op), str(exc)) from None
    shape = outputs[0].type.shape
    kernel = codegen.load_kernel(source, "elementwise")
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    n = math.prod(shape)
    grid = (blocks(n, kernels.ELEMENTWISE_BLOCK),)
    out_types = [v.type for v in outputs]
    constexprs = {"BLOCK": kernels.ELEMENTWISE_BLOCK}

    def run_chain(*args):
        results = tuple(driver.empty(device, t.shape, t.dtype) for t in out_types)
        if n:
            driver.launch(device, kernel, grid, [*args, *results, n], constexprs)
        return results

    return run_chain


def elementwise_rule(op, ctx):
    return chain_kernel(op, ctx, [op], list(op.operands), list(op.results))


def fused_rule(op, ctx):
    block = op.regions[0].entry
    inner = block.ops[:-1]  # the last is the return of the group's outputs
    returned = list(block.ops[-1].operands)
    return chain_kernel(op, ctx, inner, list(block.arguments), returned)


ELEMENTWISE_RULES = {name: elementwise_rule for name in OPS}
ELEMENTWISE_RULES[FUSED] = fused_rule
