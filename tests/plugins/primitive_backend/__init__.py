"""A backend that implements a declared primitive set and gets the rest of JAX from the core.

The template backend (``template_backend.py``) grown into one that runs JAX's whole surface,
written as a new backend's author would: its payloads are objects of its own (``Tensor``, which
the core never looks inside), its kernels are NumPy, and it declares what it implements
(``pjrtkit_primitive_set``): real and integer arithmetic, structure, indexing, reductions,
sort, dot_general and control flow. Everything else JAX emits reaches it rewritten into that
set by the core's expansions (``pjrtkit.expansions``): complex numbers as pairs of reals,
float8/float4/int4 as wider types, convolutions as dots, random bits as integer arithmetic,
fft and linear algebra as loops of dots. ``docs/writing-a-backend.md`` walks from the template
to this file; ``pjrtkit coverage`` shows what each rule buys.

Nothing here comes from ``pjrtkit.reference``: the semantics are XLA's, written out once below.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from pjrtkit import hookimpl
from pjrtkit.callbacks import HOST_CALLBACK_TARGET, make_host_callback_rule
from pjrtkit.errors import Unimplemented
from pjrtkit.expansions import lower_by_expansion
from pjrtkit.expansions.batched_indexing import gather_without_batching, scatter_without_batching
from pjrtkit.expansions.formats import STORED_ONLY
from pjrtkit.lowering.approx_top_k import approx_top_k
from pjrtkit.lowering.regions import vectorized_region
from pjrtkit.lowering.payloads import Payloads
from pjrtkit.lowering.plan import build_plan
from pjrtkit.lowering.registry import LoweringRegistry, custom_call_rule
from pjrtkit.stablehlo.attributes import padding_pairs
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.stablehlo.ir import TensorType
from pjrtkit.types import (Capabilities, CompiledProgram, DeviceSpec, PlatformInfo, PrimitiveSet,
                           Topology)

PLATFORM = "pjrtkit_primitive"
BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
INTS = tuple(np.dtype(f"{k}{n}") for k in "iu" for n in (1, 2, 4, 8))
FLOATS = (F16, BF16, F32, np.dtype(np.float64))
COMPUTED = (np.dtype(np.bool_), *INTS, *FLOATS)  # what the kernels compute on


class Tensor:
    """The payload: an array this backend owns. The core only passes it around."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


class TensorPayloads(Payloads):
    def make_constant(self, value, type):
        return Tensor(np.array(np.broadcast_to(np.asarray(value, type.dtype), type.shape)))

    def describe(self, payload):
        return payload.data.shape, payload.data.dtype


# Every PJRT type may be stored (the expansions read complex and narrow buffers as bytes).
RULES = LoweringRegistry(PLATFORM, dtypes=(*COMPUTED, *STORED_ONLY), payloads=TensorPayloads())


def kernel(fn):
    """A kernel over arrays, wrapped to take and return Tensors."""
    def run(*tensors):
        return tuple(Tensor(np.asarray(r)) for r in fn(*(t.data for t in tensors)))
    return run


def result_type(op, i=0) -> TensorType:
    return op.results[i].type


# -- elementwise: one NumPy function per op, XLA's semantics ------------------------------------

def _int_divide(a, b):
    """Truncating division; x / 0 is -1 (all ones), INT_MIN / -1 is INT_MIN."""
    zero = b == 0
    safe = np.where(zero, 1, b)
    if a.dtype.kind == "i":
        safe = np.where((a == np.iinfo(a.dtype).min) & (safe == -1), 1, safe)
    q = a // safe
    q = q + ((a % safe != 0) & ((a < 0) != (safe < 0)))
    q = np.where((safe != b) & ~zero, a, q)  # INT_MIN / -1
    return np.where(zero, np.array(-1).astype(a.dtype), q)


def _int_remainder(a, b):
    zero = b == 0
    safe = np.where(zero | ((b == -1) if a.dtype.kind == "i" else False), 1, b)
    return np.where(zero, a, np.fmod(a, safe))


def _shift(kind):
    def shift(a, b):
        bits = a.dtype.itemsize * 8
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        n = b.view(unsigned) if b.dtype.kind == "i" else b
        over = n >= bits
        n = np.where(over, 0, n).astype(unsigned)
        if kind == "left":
            return np.where(over, 0, np.left_shift(a.view(unsigned), n).view(a.dtype))
        if kind == "logical":
            return np.where(over, 0, np.right_shift(a.view(unsigned), n).view(a.dtype))
        return np.right_shift(a, np.where(over, bits - 1, n).astype(a.dtype))
    return shift


