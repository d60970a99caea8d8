"""``stablehlo.reduce``. The operands are transposed so the reduced dimensions come last.

A one-operand reduce whose body is one op (add, multiply, maximum, minimum, and, or, xor) runs
one generated tiled row-reduction kernel per (body, dtype), folding each row and the init
value, with the rows per program, columns per step and launch options ``autotune`` chooses for
the device and the shape class (16 x 128 under emulation); float16/bfloat16 accumulate in
float32, as XLA's CPU backend does; integers wrap in their own type. Any other body of
elementwise ops, over any number of operands (argmax and argmin: JAX's (value, index) pair
with its NaN-first, lowest-index tie-break body), is inlined into a kernel that folds the
columns in order, rows in parallel (``sequential_reduce``)."""
from __future__ import annotations

import math


from pjrtkit.stablehlo.inline import inline_region_calls

from pjrtkit_gpu import autotune, codegen, dtypes as D
from pjrtkit_gpu.elementwise_table import NoKernel
from pjrtkit_gpu.lowering.elementwise import load_template, store_template
from pjrtkit_gpu.lowering.launching import blocks, permuted
from pjrtkit_gpu.lowering.regions import captured_scalars, region_lines
from pjrtkit_gpu.lowering.structural import check_operands

# the default tiles of the one-op row reduction (autotune.DEFAULTS)
ROWS_PER_PROGRAM = autotune.DEFAULTS[autotune.ROW_REDUCE].constexprs["BM"]
COLUMNS_PER_STEP = autotune.DEFAULTS[autotune.ROW_REDUCE].constexprs["BK"]
SEQUENTIAL_ROWS_PER_PROGRAM = 64
# A one-op reduction with too few rows to fill the GPU (a whole-array sum is one row) runs in
# two passes: each row cut into ``split`` pieces reduced from the body's identity, then the
# pieces with the init value. Programs wanted in the first pass, per multiprocessor:
PROGRAMS_PER_MULTIPROCESSOR = 4
# and the shortest piece worth a program of its own (columns):
MIN_PIECE = 1024

REDUCTION_BODIES = ("stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
           "stablehlo.and", "stablehlo.or", "stablehlo.xor")


def body_op_name(region) -> str | None:
    """The op name when ``region`` is ``return(op(arg0, arg1))`` (either order), else None."""
    block = region.entry
    if len(block.ops) != 2 or len(block.arguments) != 2:
        return None
    op, ret = block.ops
    args = {v.id for v in block.arguments}
    if ({v.id for v in op.operands} != args or len(op.operands) != 2
            or [v.id for v in ret.operands] != [op.results[0].id]):
        return None
    return op.name if op.name in REDUCTION_BODIES else None


def _accumulator(dtype) -> str:
    if dtype == D.BOOL:
        return "int32"
    return D.compute_language_type(dtype)


def _identity(body: str, dtype) -> str:
    if body == "stablehlo.add" or body in ("stablehlo.or", "stablehlo.xor"):
        return "0"
    if body == "stablehlo.multiply":
        return "1"
    if body == "stablehlo.and":
        return "1" if dtype == D.BOOL else str(D.int_range(dtype)[1] if D.is_unsigned(dtype)
                                               else -1)
    if D.is_float(dtype):
        return "float('-inf')" if body == "stablehlo.maximum" else "float('inf')"
    if dtype == D.BOOL:
        return "0" if body == "stablehlo.maximum" else "1"
    low, high = D.int_range(dtype)
    return str(low if body == "stablehlo.maximum" else high)


def _identity_array(body: str, dtype):
    """The body's identity as a rank-0 array of ``dtype`` (what a partial reduction starts
    from)."""
    import numpy as np

    text = _identity(body, dtype)
    if text.startswith("float("):
        return np.array(float(text.removeprefix("float('").removesuffix("')")), dtype)
    return np.array(int(text), dtype)


