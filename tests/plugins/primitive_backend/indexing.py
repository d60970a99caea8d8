"""Indexing: StableHLO's gather and scatter, with its index rules.

Start indices are clamped (gather) or out-of-bounds windows skipped (scatter); a scatter's
update computation runs as a NumPy ufunc when it is one, else with the region's own plan.
Batching dimensions are handed to the core's rewrite (``lower_by_expansion``).
"""
from __future__ import annotations

import math

import numpy as np

from pjrtkit.expansions import lower_by_expansion
from pjrtkit.expansions.batched_indexing import gather_without_batching, scatter_without_batching

from .payloads import RULES, Tensor, kernel, result_type


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