def _clz(a):
    bits = a.dtype.itemsize * 8
    x = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    out = np.full(a.shape, bits, a.dtype)
    for i in range(bits):
        out = np.where((x >> np.array(i, x.dtype)) != 0, bits - 1 - i, out)
    return out.astype(a.dtype)


def _round_afz(x):
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def _int_power(a, b):
    out = np.ones_like(a)
    base, e = a.copy(), b.copy()
    for _ in range(a.dtype.itemsize * 8):
        out = np.where(e & 1 == 1, out * base, out)
        base, e = base * base, e >> 1
    negative = b < 0
    return np.where(negative, np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1),
                                                           0)), out).astype(a.dtype)


FLOAT_OPS = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "remainder": np.fmod, "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "atan2": np.arctan2, "negate": np.negative, "abs": np.abs, "sign": np.sign,
    "exponential": np.exp, "exponential_minus_one": np.expm1, "log": np.log,
    "log_plus_one": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt, "sine": np.sin, "cosine": np.cos, "tan": np.tan, "tanh": np.tanh,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "floor": np.floor, "ceil": np.ceil,
    "round_nearest_even": np.rint, "round_nearest_afz": _round_afz,
}
INT_OPS = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _int_divide,
    "remainder": _int_remainder, "maximum": np.maximum, "minimum": np.minimum,
    "power": _int_power, "negate": np.negative, "abs": np.abs, "sign": np.sign,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "not": np.invert,
    "shift_left": _shift("left"), "shift_right_logical": _shift("logical"),
    "shift_right_arithmetic": _shift("arithmetic"),
    "popcnt": lambda x: np.bitwise_count(x.view(np.dtype(f"u{x.dtype.itemsize}"))),
    "count_leading_zeros": _clz,
}
BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
            "not": np.logical_not, "maximum": np.logical_or, "minimum": np.logical_and}


@RULES.register(*{f"stablehlo.{n}" for n in (*FLOAT_OPS, *INT_OPS)})
def elementwise(op, ctx):
    dtype, out = op.operands[0].type.dtype, result_type(op)
    name = op.name.removeprefix("stablehlo.")
    table = FLOAT_OPS if dtype in FLOATS else BOOL_OPS if dtype.kind == "b" else INT_OPS
    fn = table.get(name)
    if fn is None:
        raise ctx.unimplemented(op, f"{name} on {dtype.name}")
    wide = F32 if dtype in (F16, BF16) else dtype  # narrow floats: computed in float32, rounded
    if name == "popcnt":
        return kernel(lambda x: (fn(x).astype(out.dtype),))
    return kernel(lambda *xs: (np.asarray(fn(*(x.astype(wide) for x in xs))).astype(out.dtype),))


@RULES.register("stablehlo.is_finite")
def is_finite(op, ctx):
    return kernel(lambda x: (np.isfinite(x.astype(np.float64)),))


def _total_order_key(x):
    """A signed integer ordering floats as IEEE totalOrder does (-NaN < -inf < ... < NaN)."""
    signed = x.view(np.dtype(f"i{x.dtype.itemsize}"))
    return np.where(signed < 0, signed ^ np.iinfo(signed.dtype).max, signed)


COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal}


@RULES.register("stablehlo.compare")
def compare(op, ctx):
    fn = COMPARE[op.attributes["comparison_direction"]]
    if op.attributes.get("compare_type") == "TOTALORDER":
        return kernel(lambda a, b: (fn(_total_order_key(a), _total_order_key(b)),))
    return kernel(lambda a, b: (fn(a, b),))


@RULES.register("stablehlo.select")
def select(op, ctx):
    return kernel(lambda p, a, b: (np.where(p, a, b),))


@RULES.register("stablehlo.clamp")
def clamp(op, ctx):
    return kernel(lambda lo, x, hi: (np.minimum(np.maximum(x, lo), hi),))


