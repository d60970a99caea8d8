"""``stablehlo.dot_general`` / ``stablehlo.dot`` as a tiled, batched matmul: each operand is
read as (batch, rows, contraction) / (batch, contraction, columns) through strides when its
dimension groups lie in memory that way (``operand_strides``: a transposed weight, a batch
dimension in the middle), else transposed into that order first, then one
``kernels.batched_matmul`` launch. float16/bfloat16/float32 use ``tl.dot`` with float32
accumulation (float32 in IEEE precision, not TF32, to agree with XLA's CPU backend), with the
tiles and launch options ``autotune`` chooses for the device and the shape class (the fixed
32x32x32 default under emulation); float64 and integer results multiply by broadcasting in the
result's type, with fixed tiles (``kernels.MATMUL_TILES_BROADCAST``).

Where the vendor's BLAS runs on the device (``pjrtkit_gpu.vendor``: a real driver, the
library importable, its handle made; ``PJRTKIT_GPU_VENDOR_LIBRARIES``), a float dot it takes
is one strided batched gemm through it instead; the choice is made here, at compile time."""
from __future__ import annotations

import math

from pjrtkit.expansions import lower_by_expansion
from pjrtkit.expansions.bool_dot import bool_dot_as_integers
from pjrtkit.stablehlo.attributes import DotDimensionNumbers

from pjrtkit_gpu import autotune, dtypes as D, kernels
from pjrtkit_gpu.lowering.launching import blocks, permuted
from pjrtkit_gpu.lowering.structural import check_operands
from pjrtkit_gpu.vendor import GemmSpec, gemm_runner

_DOT_INPUTS = (D.FLOAT16, D.BFLOAT16, D.FLOAT32)


def _group_stride(shape, group) -> int | None:
    """The stride of ``group`` (dimensions of a row-major array of ``shape``) flattened to one
    index: the last one's stride when they are consecutive and in order (0 for no
    dimensions or one element), else None."""
    if not group or math.prod(shape[d] for d in group) == 1:
        return 0
    if tuple(group) != tuple(range(group[0], group[0] + len(group))):
        return None
    return math.prod(shape[group[-1] + 1:])


def operand_strides(shape, batch, rows, columns) -> tuple[int, int, bool] | None:
    """How the matmul reads an operand as (batch, rows, columns) (lhs: m x k; rhs: k x n)
    without a copy, its dimension groups being ``batch``, ``rows`` and ``columns``:
    ``(batch stride, major stride, transposed)``. Not transposed: the columns are contiguous
    and a row steps by the major stride; transposed: the rows are contiguous and a column
    steps by it. None when the groups do not lie so (the lowering copies the operand into
    row-major order then)."""
    strides = [_group_stride(shape, g) for g in (batch, rows, columns)]
    if None in strides:
        return None
    z, r, c = strides
    row_count, column_count = (math.prod(shape[d] for d in g) for g in (rows, columns))
    if c == 1 or column_count == 1:
        return z, r, False
    if r == 1 or row_count == 1:
        return z, c, True
    return None


