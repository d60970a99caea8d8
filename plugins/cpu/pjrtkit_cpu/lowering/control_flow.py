"""stablehlo.while, if and case on the cpu: in-place carry updates, native (Numba) loops and
multiply-adds rounded once in interpreted bodies and branches.

Overrides the reference's interpreted while (``pjrtkit.reference.control_flow``, which also
holds call and the other control-flow rules the cpu backend uses as they are) and wraps its
if and case. A loop body or branch that runs interpreted is contracted
(``contraction.contract_block``) as LLVM contracts the native loop that replaces it and as XLA
contracts every computation: without it a loop's multiply-adds were rounded twice until its
native loop landed and once after, so one program gave other bits from one call to the next
(numpyro's NUTS followed another chain). Its small float sums are added in the native loop's
order (``lowering.loop_sums``). The native loop gets the blocks as they are: LLVM contracts
them itself.
An interpreted call switches to the native loop at the iteration its compile lands on
(``NativeLoopKernel.resume``).
Region plans are called as ``plan(*block_args, *captures)`` and an op with regions receives
``(*operands, *captures)``, with ``captures`` in the same order (``ctx.captures(op)``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrtkit.reference import control_flow as reference
from pjrtkit.stablehlo.ir import Block, Region

from pjrtkit.stablehlo.inline import inline_calls_everywhere
from pjrtkit_cpu.contraction import contract_block
from pjrtkit_cpu.lowering.loop_sums import mark_sequential_sums
from pjrtkit_cpu.loops.native import native_loop
from pjrtkit_cpu.loops.ownership import IN_PLACE_UPDATE, rewrite_in_place
from pjrtkit_cpu.lowering.registry import RULES


@RULES.register("stablehlo.while")
def while_(op, ctx):
    # The body's calls, those of its branches and inner loops too, are inlined (so the analyses
    # below see the ops they run) and its dynamic_update_slice ops on dying carries write in
    # place (see loops.ownership).
    cond_block = inline_calls_everywhere(op.regions[0].entry, ctx.program)
    body_block, owned = rewrite_in_place(inline_calls_everywhere(op.regions[1].entry,
                                                                 ctx.program))
    cond = ctx.compile_region(Region([_as_native(cond_block)]))
    body = ctx.compile_region(Region([_as_native(body_block)]))
    num_carried = len(op.operands)
    owned = tuple(sorted(owned))
    native = []  # the loop's NativeLoopKernel, when it has one

    def kernel(*args):
        carried = args[:num_carried]
        captures = args[num_carried:]
        if owned:
            # Carries the body updates in place start as our own copies: the initial value
            # may be a caller's buffer, a folded constant or a value read again later.
            carried = list(carried)
            for p in owned:
                carried[p] = np.array(carried[p], copy=True, order="C")
        compiled = native[0] if native else None
        while cond(*carried, *captures)[0]:
            carried = body(*carried, *captures)
            if compiled is not None and compiled.ready:
                # The native loop landed while this call ran: it goes on from this
                # iteration's carries (what the loop's remaining iterations start from).
                return compiled.resume(carried, captures)
        return tuple(carried)

    loop = native_loop(op, ctx, cond_block, body_block, owned, kernel)
    if loop is not kernel:
        native.append(loop)
    return loop


def _as_native(block: Block) -> Block:
    """``block`` as its interpreted run should round: multiply-adds contracted and small float
    sums added in order (``lowering.loop_sums``), as its native loop does."""
    return mark_sequential_sums(contract_block(block))


def _contracted_branches(op, ctx):
    """``op`` (if or case) with each branch's calls inlined and its multiply-adds contracted."""
    regions = tuple(Region([contract_block(inline_calls_everywhere(region.entry, ctx.program))])
                    if len(region.blocks) == 1 else region for region in op.regions)
    return dataclasses.replace(op, regions=regions)


@RULES.register("stablehlo.if")
def if_(op, ctx):
    return reference.if_(_contracted_branches(op, ctx), ctx)


@RULES.register("stablehlo.case")
def case(op, ctx):
    return reference.case(_contracted_branches(op, ctx), ctx)


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