@RULES.register("stablehlo.convert")
def convert(op, ctx):
    source, target = op.operands[0].type.dtype, result_type(op).dtype
    if target == np.bool_:
        return kernel(lambda x: (x != 0,))
    if source.kind == "f" and target.kind in "iu":  # saturating, NaN -> 0
        info = np.iinfo(target)

        def to_int(x):
            x = x.astype(np.float64)
            inside = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
            out = np.trunc(inside).astype(target)
            out = np.where(x >= float(info.max), info.max, out)
            return (np.where(x <= float(info.min), info.min, out).astype(target),)
        return kernel(to_int)
    if target == BF16 or source == BF16:  # XLA converts bfloat16 only through float32
        return kernel(lambda x: (x.astype(F32).astype(target),))
    return kernel(lambda x: (x.astype(target),))


@RULES.register("stablehlo.bitcast_convert")
def bitcast_convert(op, ctx):
    t = result_type(op)  # the stored bytes read as another type
    return kernel(lambda x: (np.ascontiguousarray(x).view(t.dtype).reshape(t.shape),))


# -- structure ----------------------------------------------------------------------------------

@RULES.register("stablehlo.iota")
def iota(op, ctx):
    t, d = result_type(op), op.attributes["iota_dimension"]
    shape = [1] * t.rank
    shape[d] = t.shape[d]
    values = np.broadcast_to(np.arange(t.shape[d]).reshape(shape), t.shape).astype(t.dtype)
    return kernel(lambda: (values.copy(),))


@RULES.register("stablehlo.reshape")
def reshape(op, ctx):
    shape = result_type(op).shape
    return kernel(lambda x: (x.reshape(shape),))


@RULES.register("stablehlo.broadcast_in_dim")
def broadcast_in_dim(op, ctx):
    t, dims = result_type(op), op.attributes["broadcast_dimensions"]
    expanded = [1] * t.rank
    for i, d in enumerate(dims):
        expanded[d] = op.operands[0].type.shape[i]
    return kernel(lambda x: (np.broadcast_to(x.reshape(expanded), t.shape).copy(),))


@RULES.register("stablehlo.transpose")
def transpose(op, ctx):
    permutation = op.attributes["permutation"]
    return kernel(lambda x: (np.transpose(x, permutation).copy(),))


@RULES.register("stablehlo.reverse")
def reverse(op, ctx):
    dims = tuple(op.attributes["dimensions"])
    return kernel(lambda x: (np.flip(x, dims).copy(),))


@RULES.register("stablehlo.slice")
def slice_(op, ctx):
    a = op.attributes
    index = tuple(slice(lo, hi, s) for lo, hi, s in zip(a["start_indices"], a["limit_indices"],
                                                        a["strides"]))
    return kernel(lambda x: (x[index].copy(),))


@RULES.register("stablehlo.concatenate")
def concatenate(op, ctx):
    d = op.attributes["dimension"]
    return kernel(lambda *xs: (np.concatenate(xs, axis=d),))


def _padded(x, value, low, high, interior):
    """StableHLO's pad: ``interior`` values between elements, then edges (negative: cropped)."""
    inner = np.full([(n - 1) * (i + 1) + 1 if n else 0 for n, i in zip(x.shape, interior)],
                    value, x.dtype)
    inner[tuple(slice(None, None, i + 1) for i in interior)] = x
    out = np.full([n + max(lo, 0) + max(hi, 0) for n, lo, hi in zip(inner.shape, low, high)],
                  value, x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + n) for n, lo in zip(inner.shape, low))] = inner
    return out[tuple(slice(-min(lo, 0), n + min(hi, 0) if hi < 0 else n)
                     for n, lo, hi in zip(out.shape, low, high))].copy()


@RULES.register("stablehlo.pad")
def pad(op, ctx):
    a = op.attributes
    low, high, interior = a["edge_padding_low"], a["edge_padding_high"], a["interior_padding"]
    return kernel(lambda x, value: (_padded(x, value, low, high, interior),))


def _clamped_starts(starts, operand_shape, sizes):
    return tuple(int(np.clip(int(s), 0, dim - size)) for s, dim, size in
                 zip(starts, operand_shape, sizes))


@RULES.register("stablehlo.dynamic_slice")
def dynamic_slice(op, ctx):
    sizes = op.attributes["slice_sizes"]

    def run(x, *starts):
        begin = _clamped_starts(starts, x.shape, sizes)
        return (x[tuple(slice(b, b + s) for b, s in zip(begin, sizes))].copy(),)
    return kernel(run)


