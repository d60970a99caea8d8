"""Find fusable groups of elementwise ops in one block.

A group is a connected set of ops that ``codegen`` can emit, all with one result shape (the
group's shape), whose operands are values of that shape, rank-0 values, or results of
``broadcast_in_dim`` or ``transpose`` ops absorbed into the group (their operands are read with
stride 0 where they repeat, or with permuted strides; a transpose never reads a value of its own
group). Ops join greedily in block order; an op does not join (or merge) groups when that
would make the group depend on itself through an op outside it, so every group can run as one
step. Effectful ops are chained so that fusion never reorders them.

A group may end in reductions (``codegen.reduction_kind``: add/max/min over the innermost
dimension of a member or input of the group's shape); their results are always outputs (of the
smaller shape), never read by members, so ops using them go to other groups.

Splat constants of the group's shape used by members are not read as arrays: ``rewrite`` makes
each a rank-0 input of the group.

The group's inputs are values defined outside it; its outputs are member results used outside
it (by other ops, nested regions or the terminator).
"""
from __future__ import annotations

import dataclasses
import functools
import weakref

import numpy as np

from pjrtkit.semantics import ops as semantics_ops
from pjrtkit.stablehlo.ir import Block, Op, TensorType, Value, free_uses

from pjrtkit_cpu.fusion import codegen
from pjrtkit_cpu.loopnest.values import BOOL, DTYPES

# A fused loop pays ~10 us of dispatch and a compile; below this many elements NumPy's
# per-op passes are cheap enough (measured: layernorm rows of 16k f32 elements break even).
MIN_ELEMENTS = 1 << 14
MIN_OPS = 2
# One op is worth a loop when it would otherwise read broadcast or splat operands that NumPy
# materialises or walks with strides (a select of a broadcast mask: 1.7 ms unfused, 0.3 fused),
# or when it is a reduction over the innermost axis (f32[4096,1024] row sums: NumPy's pairwise
# sum 0.62 ms, the vectorized row loop 0.17 ms).
MIN_OPS_WITH_BROADCASTS = 1
MIN_OPS_WITH_REDUCTIONS = 1
# Ops whose per-op kernel is several NumPy passes over the bits (reduce_precision: bitcast,
# round, mask, NaN select) are worth a loop alone too: pjrtkit_tpu rounds every float32 dot
# operand to bfloat16 with one, and a (784, 512) weight took 2.5 ms unfused.
MULTI_PASS_OPS = frozenset({"stablehlo.reduce_precision"})
# ... and from fewer elements: the 8-device flax step's (512, 10) weight, 5120 elements, took
# 120 us a round per op on pjrtkit_tpu's lockstep launch, 16 rounds a step.
MULTI_PASS_MIN_ELEMENTS = 1 << 10

# Ops whose order is observable; they are kept in order relative to each other.
EFFECTFUL = semantics_ops.EFFECTFUL


@dataclasses.dataclass(eq=False)
class Group:
    members: list[Op]  # in block order
    shape: tuple[int, ...]
    # constants members read that are one repeated element, rank 0 or of the group's shape
    # (value id -> the element, 0-d): rank-0 inputs of the fused op (see rewrite)
    splats: dict = dataclasses.field(default_factory=dict)

    @property
    def compute_ops(self) -> int:
        return sum(op.name not in codegen.ABSORBED for op in self.members)

    @property
    def absorbs_broadcasts(self) -> bool:
        return any(op.name in codegen.ABSORBED for op in self.members) or any(
            v.id in self.splats and v.type.shape for op in self.members for v in op.operands)

    def worth_fusing(self, whole_block: bool = False) -> bool:
        """Enough work for a loop: ops and elements past the thresholds. ``whole_block``: the
        group will be the whole program (``fusion.whole``), so one compute op of any size is
        enough (a compiled kernel lets the C execute path run it without Python)."""
        if whole_block:
            return self.compute_ops >= 1
        least = MIN_OPS
        if self.absorbs_broadcasts:
            least = min(least, MIN_OPS_WITH_BROADCASTS)
        if any(codegen.reduction_kind(op) is not None for op in self.members):
            least = min(least, MIN_OPS_WITH_REDUCTIONS)
        fewest = MIN_ELEMENTS
        if any(op.name in MULTI_PASS_OPS for op in self.members):
            least, fewest = 1, MULTI_PASS_MIN_ELEMENTS
        return self.compute_ops >= least and _size(self.shape) >= fewest


# id(constant array) -> (weak reference to it, its splat value or None); an entry leaves when
# its array dies, so the cache never outlives the programs that hold the constants.
_splat_cache: dict[int, tuple[weakref.ref, np.ndarray | None]] = {}


def _forget_splat(ref: weakref.ref, key: int) -> None:
    entry = _splat_cache.get(key)
    if entry is not None and entry[0] is ref:
        del _splat_cache[key]


def splat_cache_entries() -> int:
    """Constants whose splat answer is remembered now (bounded by the live constants)."""
    return len(_splat_cache)