def _lower(op, ctx, numbers: DotDimensionNumbers):
    check_operands(op, ctx)
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    out = op.results[0].type
    if D.BOOL in (lhs_t.dtype, rhs_t.dtype, out.dtype):  # as integers, then != 0
        return lower_by_expansion(op, ctx, bool_dot_as_integers)
    use_dot = (lhs_t.dtype == rhs_t.dtype and lhs_t.dtype in _DOT_INPUTS
               and out.dtype in _DOT_INPUTS)
    if not use_dot and (out.dtype in D.NARROW_FLOATS
                        or D.is_float(out.dtype) != D.is_float(lhs_t.dtype)
                        or D.is_float(out.dtype) != D.is_float(rhs_t.dtype)):
        raise ctx.unimplemented(op, f"dot_general of {lhs_t.dtype.name} x {rhs_t.dtype.name} "
                                    f"-> {out.dtype.name}")
    lb, rb = numbers.lhs_batching_dimensions, numbers.rhs_batching_dimensions
    lc, rc = numbers.lhs_contracting_dimensions, numbers.rhs_contracting_dimensions
    lf, rf = numbers.free_dimensions(lhs_t.rank, rhs_t.rank)
    z = math.prod(lhs_t.shape[d] for d in lb)
    m = math.prod(lhs_t.shape[d] for d in lf)
    k = math.prod(lhs_t.shape[d] for d in lc)
    n = math.prod(rhs_t.shape[d] for d in rf)
    lhs_order, rhs_order = (*lb, *lf, *lc), (*rb, *rc, *rf)
    driver, device = ctx.payloads.driver, ctx.payloads.device_index
    fixed = {"USE_DOT": use_dot, "IEEE": lhs_t.dtype == D.FLOAT32,
             "WIDEN": use_dot and lhs_t.dtype == D.BFLOAT16 and driver.interprets}
    lhs_read = operand_strides(lhs_t.shape, lb, lf, lc)
    rhs_read = operand_strides(rhs_t.shape, rb, rc, rf)
    layouts = {"A_T": bool(lhs_read and lhs_read[2]), "B_T": bool(rhs_read and rhs_read[2])}
    a_strides = lhs_read[:2] if lhs_read else (m * k, k)
    b_strides = rhs_read[:2] if rhs_read else (k * n, n)
    if lhs_t.dtype == rhs_t.dtype:
        library = gemm_runner(driver, ctx.payloads.vendor, device,
                              GemmSpec(lhs_t.dtype, out.dtype, z, m, n, k, layouts["A_T"],
                                       *a_strides, layouts["B_T"], *b_strides),
                              ctx.payloads.platform)
        if library is not None:
            return _library_dot(library, driver, device, out, lhs_read, rhs_read, lhs_order,
                                rhs_order)
    if use_dot:
        def measure(config):  # only when autotuning on a GPU: this shape, fresh operands
            a, b = (driver.empty(device, s, lhs_t.dtype) for s in ((z, m, k), (z, k, n)))
            c = driver.empty(device, (z, m, n), out.dtype)
            config_grid = (blocks(m, config.constexprs["BM"]) * z,
                           blocks(n, config.constexprs["BN"]))
            return autotune.time_launches(
                lambda: driver.launch(device, kernels.batched_matmul, config_grid,
                                      [a, b, c, m, n, k, m * k, k, k * n, n],
                                      {**config.constexprs, **fixed, "A_T": False,
                                       "B_T": False}, config.options),
                lambda: driver.synchronize(device))

        key = f"{lhs_t.dtype.name}->{out.dtype.name} " + autotune.shape_class(z=z, m=m, n=n,
                                                                               k=k)
        config = autotune.choose(autotune.MATMUL, key, driver, device,
                                 measure if z and m and n and k else None)
        tiles, options = config.constexprs, config.options
    else:
        tiles = dict(zip(("BM", "BN", "BK"), kernels.MATMUL_TILES_BROADCAST))
        options = None
    constexprs = {**tiles, **fixed, **layouts}
    grid = (blocks(m, tiles["BM"]) * max(z, 1), blocks(n, tiles["BN"]))

    def run_dot(lhs, rhs):
        result = driver.empty(device, out.shape, out.dtype)
        if z and m and n:
            a = lhs if lhs_read else permuted(driver, device, lhs, lhs_order)
            b = rhs if rhs_read else permuted(driver, device, rhs, rhs_order)
            driver.launch(device, kernels.batched_matmul, grid,
                          [a, b, result, m, n, k, *a_strides, *b_strides], constexprs, options)
        return (result,)

    return run_dot


def _library_dot(library, driver, device, out, lhs_read, rhs_read, lhs_order, rhs_order):
    """The dot through the vendor's BLAS (``pjrtkit_gpu.vendor.gemm_runner`` said it runs
    this shape, which is never empty): operands read in place where the strides allow, else
    transposed into (batch, m, k) / (batch, k, n) first, as the Triton path does."""

    def run_library_dot(lhs, rhs):
        result = driver.empty(device, out.shape, out.dtype)
        a = lhs if lhs_read else permuted(driver, device, lhs, lhs_order)
        b = rhs if rhs_read else permuted(driver, device, rhs, rhs_order)
        library(a.pointer, b.pointer, result.pointer)
        return (result,)

    return run_library_dot


def dot_general(op, ctx):
    return _lower(op, ctx, op.attributes["dot_dimension_numbers"])


def dot(op, ctx):
    rank = op.operands[0].type.rank
    return _lower(op, ctx, DotDimensionNumbers((), (), (rank - 1,), (0,)))


DOT_RULES = {"stablehlo.dot_general": dot_general, "stablehlo.dot": dot}