@RULES.register("stablehlo.dynamic_update_slice")
def dynamic_update_slice(op, ctx):
    def run(x, update, *starts):
        begin = _clamped_starts(starts, x.shape, update.shape)
        out = x.copy()
        out[tuple(slice(b, b + s) for b, s in zip(begin, update.shape))] = update
        return (out,)
    return kernel(run)


# -- indexing: StableHLO's gather and scatter ---------------------------------------------------

def _start_vectors(indices, index_vector_dim):
    """The start-index vectors, one row per batch position (batch dims in order)."""
    if index_vector_dim == indices.ndim:
        indices = indices[..., None]
    moved = np.moveaxis(indices, index_vector_dim, -1)
    rows = math.prod(moved.shape[:-1])
    return moved.reshape(rows, moved.shape[-1]).astype(np.int64), moved.shape[:-1]


def _window_offsets(shape):
    """Every offset inside a window of ``shape``, one row each (one empty row for no dims)."""
    return np.indices(shape).reshape(len(shape), -1).T if shape else np.zeros((1, 0), np.int64)


@RULES.register("stablehlo.gather")
def gather(op, ctx):
    dn = op.attributes["dimension_numbers"]
    if dn.operand_batching_dims:  # the core removes batching dimensions for us
        return lower_by_expansion(op, ctx, gather_without_batching)
    sizes, out_t = op.attributes["slice_sizes"], result_type(op)
    window = [d for d in range(len(sizes)) if d not in dn.collapsed_slice_dims]

    def run(x, indices):
        starts, batch_shape = _start_vectors(indices, dn.index_vector_dim)
        full = np.zeros((starts.shape[0], x.ndim), np.int64)
        full[:, list(dn.start_index_map)] = starts
        full = np.clip(full, 0, np.array(x.shape) - np.array(sizes))
        grid = _window_offsets([sizes[d] for d in window])
        position = np.repeat(full[:, None, :], max(grid.shape[0], 1), axis=1)
        position[:, :, window] += grid[None]
        values = x[tuple(position.reshape(-1, x.ndim).T)]
        values = values.reshape(*batch_shape, *[sizes[d] for d in window])
        # batch dims first, window dims last -> the offset dims where the op puts them
        batch_rank = len(batch_shape)
        order = [None] * out_t.rank
        for i, d in enumerate(dn.offset_dims):
            order[d] = batch_rank + i
        rest = iter(range(batch_rank))
        order = [next(rest) if o is None else o for o in order]
        return (np.transpose(values, order).reshape(out_t.shape),)
    return kernel(run)


def _scatter_combiner(op):
    """How updates combine: "replace" when the update computation returns its update
    arguments, a ufunc when it is one binary op of its two arguments, else None (its plan)."""
    block = op.regions[0].entry
    count = len(block.arguments) // 2
    ops = [o for o in block.ops if o.name != "stablehlo.return"]
    if not ops and block.ops[-1].operands == block.arguments[count:]:
        return "replace"
    if count == 1 and len(ops) == 1 and ops[0].operands == block.arguments \
            and block.arguments[0].type.dtype.kind != "b":
        return {"stablehlo.add": np.add, "stablehlo.multiply": np.multiply,
                "stablehlo.maximum": np.maximum,
                "stablehlo.minimum": np.minimum}.get(ops[0].name)
    return None


