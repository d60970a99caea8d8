"""stablehlo.gather and stablehlo.scatter as flat index arithmetic.

At compile time each rule builds, for the result (gather) or the updates (scatter), the part of
every flat operand index that does not depend on the run-time indices: the window offsets and
the batching (vmap) dims, laid out as (index batch..., window...). The kernel adds the start
indices times the operand strides and does one np.take (gather) or one ufunc.at / fancy
assignment (scatter).

Semantics follow XLA's CPU backend: gather clamps each start index so the whole slice is in
bounds; scatter drops every update window that is not wholly in bounds.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.semantics.dtypes import FLOAT8_AND_NARROWER, int_range
from pjrtkit.reference.reduce import binary_body, body_ufunc, compute_dtype
from pjrtkit.reference.registry import REFERENCE

_INT64_MAX = int_range(np.int64)[1]


def _strides(shape):
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


class _IndexLayout:
    """The compile-time half of gather/scatter indexing over one operand.

    ``batch_shape`` is the shape of the index batch (the start-indices array without its index
    vector dim); ``window_dims`` are the operand dims a window spans, in increasing order, with
    ``window_sizes``. ``base`` holds, for every (batch..., window...) position, the flat operand
    index contributed by the window offset and the batching dims.
    """

    def __init__(self, operand_shape, indices_shape, index_vector_dim, start_map,
                 window_dims, window_sizes, operand_batching, indices_batching):
        self.operand_shape = tuple(operand_shape)
        rank = len(indices_shape)
        self.implicit_vector = index_vector_dim == rank
        self.index_vector_dim = index_vector_dim
        self.batch_shape = tuple(s for i, s in enumerate(indices_shape) if i != index_vector_dim)
        self.start_map = tuple(start_map)
        strides = _strides(self.operand_shape)
        self.start_strides = np.array([strides[d] for d in start_map], dtype=np.int64)
        nb, nw = len(self.batch_shape), len(window_dims)
        base = np.zeros((1,) * (nb + nw), dtype=np.int64)
        for j, (d, size) in enumerate(zip(window_dims, window_sizes)):
            shape = [1] * (nb + nw)
            shape[nb + j] = size
            base = base + (np.arange(size, dtype=np.int64) * strides[d]).reshape(shape)
        for d_op, d_idx in zip(operand_batching, indices_batching):
            j = d_idx - (d_idx > index_vector_dim)  # position among the batch dims
            shape = [1] * (nb + nw)
            shape[j] = self.batch_shape[j]
            line = np.arange(self.batch_shape[j], dtype=np.int64) * strides[d_op]
            base = base + line.reshape(shape)
        # indices (..., K, ...) -> (batch..., K): the index vector dim moved last
        self.to_vector_last = None if self.implicit_vector else (
            *[d for d in range(rank) if d != index_vector_dim], index_vector_dim)
        self.full_shape = (*self.batch_shape, *window_sizes)
        self.base = np.broadcast_to(base, self.full_shape)
        # Start indices may move a window within [0, operand - window] along each mapped dim.
        sizes = dict(zip(window_dims, window_sizes))
        self.start_limit = np.array([self.operand_shape[d] - sizes.get(d, 1) for d in start_map],
                                    dtype=np.int64)
        self.nw = nw

    def starts(self, indices):
        """(batch..., K) int64 start indices."""
        if self.implicit_vector:
            s = indices[..., None]
        else:
            s = indices.transpose(self.to_vector_last)
        if s.dtype.kind == "u" and s.dtype.itemsize == 8:
            s = np.minimum(s, _INT64_MAX)
        return s.astype(np.int64, copy=False)

    def clamped_starts(self, indices):
        """``starts`` clamped so that every window is in bounds (gather's rule), a new array."""
        s = self.starts(indices)
        s = np.maximum(s, 0)  # a new array: the indices stay as they were
        return np.minimum(s, self.start_limit, out=s)

    def flat(self, starts):
        offset = starts @ self.start_strides if len(self.start_map) else np.zeros(
            self.batch_shape, np.int64)
        return self.base + offset.reshape(offset.shape + (1,) * self.nw)


# --- gather ---------------------------------------------------------------------------------

@REFERENCE.register("stablehlo.gather")
def gather_rule(op, ctx):
    operand_t, indices_t = op.operands[0].type, op.operands[1].type
    out_t = op.results[0].type
    dn = op.attributes["dimension_numbers"]
    slice_sizes = tuple(op.attributes["slice_sizes"])
    excluded = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    window_dims = [d for d in range(operand_t.rank) if d not in excluded]
    layout = _IndexLayout(operand_t.shape, indices_t.shape, dn.index_vector_dim,
                          dn.start_index_map, window_dims,
                          [slice_sizes[d] for d in window_dims],
                          dn.operand_batching_dims, dn.start_indices_batching_dims)
    # Result dims: offset_dims hold the window dims in order, the rest the index batch dims.
    nb = len(layout.batch_shape)
    perm, b = [], 0
    for r in range(out_t.rank):
        if r in dn.offset_dims:
            perm.append(nb + dn.offset_dims.index(r))
        else:
            perm.append(b)
            b += 1
    perm = tuple(perm)
    if tuple(layout.full_shape[p] for p in perm) != out_t.shape:
        raise ctx.unimplemented(op, f"gather result shape {out_t.shape} does not match the "
                                    f"computed {layout.full_shape} (permuted by {perm})")
    if out_t.size == 0:
        return lambda operand, indices: (np.zeros(out_t.shape, out_t.dtype),)

    def gather_kernel(operand, indices):
        flat = layout.flat(layout.clamped_starts(indices))
        return (np.take(operand.reshape(-1), flat).transpose(perm),)

    return gather_kernel


# --- scatter --------------------------------------------------------------------------------

def _returns_update(region) -> bool:
    """True if the update computation is ``return arg1`` (x.at[i].set)."""
    block = region.entry
    return (len(block.ops) == 1 and len(block.arguments) == 2
            and block.ops[0].operands == (block.arguments[1],))


@REFERENCE.register("stablehlo.scatter")
def scatter_rule(op, ctx):
    n = (len(op.operands) - 1) // 2
    operand_t = op.operands[0].type
    indices_t = op.operands[n].type
    updates_t = op.operands[n + 1].type
    out_types = [v.type for v in op.results]
    dn = op.attributes["scatter_dimension_numbers"]
    window_upd = tuple(dn.update_window_dims)
    scatter_upd = tuple(d for d in range(updates_t.rank) if d not in window_upd)
    excluded = set(dn.inserted_window_dims) | set(dn.input_batching_dims)
    window_dims = [d for d in range(operand_t.rank) if d not in excluded]
    window_sizes = [updates_t.shape[d] for d in window_upd]
    layout = _IndexLayout(operand_t.shape, indices_t.shape, dn.index_vector_dim,
                          dn.scatter_dims_to_operand_dims, window_dims, window_sizes,
                          dn.input_batching_dims, dn.scatter_indices_batching_dims)
    upd_perm = (*scatter_upd, *window_upd)
    if tuple(updates_t.shape[d] for d in upd_perm) != layout.full_shape:
        raise ctx.unimplemented(op, f"updates shape {updates_t.shape} does not match the "
                                    f"index batch and window {layout.full_shape}")
    limit = layout.start_limit
    window_ones = (1,) * len(window_sizes)
    region = op.regions[0]
    body = binary_body(region) if n == 1 else None
    is_set = n == 1 and _returns_update(region)
    plan = None if body is not None or is_set else ctx.compile_region(region)
    out_t = out_types[0]
    cdt = compute_dtype(out_t.dtype) if body is not None else out_t.dtype
    if out_t.dtype in FLOAT8_AND_NARROWER:
        cdt = out_t.dtype  # XLA rounds float8/float4 scatters to the type at every update
    ufunc = body_ufunc(body, out_t.dtype) if body is not None else None

    def targets(indices):
        """Flat operand index of every update element, and which ones are applied (None:
        all of them)."""
        starts = layout.starts(indices)
        if not len(limit):
            return layout.flat(starts), None
        # XLA drops a whole update window if any part of it would fall outside the operand.
        inside = (starts >= 0) & (starts <= limit)
        if inside.all():
            return layout.flat(starts), None
        ok = inside.all(axis=-1)
        flat = layout.flat(np.where(ok[..., None], starts, 0))
        return flat, np.broadcast_to(ok.reshape(ok.shape + window_ones), layout.full_shape)

    def scatter_kernel(*args):
        operands, indices, updates = args[:n], args[n], args[n + 1:2 * n + 1]
        captures = args[2 * n + 1:]
        flat, mask = targets(indices)
        all_in = mask is None or bool(mask.all())
        idx = flat.reshape(-1) if all_in else flat[mask]
        ups = [np.asarray(u).transpose(upd_perm) for u in updates]
        ups = [u.reshape(-1) if all_in else u[mask] for u in ups]
        if ufunc is not None or is_set:
            result = np.array(operands[0], dtype=cdt).reshape(-1)
            if is_set:
                result[idx] = ups[0]
            else:
                ufunc.at(result, idx, ups[0].astype(cdt, copy=False))
            return (result.reshape(out_t.shape).astype(out_t.dtype, copy=False),)
        results = [np.array(o).reshape(-1) for o in operands]
        for k, t in enumerate(idx.tolist()):
            current = [np.asarray(r[t]) for r in results]
            new = plan(*current, *(np.asarray(u[k]) for u in ups), *captures)
            for r, v in zip(results, new):
                r[t] = v
        return tuple(r.reshape(t.shape) for r, t in zip(results, out_types))

    return scatter_kernel
