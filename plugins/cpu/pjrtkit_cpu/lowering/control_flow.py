"""Control flow (while, if, case, func.call), tokens, device ids and no-op custom calls.

Regions are lowered to nested plans at compile time; the kernels only pick and call them.
Region plans are called as ``plan(*block_args, *captures)`` and an op with regions receives
``(*operands, *captures)``, with ``captures`` in the same order (``ctx.captures(op)``).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.stablehlo.ir import Region

from pjrtkit_cpu.loops.inline import inline_calls
from pjrtkit_cpu.loops.native import native_loop
from pjrtkit_cpu.loops.ownership import IN_PLACE_UPDATE, rewrite_in_place
from pjrtkit_cpu.lowering.registry import RULES

# A token carries ordering only; at run time it is this empty, read-only array.
TOKEN = np.zeros((0,), dtype=np.bool_)
TOKEN.flags.writeable = False

# Single-device values of partition_id / replica_id.
_DEVICE_ZERO = np.zeros((), dtype=np.uint32)
_DEVICE_ZERO.flags.writeable = False

# custom_call targets that only annotate sharding or memory placement: on one host device they
# pass values through (XLA's CPU backend does the same).
IDENTITY_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                               "annotate_device_placement", "MoveToHost", "MoveToDevice"})


@RULES.register("stablehlo.while")
def while_(op, ctx):
    # The body's calls are inlined (so the analyses below see the ops they run) and its
    # dynamic_update_slice ops on dying carries write in place (see loops.ownership).
    cond_block = inline_calls(op.regions[0].entry, ctx.program)
    body_block, owned = rewrite_in_place(inline_calls(op.regions[1].entry, ctx.program))
    cond = ctx.compile_region(Region([cond_block]))
    body = ctx.compile_region(Region([body_block]))
    num_carried = len(op.operands)
    owned = tuple(sorted(owned))

    def kernel(*args):
        carried = args[:num_carried]
        captures = args[num_carried:]
        if owned:
            # Carries the body updates in place start as our own copies: the initial value
            # may be a caller's buffer, a folded constant or a value read again later.
            carried = list(carried)
            for p in owned:
                carried[p] = np.array(carried[p], copy=True, order="C")
        while cond(*carried, *captures)[0]:
            carried = body(*carried, *captures)
        return tuple(carried)

    return native_loop(op, ctx, cond_block, body_block, owned, kernel)


@RULES.register(IN_PLACE_UPDATE)
def dynamic_update_slice_in_place(op, ctx):
    """dynamic_update_slice into an operand the while kernel owns and nobody reads again."""
    operand_shape = op.operands[0].type.shape
    sizes = op.operands[1].type.shape
    limits = [d - s for d, s in zip(operand_shape, sizes)]

    def kernel(x, update, *starts):
        # XLA clamps each start so the whole update lands inside the operand.
        index = tuple(slice(b, b + s) for b, s in zip(
            (min(max(int(s), 0), hi) for s, hi in zip(starts, limits)), sizes))
        x[index] = update
        return (x,)

    return kernel


@RULES.register("stablehlo.if")
def if_(op, ctx):
    true_branch = ctx.compile_region(op.regions[0])
    false_branch = ctx.compile_region(op.regions[1])

    def kernel(pred, *captures):
        return (true_branch if pred else false_branch)(*captures)

    return kernel


@RULES.register("stablehlo.case")
def case(op, ctx):
    branches = tuple(ctx.compile_region(region) for region in op.regions)
    last = len(branches) - 1

    def kernel(index, *captures):
        i = int(index)
        # The spec sends any out-of-range index to the last branch.
        return branches[i if 0 <= i <= last else last](*captures)

    return kernel


@RULES.register("func.call")
def call(op, ctx):
    # A function plan already has the kernel calling convention: arrays in, tuple out.
    return ctx.compile_function(op.attributes["callee"])


@RULES.register("stablehlo.custom_call")
def custom_call(op, ctx):
    target = op.attributes.get("call_target_name", "")
    if target not in IDENTITY_TARGETS:
        raise ctx.unimplemented(op, f"custom_call target '{target}' has no cpu kernel")
    if [v.type for v in op.operands] != [v.type for v in op.results]:
        raise ctx.unimplemented(op, f"custom_call '{target}' changes types; on a single device "
                                    f"it is expected to be an identity")

    def kernel(*xs):
        return xs

    return kernel


@RULES.register("stablehlo.after_all", "stablehlo.create_token")
def token(op, ctx):
    def kernel(*_tokens):
        return (TOKEN,)

    return kernel


@RULES.register("stablehlo.partition_id", "stablehlo.replica_id")
def device_id(op, ctx):
    def kernel():
        return (_DEVICE_ZERO,)

    return kernel