@RULES.register("stablehlo.scatter")
def scatter(op, ctx):
    dn = op.attributes["scatter_dimension_numbers"]
    if dn.input_batching_dims:
        return lower_by_expansion(op, ctx, scatter_without_batching)
    count = len(op.results)
    combiner = _scatter_combiner(op)
    body = ctx.compile_region(op.regions[0]) if combiner is None else None
    update_t = op.operands[count + 1].type
    scatter_dims = [d for d in range(update_t.rank) if d not in dn.update_window_dims]
    operand_window = [d for d in range(op.operands[0].type.rank)
                      if d not in dn.inserted_window_dims]

    def run(*arrays):
        inputs, indices = arrays[:count], arrays[count]
        updates, extra = arrays[count + 1:2 * count + 1], arrays[2 * count + 1:]
        outs = [x.copy() for x in inputs]
        starts, _ = _start_vectors(indices, dn.index_vector_dim)
        window_shape = [updates[0].shape[d] for d in dn.update_window_dims]
        grid = _window_offsets(window_shape)
        full = np.zeros((starts.shape[0], outs[0].ndim), np.int64)
        full[:, list(dn.scatter_dims_to_operand_dims)] = starts
        position = np.repeat(full[:, None, :], grid.shape[0], axis=1)
        position[:, :, operand_window] += grid[None]
        inside = np.all((position >= 0) & (position < np.array(outs[0].shape)), axis=2)
        inside &= inside.all(axis=1, keepdims=True)  # a window that does not fit is skipped
        targets = tuple(position[inside].T)
        values = [np.moveaxis(u, scatter_dims, range(len(scatter_dims))).reshape(
            starts.shape[0], -1)[inside] for u in updates]
        if combiner == "replace":
            for out, v in zip(outs, values):
                out[targets] = v
        elif combiner is not None:
            combiner.at(outs[0], targets, values[0])
        else:  # any other update computation, in order
            captured = [Tensor(e) for e in extra]
            for k, target in enumerate(zip(*targets)):
                combined = body(*(Tensor(np.asarray(o[target])) for o in outs),
                                *(Tensor(np.asarray(v[k])) for v in values), *captured)
                for o, c in zip(outs, combined):
                    o[target] = c.data
        return tuple(outs)
    return kernel(run)


# -- reductions, windows, sort ------------------------------------------------------------------

def _single_ufunc(region):
    block = region.entry
    ops = [o for o in block.ops if o.name != "stablehlo.return"]
    if len(ops) == 1 and len(block.arguments) == 2 and \
            set(ops[0].operands) == set(block.arguments):
        kind = block.arguments[0].type.dtype.kind
        table = BOOL_OPS if kind == "b" else {**INT_OPS, **FLOAT_OPS} if kind in "iu" \
            else FLOAT_OPS
        fn = table.get(ops[0].name.removeprefix("stablehlo."))
        return fn if isinstance(fn, np.ufunc) else None
    return None


def _fold(body, accumulators, columns, extra=()):
    """Fold ``columns`` (each a list over the reduced positions) into the accumulators with the
    region's plan, in order. ``extra``: the values the region reads from outside."""
    for values in zip(*columns):
        accumulators = [t.data for t in body(*(Tensor(a) for a in accumulators),
                                             *(Tensor(v) for v in values), *extra)]
    return accumulators


@RULES.register("stablehlo.reduce")
def reduce(op, ctx):
    dims = tuple(op.attributes["dimensions"])
    count = len(op.results)
    ufunc = _single_ufunc(op.regions[0]) if count == 1 else None
    out_types = [r.type for r in op.results]
    # the body is applied to whole accumulators at once: compiled for their shape
    body = None if ufunc else vectorized_region(ctx, op.regions[0], out_types[0].shape)

    def run(*arrays):
        xs, inits, extra = arrays[:count], arrays[count:2 * count], arrays[2 * count:]
        if ufunc is not None:
            return (ufunc(inits[0], ufunc.reduce(xs[0], axis=dims)).astype(out_types[0].dtype),)
        kept = [d for d in range(xs[0].ndim) if d not in dims]
        moved = [np.transpose(x, kept + list(dims)).reshape(*out_types[0].shape, -1) for x in xs]
        accumulators = [np.broadcast_to(i, t.shape).copy() for i, t in zip(inits, out_types)]
        columns = [[m[..., j] for j in range(m.shape[-1])] for m in moved]
        return tuple(_fold(body, accumulators, columns, [Tensor(e) for e in extra]))
    return kernel(run)