def row_split(rows: int, columns: int, dtype, multiprocessors: int, rows_per_program: int) -> int:
    """Pieces each row of a one-op reduction is cut into (1: one pass): a power of two
    dividing ``columns``, enough for ``PROGRAMS_PER_MULTIPROCESSOR`` programs per
    multiprocessor, no piece shorter than ``MIN_PIECE``. Only where the partial results keep
    the accumulator's precision (the accumulator is the stored type: not float16, bfloat16
    or bool)."""
    if dtype == D.BOOL or _accumulator(dtype) != D.storage_language_type(dtype) or not rows:
        return 1
    wanted = PROGRAMS_PER_MULTIPROCESSOR * multiprocessors * rows_per_program
    split = 1
    while (rows * split < wanted and columns % (split * 2) == 0
           and columns // (split * 2) >= MIN_PIECE):
        split *= 2
    return split


def combine_expression(body: str, dtype) -> str:
    if body in ("stablehlo.maximum", "stablehlo.minimum") and D.is_float(dtype):
        pick = "tl.maximum" if body == "stablehlo.maximum" else "tl.minimum"
        return f"tl.where({{a}} != {{a}}, {{a}}, tl.where({{b}} != {{b}}, {{b}}, {pick}({{a}}, {{b}})))"
    return {"stablehlo.add": "{a} + {b}", "stablehlo.multiply": "{a} * {b}",
            "stablehlo.maximum": "tl.maximum({a}, {b})", "stablehlo.minimum": "tl.minimum({a}, {b})",
            "stablehlo.and": "{a} & {b}", "stablehlo.or": "{a} | {b}",
            "stablehlo.xor": "{a} ^ {b}"}[body]


def _row(body: str, dtype) -> str:
    """How one tile ``{v}`` is reduced along its rows."""
    if body == "stablehlo.add" and dtype != D.BOOL:
        return "tl.sum({v}, axis=1)"
    if body in ("stablehlo.maximum", "stablehlo.minimum"):
        pick = "tl.max" if body == "stablehlo.maximum" else "tl.min"
        if D.is_float(dtype):  # tl.max drops NaN on GPUs; XLA propagates it
            return (f"tl.where(tl.sum(({{v}} != {{v}}).to(tl.int32), axis=1) > 0, float('nan'), "
                    f"{pick}({{v}}, axis=1))")
        return f"{pick}({{v}}, axis=1)"
    if dtype == D.BOOL and body in ("stablehlo.and", "stablehlo.multiply"):
        return "tl.min({v}, axis=1)"  # bools accumulate as 0/1 int32
    if dtype == D.BOOL and body in ("stablehlo.or", "stablehlo.add"):
        return "tl.max({v}, axis=1)"
    return "tl.reduce({v}, 1, {combine})"


def reduction_kernel(body: str, dtype):
    """The generated row-reduction kernel for ``body`` on ``dtype``."""
    accumulator = _accumulator(dtype)
    load = f"{{v}}.to(tl.{accumulator})"
    finish = f"({{v}}).to(tl.{D.storage_language_type(dtype)})"
    combine = combine_expression(body, dtype)
    if body == "stablehlo.multiply" and dtype == D.BOOL:
        combine = "{a} & {b}"
    elif body == "stablehlo.add" and dtype == D.BOOL:
        combine = "{a} | {b}"
    name = "row_reduce"
    source = codegen.row_reduce_source(name, load, _identity(body, dtype), combine,
                                       _row(body, dtype), finish, accumulator)
    return codegen.load_kernel(source, name)


def sequential_reduction_kernel(region, operand_dtypes, captures=()):
    """The generated kernel folding rows of ``len(operand_dtypes)`` operands by ``region``,
    column after column (``codegen.sequential_reduce_source``); ``NoKernel`` for a body op
    without an expression. ``captures``: the values it reads from outside (trailing
    parameters)."""
    n = len(operand_dtypes)
    arguments = [f"acc{k}" for k in range(n)] + [f"x{k}v" for k in range(n)]
    lines, results = region_lines(region, arguments, "r",
                                  {v.id: f"c{k}" for k, v in enumerate(captures)})
    if len(results) != n:
        raise NoKernel(f"reduce body returning {len(results)} values for {n} operands")
    source = codegen.sequential_reduce_source(
        "sequential_reduce", [load_template(d) for d in operand_dtypes], lines, results,
        [store_template(d) for d in operand_dtypes], captured_scalars(captures))
    return codegen.load_kernel(source, "sequential_reduce")


def _one_op_reduction(op):
    """``(kernel, None)`` of a one-operand reduce whose body is one op that
    ``reduction_kernel`` takes (its tiles are autotune's), else None."""
    if len(op.operands) != 2:
        return None
    dtype = op.operands[0].type.dtype
    body = body_op_name(op.regions[0])
    if body is None or (D.is_float(dtype) and body in ("stablehlo.and", "stablehlo.or",
                                                       "stablehlo.xor")):
        return None
    return reduction_kernel(body, dtype), None


def reduce_rule(op, ctx):
    """One-op bodies: the tiled row reduction. Any other body of elementwise ops, over any
    number of operands (argmax/argmin's (value, index) pair): the sequential fold."""
    check_operands(op, ctx)
    n = len(op.operands) // 2
    operand_dtypes = [v.type.dtype for v in op.operands[:n]]
    captures = ctx.captures(op)
    chosen = None if captures else _one_op_reduction(op)
    if chosen is None:
        try:
            body = inline_region_calls(op.regions[0], ctx.program)  # jnp.where: a call
            chosen = (sequential_reduction_kernel(body, operand_dtypes, captures),
                      {"BM": SEQUENTIAL_ROWS_PER_PROGRAM})
        except NoKernel as exc:
            inner = getattr(exc, "op", None)
            what = f" ({inner.describe()})" if inner is not None else ""
            names = ", ".join(d.name for d in operand_dtypes)
            raise ctx.unimplemented(op, f"reduce body on {names}: {exc}{what}") from None
    kernel, constexprs = chosen
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    shape = op.operands[0].type.shape
    dims = tuple(op.attributes["dimensions"])
    kept = [d for d in range(len(shape)) if d not in dims]
    permutation = (*kept, *dims)
    one_op = constexprs is None  # the generated one-op row reduction (autotune's tiles)
    # which reads a reduction over the leading dimensions as it lies
    transposed = (one_op and bool(kept) and bool(dims)
                  and permutation == (*range(len(dims), len(shape)), *range(len(dims))))
    rows = math.prod(shape[d] for d in kept)
    columns = math.prod(shape[d] for d in dims)
    outs = [v.type for v in op.results]
    options = None
    if one_op:  # the one-op row reduction: tiles and options are autotune's
        def measure(config):  # only when autotuning on a GPU: this shape, fresh operands
            x = driver.empty(device, (rows, columns), operand_dtypes[0])
            init = driver.empty(device, (), operand_dtypes[0])
            out = driver.empty(device, (rows,), outs[0].dtype)
            return autotune.time_launches(
                lambda: driver.launch(device, kernel, (blocks(rows, config.constexprs["BM"]),),
                                      [x, init, out, rows, columns],
                                      {**config.constexprs, "TRANSPOSED": transposed},
                                      config.options),
                lambda: driver.synchronize(device))

        key = f"{body_op_name(op.regions[0])} {operand_dtypes[0].name} " \
            + autotune.shape_class(rows=rows, columns=columns) \
            + (" transposed" if transposed else "")
        config = autotune.choose(autotune.ROW_REDUCE, key, driver, device,
                                 measure if rows and columns else None)
        constexprs, options = {**config.constexprs, "TRANSPOSED": transposed}, config.options
    rows_per_program = constexprs["BM"]
    split = 1
    if one_op and not transposed:
        split = row_split(rows, columns, operand_dtypes[0],
                          driver.devices()[device].multiprocessor_count, rows_per_program)
    if split > 1:
        identity = driver.from_host(device, _identity_array(body_op_name(op.regions[0]),
                                                            operand_dtypes[0]))

    def run_reduce(*args):
        inputs, inits, captured = args[:n], args[n:2 * n], args[2 * n:]
        results = tuple(driver.empty(device, t.shape, t.dtype) for t in outs)
        if rows:
            arranged = [x if transposed else
                        permuted(driver, device, x, permutation).reshaped((rows, columns))
                        for x in inputs]
            if split > 1:  # pieces from the identity, then the pieces of each row with init
                pieces, piece = rows * split, columns // split
                partial = driver.empty(device, (pieces,), outs[0].dtype)
                driver.launch(device, kernel, (blocks(pieces, rows_per_program),),
                              [arranged[0].reshaped((pieces, piece)), identity, partial,
                               pieces, piece], constexprs, options)
                arranged, columns_now = [partial.reshaped((rows, split))], split
            else:
                columns_now = columns
            driver.launch(device, kernel, (blocks(rows, rows_per_program),),
                          [*arranged, *inits, *results, *captured, rows, columns_now],
                          constexprs, options)
        return results

    return run_reduce


REDUCE_RULES = {"stablehlo.reduce": reduce_rule}
