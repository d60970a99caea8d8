"""``stablehlo.sort``: any number of operands, any comparator region made of elementwise ops
(the ones JAX emits: ``jnp.sort``'s NaN-last total order, ``argsort``'s index operand,
``lax.sort``'s lexicographic keys), always stable.

Each operand is transposed so the sorted dimension is last; one generated kernel per
(comparator, dtypes) ranks every element of a row against the whole row (the comparator
inlined, ``codegen.sort_rows_source``) and scatters all operands to their ranks. That is
O(L**2) comparisons per row of length L: right for the rows a training program sorts, not a
GPU merge sort. A comparator op without an expression is UNIMPLEMENTED naming op and dtype.
"""
from __future__ import annotations

import math

from pjrtkit_gpu import codegen
from pjrtkit_gpu.elementwise_table import NoKernel
from pjrtkit_gpu.lowering.elementwise import load_template
from pjrtkit_gpu.lowering.launching import blocks, permuted
from pjrtkit_gpu.lowering.regions import captured_scalars, region_lines
from pjrtkit_gpu.lowering.structural import check_operands

SORT_TILE = 64  # BI = BJ: elements ranked per program x elements compared per step


def sort_kernel(region, operand_dtypes, captures=()):
    """The generated row-sort kernel for ``region`` over operands of ``operand_dtypes``;
    ``captures``: the values it reads from outside (the kernel's trailing parameters)."""
    k = len(operand_dtypes)
    captured = {v.id: f"c{n}" for n, v in enumerate(captures)}

    def comparator(lhs: str, rhs: str, prefix: str):
        arguments = [name for n in range(k) for name in (f"{lhs}{n}", f"{rhs}{n}")]
        lines, results = region_lines(region, arguments, prefix, captured)
        if len(results) != 1:
            raise NoKernel(f"comparator returning {len(results)} values")
        return lines, results[0]

    before, before_result = comparator("j", "i", "b")
    after, after_result = comparator("i", "j", "a")
    source = codegen.sort_rows_source("sort_rows", [load_template(d) for d in operand_dtypes],
                                      before, before_result, after, after_result,
                                      captured_scalars(captures))
    return codegen.load_kernel(source, "sort_rows")


def sort_rule(op, ctx):
    check_operands(op, ctx)
    operand_dtypes = [v.type.dtype for v in op.operands]
    names = ", ".join(d.name for d in operand_dtypes)
    try:
        captures = ctx.captures(op)
        kernel = sort_kernel(op.regions[0], operand_dtypes, captures)
    except NoKernel as exc:
        inner = getattr(exc, "op", None)
        what = f" ({inner.describe()})" if inner is not None else ""
        raise ctx.unimplemented(op, f"sort comparator on {names}: {exc}{what}") from None
    shape = op.operands[0].type.shape
    dimension = int(op.attributes["dimension"]) % len(shape)
    permutation = (*[d for d in range(len(shape)) if d != dimension], dimension)
    inverse = tuple(permutation.index(d) for d in range(len(shape)))
    arranged_shape = tuple(shape[d] for d in permutation)
    length = shape[dimension]
    rows = math.prod(shape) // length if length else 0
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    constexprs = {"BI": SORT_TILE, "BJ": SORT_TILE}

    count = len(op.operands)

    def run_sort(*args):
        operands, captured = args[:count], args[count:]
        if not rows or not length:
            return tuple(driver.empty(device, v.shape, v.dtype) for v in operands)
        arranged = [permuted(driver, device, x, permutation).reshaped((rows, length))
                    for x in operands]
        sorted_rows = [driver.empty(device, (rows, length), x.dtype) for x in operands]
        driver.launch(device, kernel, (rows, blocks(length, SORT_TILE)),
                      [*arranged, *sorted_rows, *captured, length], constexprs)
        return tuple(permuted(driver, device, s.reshaped(arranged_shape), inverse)
                     for s in sorted_rows)

    return run_sort


SORT_RULES = {"stablehlo.sort": sort_rule}
