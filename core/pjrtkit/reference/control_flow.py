"""Control flow (while, if, case, func.call), tokens and no-op custom calls (device ids and
collectives: ``collectives.py``).

Regions are lowered to nested plans at compile time; the kernels only pick and call them.
Region plans are called as ``plan(*block_args, *captures)`` and an op with regions receives
``(*operands, *captures)``, with ``captures`` in the same order (``ctx.captures(op)``).
``stablehlo.while`` here is the interpreted loop: cond and body plans called in turn. Backends
override it with faster forms (the cpu plugin's in-place carries and native loops).
"""
from __future__ import annotations

import numpy as np

from pjrtkit.lowering.dce_sink import dce_sink
from pjrtkit.lowering.registry import custom_call_rule
from pjrtkit.reference.registry import REFERENCE

# A token carries ordering only; at run time it is this empty, read-only array.
TOKEN = np.zeros((0,), dtype=np.bool_)
TOKEN.flags.writeable = False

# custom_call targets that only annotate sharding or memory placement: on one host device they
# pass values through (XLA's CPU backend does the same).
_IDENTITY_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                               "annotate_device_placement", "MoveToHost", "MoveToDevice"})


@REFERENCE.register("stablehlo.while")
def while_(op, ctx):
    cond = ctx.compile_region(op.regions[0])
    body = ctx.compile_region(op.regions[1])
    num_carried = len(op.operands)

    def kernel(*args):
        carried = args[:num_carried]
        captures = args[num_carried:]
        while cond(*carried, *captures)[0]:
            carried = body(*carried, *captures)
        return tuple(carried)

    return kernel


@REFERENCE.register("stablehlo.if")
def if_(op, ctx):
    true_branch = ctx.compile_region(op.regions[0])
    false_branch = ctx.compile_region(op.regions[1])

    def kernel(pred, *captures):
        return (true_branch if pred else false_branch)(*captures)

    return kernel


@REFERENCE.register("stablehlo.case")
def case(op, ctx):
    branches = tuple(ctx.compile_region(region) for region in op.regions)
    last = len(branches) - 1

    def kernel(index, *captures):
        i = int(index)
        # The spec sends any out-of-range index to the last branch.
        return branches[i if 0 <= i <= last else last](*captures)

    return kernel


@REFERENCE.register("func.call")
def call(op, ctx):
    # A function plan already has the kernel calling convention: arrays in, tuple out.
    return ctx.compile_function(op.attributes["callee"])


@REFERENCE.register("stablehlo.custom_call")
def custom_call(op, ctx):
    # Targets with a kernel register under custom_call_rule(target); this is everything else.
    target = op.attributes.get("call_target_name", "")
    raise ctx.unimplemented(op, f"custom_call target '{target}' has no kernel")


@REFERENCE.register(*(custom_call_rule(target) for target in _IDENTITY_TARGETS))
def identity_custom_call(op, ctx):
    target = op.attributes.get("call_target_name", "")
    if [v.type for v in op.operands] != [v.type for v in op.results]:
        raise ctx.unimplemented(op, f"custom_call '{target}' changes types; on a single device "
                                    f"it is expected to be an identity")

    def kernel(*xs):
        return xs

    return kernel


# ``lax.dce_sink``: the backend-neutral rule (pjrtkit.lowering.dce_sink).
REFERENCE.register(custom_call_rule("dce_sink"))(dce_sink)


@REFERENCE.register("stablehlo.after_all", "stablehlo.create_token")
def token(op, ctx):
    def kernel(*_tokens):
        return (TOKEN,)

    return kernel

