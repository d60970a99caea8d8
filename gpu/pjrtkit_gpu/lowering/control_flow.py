"""Control flow driven from the host: ``while`` reads its condition back from the device after
each trip, ``if``/``case`` read their predicate/index, then call the nested plans (whose kernels
launch on the device as usual). ``func.call`` runs the callee's plan; tokens are empty arrays."""
from __future__ import annotations

from pjrtkit_gpu import dtypes as D


def _read_scalar(driver, payload):
    return driver.to_host(payload).reshape(()).item()


def while_(op, ctx):
    cond = ctx.compile_region(op.regions[0])
    body = ctx.compile_region(op.regions[1])
    driver = ctx.payloads.driver
    carried_count = len(op.operands)

    def run_while(*args):
        carried, captures = args[:carried_count], args[carried_count:]
        while _read_scalar(driver, cond(*carried, *captures)[0]):
            carried = body(*carried, *captures)
        return tuple(carried)

    return run_while


def if_(op, ctx):
    true_branch = ctx.compile_region(op.regions[0])
    false_branch = ctx.compile_region(op.regions[1])
    driver = ctx.payloads.driver

    def run_if(predicate, *captures):
        return (true_branch if _read_scalar(driver, predicate) else false_branch)(*captures)

    return run_if


def case(op, ctx):
    branches = tuple(ctx.compile_region(region) for region in op.regions)
    last = len(branches) - 1
    driver = ctx.payloads.driver

    def run_case(index, *captures):
        i = int(_read_scalar(driver, index))
        return branches[i if 0 <= i <= last else last](*captures)  # out of range: the last

    return run_case


def call(op, ctx):
    return ctx.compile_function(op.attributes["callee"])


def composite(op, ctx):
    """``stablehlo.composite`` (jaxlib's form of CHLO ops such as top_k and erf): its
    decomposition, a function of plain StableHLO, is the op's meaning."""
    return ctx.compile_function(op.attributes["decomposition"])


def token(op, ctx):
    driver, device = ctx.payloads.driver, ctx.payloads.device_index

    def run_token(*_tokens):
        return (driver.empty(device, (0,), D.BOOL),)

    return run_token


def custom_call(op, ctx):
    target = op.attributes.get("call_target_name", "")
    raise ctx.unimplemented(op, f"custom_call target '{target}' has no GPU kernel")


CONTROL_FLOW_RULES = {
    "stablehlo.while": while_,
    "stablehlo.if": if_,
    "stablehlo.case": case,
    "func.call": call,
    "stablehlo.composite": composite,
    "stablehlo.after_all": token,
    "stablehlo.create_token": token,
    "stablehlo.custom_call": custom_call,
}
