"""Control flow, calls and effects: while, if and case over compiled regions, func.call and
composite (their functions compiled), optimization_barrier, tokens, and the core's host-callback
rule. These rules take and return Tensors themselves (no ``kernel``): mostly they pass payloads on.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.callbacks import HOST_CALLBACK_TARGET, make_host_callback_rule
from pjrtkit.lowering.registry import custom_call_rule

from .payloads import RULES, Tensor


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