def splat_value(op: Op):
    """The one element of a ``stablehlo.constant`` of rank 0, or whose elements are all equal
    (bit for bit), as a 0-d array; else None."""
    if op.name != "stablehlo.constant" or len(op.results) != 1:
        return None
    value = op.attributes.get("value")
    if not isinstance(value, np.ndarray) or value.size < 1:
        return None
    if value.dtype not in DTYPES:
        return None
    key = id(value)
    cached = _splat_cache.get(key)
    if cached is not None and cached[0]() is value:
        return cached[1]
    flat = value.reshape(-1)
    bits = flat.view(np.dtype(f"u{value.dtype.itemsize}")) if value.dtype != BOOL else flat
    result = np.array(flat[0]) if bool((bits == bits[0]).all()) else None
    _splat_cache[key] = (weakref.ref(value, functools.partial(_forget_splat, key=key)), result)
    return result


def _shape_of(value: Value):
    return value.type.shape if isinstance(value.type, TensorType) else None


def member_shape(op: Op) -> tuple[int, ...] | None:
    """The group shape ``op`` could belong to, or None when it cannot be fused."""
    if codegen.reduction_kind(op) is not None:
        return op.operands[0].type.shape
    if len(op.results) != 1 or op.regions:
        return None
    shape = _shape_of(op.results[0])
    if not shape or op.results[0].type.dtype not in DTYPES:
        return None
    if op.name == codegen.TRANSPOSE:  # absorbed: its operand is read with permuted strides
        perm = tuple(op.attributes.get("permutation", ()))
        if len(shape) < 2 or sorted(perm) != list(range(len(shape))) or perm == tuple(
                range(len(shape))):
            return None
        return shape
    if op.name == codegen.BROADCAST:
        operand = op.operands[0].type
        dims = tuple(op.attributes.get("broadcast_dimensions", ()))
        if (operand.dtype not in DTYPES or operand.shape == shape
                or len(dims) != operand.rank
                or list(dims) != sorted(set(dims))
                or any(operand.shape[i] not in (1, shape[d]) for i, d in enumerate(dims))):
            return None
        return shape
    for v in op.operands:
        s = _shape_of(v)
        if s is None or (s != shape and s != ()):
            return None
    return shape if codegen.supports(op) else None


def find_groups(block: Block, whole_block: bool = False) -> list[Group]:
    """The fusable groups of ``block`` worth a loop (``Group.worth_fusing``, with
    ``whole_block`` passed on)."""
    parent: dict[int, int] = {}  # union-find over group ids

    def find(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    group_of_value: dict[int, int] = {}   # value id -> raw group id of its defining member
    indirect: dict[int, frozenset] = {}   # value id -> raw group ids reached via a non-member
    external: dict[int, set] = {}         # group id -> groups its members reach indirectly
    members: dict[int, list[Op]] = {}
    shapes: dict[int, tuple[int, ...]] = {}
    effect_chain: frozenset = frozenset()
    splats: dict[int, object] = {}        # value id -> scalar, for splat constants

    def everything(v: Value) -> set:
        found = set(indirect.get(v.id, ()))
        if v.id in group_of_value:
            found.add(group_of_value[v.id])
        return found

    for op in block.ops:
        if op.name == "stablehlo.constant":
            value = splat_value(op)
            if value is not None:
                splats[op.results[0].id] = value
        shape = member_shape(op)
        reduces = shape is not None and codegen.reduction_kind(op) is not None
        operand_groups = set()
        reach = set()
        for v in op.operands:
            reach |= indirect.get(v.id, frozenset())
            if v.id in group_of_value:
                g = find(group_of_value[v.id])
                # (a transpose reads its operand whole: never from its own group)
                if shapes[g] == shape and op.name != codegen.TRANSPOSE:
                    operand_groups.add(g)
                else:  # a member of another group feeding this op is an outside path
                    reach.add(g)
        joined = None
        if shape is not None:
            # Merge every operand group that no path through an outside op (or another
            # group being merged) leads back into; read the others' outputs as inputs.
            while True:
                reach_now = {find(g) for g in reach}
                for g in operand_groups:
                    reach_now |= {find(x) for x in external[g]}
                cyclic = operand_groups & reach_now
                if not cyclic:
                    break
                operand_groups -= cyclic
                reach |= cyclic
            gid = len(parent)
            parent[gid] = gid
            members[gid] = [op]
            shapes[gid] = shape
            external[gid] = set(reach_now)
            for g in operand_groups:
                parent[g] = gid
                members[gid].extend(members.pop(g))
                external.pop(g)
            joined = gid
        if joined is not None and reduces:
            # Not readable by members: an op using it depends on the whole group.
            for r in op.results:
                indirect[r.id] = frozenset(reach | {joined})
        elif joined is not None:
            for r in op.results:
                group_of_value[r.id] = joined
                indirect[r.id] = frozenset(reach)
        else:
            full = set()
            for v in op.operands:
                full |= everything(v)
            for vid in free_uses(op):
                full |= set(indirect.get(vid, ()))
                if vid in group_of_value:
                    full.add(group_of_value[vid])
            if op.name in EFFECTFUL:
                full |= effect_chain
                effect_chain = frozenset(full)
            for r in op.results:
                indirect[r.id] = frozenset(full)
    order = {id(op): i for i, op in enumerate(block.ops)}
    groups = []
    for gid, ops in members.items():
        used = {v.id: splats[v.id] for op in ops for v in op.operands
                if v.id in splats and v.type.shape in (shapes[gid], ())}
        group = Group(sorted(ops, key=lambda o: order[id(o)]), shapes[gid], used)
        if group.worth_fusing(whole_block):
            groups.append(group)
    return groups


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