@RULES.register("stablehlo.reduce_window")
def reduce_window(op, ctx):
    a, count = op.attributes, len(op.results)
    rank = op.operands[0].type.rank
    window = tuple(a.get("window_dimensions") or (1,) * rank)
    strides = tuple(a.get("window_strides") or (1,) * rank)
    base = tuple(a.get("base_dilations") or (1,) * rank)
    dilation = tuple(a.get("window_dilations") or (1,) * rank)
    padding = padding_pairs(a.get("padding"), rank)
    ufunc = _single_ufunc(op.regions[0]) if count == 1 else None
    out_shape = result_type(op).shape
    body = None if ufunc else vectorized_region(ctx, op.regions[0], out_shape)

    def windows(x, init):
        """The strided views of ``x`` (dilated and padded with ``init``), one per window
        position."""
        padded = _padded(x, init, [lo for lo, _ in padding], [hi for _, hi in padding],
                         [b - 1 for b in base])
        for position in np.ndindex(*window):
            yield padded[tuple(slice(p * d, p * d + (o - 1) * s + 1, s) for p, d, o, s in
                               zip(position, dilation, out_shape, strides))]

    def run(*arrays):
        xs, inits, extra = arrays[:count], arrays[count:2 * count], arrays[2 * count:]
        if ufunc is not None:
            acc = np.full(out_shape, inits[0], xs[0].dtype)
            for view in windows(xs[0], inits[0]):
                acc = ufunc(acc, view)
            return (acc.astype(xs[0].dtype),)
        accumulators = [np.full(out_shape, i, x.dtype) for x, i in zip(xs, inits)]
        columns = [list(windows(x, i)) for x, i in zip(xs, inits)]
        return tuple(_fold(body, accumulators, columns, [Tensor(e) for e in extra]))
    return kernel(run)


