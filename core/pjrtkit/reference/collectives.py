"""Collectives, replica_id and partition_id as NumPy rules, on the core's rendezvous.

Each device of a launch runs the program on its own thread (``pjrtkit.collectives``); a
collective's kernel finds this device's process group (StableHLO's rules, ``groups``), hands
its operands to the launch's rendezvous and builds its results from every member's operands,
in group order, so all members compute the same values in the same order. A reduction or
gather whose result is the same on every member (all_reduce, all_gather; reduce_scatter's
whole reduction) is computed once per group by one member (``DeviceContext.combine``) and
shared, read-only; results that differ per member are each member's own arrays.

A kernel running outside a launch (a program on one device) is a launch of one device: its
group is itself, its ids are 0.

Reductions across devices run in the type XLA's CPU backend runs the whole collective in: its
float normalization widens an all_reduce or reduce_scatter of bfloat16, float8, float4 or a
narrow integer (``dtypes.compute_dtype``: float32, float16, int8) and narrows the result once,
so a float8 sum over 4 devices is rounded to float8 once, not after every device's term.
float16 is not widened (XLA's collectives add float16 directly, rounding every step). A sum
starts from +0, as XLA's does: devices that all hold -0 sum to +0.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pjrtkit.collectives import groups as G
from pjrtkit.collectives.launch import current_device
from pjrtkit.errors import InvalidArgument
from pjrtkit.semantics import dtypes as D
from pjrtkit.lowering.regions import vectorized_region
from pjrtkit.reference.reduce import binary_body, body_ufunc
from pjrtkit.reference.registry import REFERENCE


def _group_rule(op):
    """(mode, replica groups) of ``op``, read once at compile time."""
    return G.group_mode(op), G.replica_groups(op)


def _group(device, mode, replica_groups) -> tuple[int, ...]:
    launch = device.launch
    processes = G.process_groups(mode, replica_groups, launch.num_replicas,
                                 launch.num_partitions)
    group = G.group_of(device.position, processes)
    return (device.position,) if group is None else group


def _exchange(mode, replica_groups, payload):
    """(every member's payload in group order, this device's index in its group)."""
    device = current_device()
    if device is None:
        return [payload], 0
    group = _group(device, mode, replica_groups)
    return device.exchange(group, payload), group.index(device.position)


def _combined(mode, replica_groups, payload, combine):
    """(``combine(every member's payload in group order)``, computed once for the whole
    group and shared by its members, this device's index in its group, the group's size)."""
    device = current_device()
    if device is None:
        return combine([payload]), 0, 1
    group = _group(device, mode, replica_groups)
    return device.combine(group, payload, combine), group.index(device.position), len(group)


def _read_only(array: np.ndarray) -> np.ndarray:
    """A result every member of a group shares: nobody may write it."""
    array.flags.writeable = False
    return array


def _collective_dtype(dtype) -> np.dtype:
    """The type XLA's CPU backend runs an all_reduce or reduce_scatter of ``dtype`` in."""
    dtype = np.dtype(dtype)
    if dtype in D.ML_FLOATS or dtype in D.NARROW_INTS:
        return D.compute_dtype(dtype)
    return dtype


@dataclasses.dataclass(frozen=True)
class _Combiner:
    """How one operand of a reducing collective is folded across the devices of a group."""

    combine: Callable[[np.ndarray, np.ndarray], np.ndarray]   # a (op) b
    dtype: np.dtype                                            # the type it folds in
    from_zero: bool = False                                    # a float sum: starts at +0


def _reducer(op, ctx) -> list[_Combiner]:
    """A combiner per operand: a one-op body folds in the collective's widened type, any
    other region in the operand's own type (it was compiled for it)."""
    region = op.regions[0]
    body = binary_body(region)
    combiners = []
    for value in op.results:
        dtype = np.dtype(value.type.dtype)
        if body is not None:
            combiners.append(_Combiner(
                body_ufunc(body, dtype), _collective_dtype(dtype),
                from_zero=body == "stablehlo.add" and (D.is_float(dtype) or D.is_complex(dtype))))
        else:
            # Any elementwise computation: the region compiled once for whole operands.
            shape = tuple(op.operands[len(combiners)].type.shape)
            plan = vectorized_region(ctx, region, shape)
            combiners.append(_Combiner(lambda a, b, plan=plan: plan(a, b)[0], dtype))
    return combiners


# Elements per piece of a chunked fold: every operand's piece and the running result stay in
# the core's cache through all the steps (the 4-device MLP step's (512, 784) float32 sum:
# 462 us folded whole, 308 us in pieces of 64K elements; splitting it over two threads was
# slower again, 378 us, the pieces being memory-bound).
FOLD_PIECE = 1 << 16


def _fold(values, combiner: _Combiner, dtype):
    """``values`` combined in order in the combiner's type, narrowed to ``dtype`` once."""
    wide = combiner.dtype
    if (isinstance(combiner.combine, np.ufunc) and len(values) > 1
            and all(type(v) is np.ndarray and v.dtype == wide and v.flags.c_contiguous
                    for v in values)
            and values[0].size > FOLD_PIECE):
        return _fold_in_pieces(values, combiner).astype(dtype, copy=False)
    result = np.array(values[0], dtype=wide, copy=True)  # our own: updated in place below
    if combiner.from_zero:
        np.add(result, wide.type(0), out=result)  # -0 + +0 is +0; else unchanged
    combine = combiner.combine
    in_place = isinstance(combine, np.ufunc)  # a compiled region returns new arrays
    for value in values[1:]:
        value = np.asarray(value, dtype=wide)
        result = (combine(result, value, out=result) if in_place
                  else np.asarray(combine(result, value), dtype=wide))
    return result.astype(dtype, copy=False)


def _fold_in_pieces(values, combiner: _Combiner) -> np.ndarray:
    """``_fold`` of C-contiguous arrays of the combiner's type, piece by piece: each element
    is combined in the same order, so the result is the same bits."""
    flat = [v.reshape(-1) for v in values]
    result = np.empty(flat[0].shape, combiner.dtype)
    combine = combiner.combine
    zero = combiner.dtype.type(0)
    for start in range(0, result.size, FOLD_PIECE):
        stop = start + FOLD_PIECE
        piece = result[start:stop]
        if combiner.from_zero:
            np.add(flat[0][start:stop], zero, out=piece)  # the copy, and -0 + +0 is +0
        else:
            np.copyto(piece, flat[0][start:stop])
        for value in flat[1:]:
            combine(piece, value[start:stop], out=piece)
    return result.reshape(values[0].shape)


@REFERENCE.register("stablehlo.all_reduce")
def all_reduce(op, ctx):
    mode, replica_groups = _group_rule(op)
    combiners = _reducer(op, ctx)
    dtypes = [v.type.dtype for v in op.results]

    def fold_all(values):
        return tuple(_read_only(_fold([v[i] for v in values], combiners[i], dtypes[i]))
                     for i in range(len(values[0])))

    def all_reduce_kernel(*operands):
        return _combined(mode, replica_groups, operands, fold_all)[0]

    return all_reduce_kernel


@REFERENCE.register("stablehlo.all_gather")
def all_gather(op, ctx):
    mode, replica_groups = _group_rule(op)
    axis = int(op.attributes["all_gather_dim"])

    def gather_all(values):
        return tuple(_read_only(np.concatenate([v[i] for v in values], axis=axis))
                     for i in range(len(values[0])))

    def all_gather_kernel(*operands):
        return _combined(mode, replica_groups, operands, gather_all)[0]

    return all_gather_kernel


@REFERENCE.register("stablehlo.reduce_scatter")
def reduce_scatter(op, ctx):
    mode, replica_groups = _group_rule(op)
    axis = int(op.attributes["scatter_dimension"])
    (combiner,) = _reducer(op, ctx)
    dtype = op.results[0].type.dtype

    def fold(values):
        return _fold(values, combiner, dtype)

    def reduce_scatter_kernel(operand):
        reduced, index, count = _combined(mode, replica_groups, operand, fold)
        return (np.array(np.split(reduced, count, axis=axis)[index], copy=True),)

    return reduce_scatter_kernel


@REFERENCE.register("stablehlo.all_to_all")
def all_to_all(op, ctx):
    mode, replica_groups = _group_rule(op)
    split_axis = int(op.attributes["split_dimension"])
    concat_axis = int(op.attributes["concat_dimension"])
    split_count = int(op.attributes["split_count"])
    if replica_groups and any(len(g) != split_count for g in replica_groups):
        raise InvalidArgument(f"{op.describe()}: split_count {split_count} differs from the "
                              f"size of its replica groups {replica_groups}")

    def all_to_all_kernel(*operands):
        values, index = _exchange(mode, replica_groups, operands)
        if len(values) != split_count:  # an empty group list: every device, known only now
            raise InvalidArgument(f"{op.describe()}: split_count {split_count} but its group "
                                  f"has {len(values)} devices")
        return tuple(
            np.concatenate([np.split(v[i], split_count, axis=split_axis)[index] for v in values],
                           axis=concat_axis)
            for i in range(len(operands)))

    return all_to_all_kernel


@REFERENCE.register("stablehlo.collective_permute")
def collective_permute(op, ctx):
    mode = G.group_mode(op)
    pairs = [(int(s), int(t)) for s, t in np.asarray(
        op.attributes.get("source_target_pairs", np.zeros((0, 2))), dtype=np.int64).reshape(-1, 2)]
    result_type = op.results[0].type

    def collective_permute_kernel(operand):
        device = current_device()
        if device is None:
            sources = [s for s, t in pairs if t == 0]
            return (np.array(operand, copy=True) if sources
                    else np.zeros(result_type.shape, result_type.dtype),)
        launch = device.launch
        members, position_of = G.id_space(mode, launch.num_replicas, launch.num_partitions,
                                          device.position)
        values = device.exchange(members, operand)
        for source, target in pairs:
            if position_of(target) == device.position:
                return (np.array(values[members.index(position_of(source))], copy=True),)
        return (np.zeros(result_type.shape, result_type.dtype),)

    return collective_permute_kernel


@REFERENCE.register("stablehlo.collective_broadcast")
def collective_broadcast(op, ctx):
    mode, replica_groups = _group_rule(op)

    def collective_broadcast_kernel(operand):
        values, _ = _exchange(mode, replica_groups, operand)
        return (np.array(values[0], copy=True),)

    return collective_broadcast_kernel


def _device_index_rule(field: str):
    """``replica_id`` / ``partition_id``: the running device's index (0 outside a launch)."""
    def rule(op, ctx):
        def device_index_kernel():
            device = current_device()
            return (np.array(0 if device is None else getattr(device, field), dtype=np.uint32),)

        return device_index_kernel

    return rule


REFERENCE.register("stablehlo.replica_id")(_device_index_rule("replica"))
REFERENCE.register("stablehlo.partition_id")(_device_index_rule("partition"))