@RULES.register("stablehlo.sort")
def sort(op, ctx):
    """Any comparator, stably: a bottom-up merge sort whose merges place each element by a
    binary search in the other run, every comparison of a pass made at once over arrays."""
    dim, count = op.attributes["dimension"], len(op.operands)
    shape = op.operands[0].type.shape
    n = shape[dim]
    # the comparator is applied to (rows, n) arrays at once: compiled for that shape
    less = vectorized_region(ctx, op.regions[0], (math.prod(shape) // n if n else 0, n))

    def run(*arrays):
        xs, extra = arrays[:count], [Tensor(c) for c in arrays[count:]]
        rows = [np.moveaxis(x, dim, -1) for x in xs]
        shape = rows[0].shape
        n = shape[-1]
        rows = [r.reshape(-1, n) for r in rows]
        pos = np.broadcast_to(np.arange(n), rows[0].shape)
        width = 1
        while width < n:
            pair = (pos // (2 * width)) * 2 * width
            left = pos - pair < width
            own = np.where(left, pair, pair + width)
            other = np.where(left, pair + width, pair)
            lo = np.zeros(pos.shape, np.int64)
            hi = np.clip(np.minimum(other + width, n) - other, 0, None)
            while (lo < hi).any():
                mid = (lo + hi) // 2
                probe = np.minimum(other + mid, n - 1)
                probed = [np.take_along_axis(r, probe, -1) for r in rows]
                before = less(*(Tensor(a) for p, r in zip(probed, rows) for a in (p, r)),
                              *extra)[0].data  # the probed element sorts before this one
                after = less(*(Tensor(a) for p, r in zip(probed, rows) for a in (r, p)),
                             *extra)[0].data  # this one sorts before the probed one
                # stable: a left element follows the right ones that sort before it; a right
                # element follows the left ones it does not sort before
                precedes = np.where(left, before, ~after)
                active = lo < hi
                lo = np.where(active & precedes, mid + 1, lo)
                hi = np.where(active & ~precedes, mid, hi)
            target = pair + (pos - own) + lo
            for i, r in enumerate(rows):
                merged = np.empty_like(r)
                np.put_along_axis(merged, target, r, -1)
                rows[i] = merged
            width *= 2
        return tuple(np.moveaxis(r.reshape(shape), -1, dim) for r in rows)
    return kernel(run)


# -- contraction --------------------------------------------------------------------------------

@RULES.register("stablehlo.dot_general")
def dot_general(op, ctx):
    dn = op.attributes["dot_dimension_numbers"]
    out = result_type(op)
    lhs_free, rhs_free = dn.free_dimensions(op.operands[0].type.rank, op.operands[1].type.rank)
    wide = F32 if out.dtype in (F16, BF16) else out.dtype

    def run(a, b):
        a = np.transpose(a, (*dn.lhs_batching_dimensions, *lhs_free,
                             *dn.lhs_contracting_dimensions)).astype(wide)
        b = np.transpose(b, (*dn.rhs_batching_dimensions, *dn.rhs_contracting_dimensions,
                             *rhs_free)).astype(wide)
        nb = len(dn.lhs_batching_dimensions)
        batch, m = a.shape[:nb], math.prod(a.shape[nb:nb + len(lhs_free)])
        k = math.prod(a.shape[nb + len(lhs_free):])
        n = math.prod(b.shape[nb + len(dn.rhs_contracting_dimensions):])
        product = np.matmul(a.reshape(*batch, m, k), b.reshape(*batch, k, n))
        return (product.reshape(out.shape).astype(out.dtype),)
    return kernel(run)


# -- control flow, calls, effects ---------------------------------------------------------------

@RULES.register("stablehlo.while")
def while_(op, ctx):
    cond, body = ctx.compile_region(op.regions[0]), ctx.compile_region(op.regions[1])
    captured = len(ctx.captures(op))

    def run(*values):
        carries, extra = list(values[:len(values) - captured]), values[len(values) - captured:]
        while cond(*carries, *extra)[0].data:
            carries = list(body(*carries, *extra))
        return tuple(carries)
    return run


@RULES.register("stablehlo.if", "stablehlo.case")
def branch(op, ctx):
    branches = [ctx.compile_region(r) for r in op.regions]

    def run(selector, *captures):
        index = int(selector.data)
        if op.name == "stablehlo.if":
            index = 0 if index else 1
        elif not 0 <= index < len(branches):
            index = len(branches) - 1
        return tuple(branches[index](*captures))
    return run


@RULES.register("func.call")
def call(op, ctx):
    return ctx.compile_function(op.attributes["callee"])


@RULES.register("stablehlo.composite")
def composite(op, ctx):
    return ctx.compile_function(op.attributes["decomposition"])


@RULES.register("stablehlo.optimization_barrier")
def identity(op, ctx):
    return lambda *xs: tuple(xs)


@RULES.register("stablehlo.after_all", "stablehlo.create_token")
def token(op, ctx):
    return lambda *_: (Tensor(np.zeros((0,), np.bool_)),)


RULES.register(custom_call_rule(HOST_CALLBACK_TARGET))(make_host_callback_rule(
    to_host=lambda t: t.data, from_host=Tensor, token=Tensor(np.zeros((0,), np.bool_))))
RULES.register(custom_call_rule("ApproxTopK"))(approx_top_k)

# What this backend implements: its rules, on the types it computes on.
PRIMITIVES = PrimitiveSet(ops=RULES.op_names, dtypes={d.name for d in COMPUTED},
                          custom_call_targets=RULES.custom_call_targets)


# -- the hooks (as in the template) -------------------------------------------------------------

@hookimpl
def pjrtkit_platform():
    return PlatformInfo(name=PLATFORM, version="primitive 0.1", device_kind="primitive")


@hookimpl
def pjrtkit_primitive_set():
    return PRIMITIVES


@hookimpl
def pjrtkit_capabilities():
    # What the rules take; the core adds what its expansions reach (complex, float8, ...).
    return Capabilities(dtypes=PRIMITIVES.dtypes, ops=PRIMITIVES.ops,
                        custom_call_targets=PRIMITIVES.custom_call_targets,
                        features={"compile_only_topologies"})


def _topology(name: str) -> Topology:
    return Topology(name, (DeviceSpec(id=0, kind="primitive"),))


@hookimpl
def pjrtkit_client_topology(options):
    return _topology("primitive")


@hookimpl
def pjrtkit_make_topology(name, options):
    return _topology(name or "primitive") if name in ("", "primitive") else None


@hookimpl
def pjrtkit_transfer_to_device(array, device, memory_kind):
    return Tensor(array)


@hookimpl
def pjrtkit_transfer_to_host(payload, device, memory_kind):
    return payload.data


@hookimpl
def pjrtkit_copy_buffer(payload, src_device, src_memory_kind, dst_device, dst_memory_kind):
    return Tensor(payload.data.copy())


class PrimitiveExecutable:
    def __init__(self, plan):
        self.plan = plan

    def execute(self, arguments, devices):
        with np.errstate(all="ignore"):  # XLA's semantics: overflow wraps, 0/0 is NaN, quietly
            return [self.plan(*args) for args in arguments]


@hookimpl
def pjrtkit_compile(program, options, devices):
    if options.num_partitions > 1:
        raise Unimplemented(f"{PLATFORM}: partitioned programs are not supported")
    return CompiledProgram(PrimitiveExecutable(build_plan(program, RULES)),
                           cost=estimate_cost(program))
