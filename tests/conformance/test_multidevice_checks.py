"""The many-device checks of layer 2 measure something: they pass on the cpu backend, and each
fails on a backend whose collective is wrong in the way that check is about (a collective
that ignores its groups and body, gathers in device order instead of group order, or sends to the wrong
device); a backend that does not declare partitioned programs is UNSUPPORTED, not FAIL."""
from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

import pjrtkit_cpu.plugin as cpu
from pjrtkit import hookimpl
from pjrtkit.backend import Backend
from pjrtkit.lowering.plan import build_plan
from pjrtkit.stablehlo.cost import estimate_cost
from pjrtkit.conformance import hooks_checks
from pjrtkit.conformance.checks import REGISTRY, Outcome, run_check
from pjrtkit.conformance.runner import import_layer
from pjrtkit.types import CompiledProgram

import_layer("hooks")
MULTIDEVICE = sorted(c for c in REGISTRY if c.startswith("hooks.multidevice."))


def backend_with(name, rules=None, **overrides) -> Backend:
    """The cpu backend's hooks, compiling with ``rules`` merged over the cpu's rules."""
    module = types.ModuleType(f"multidevice_{name}")
    for hook in hooks_checks.all_hook_names():
        impl = getattr(cpu, hook, None)
        if impl is not None:
            setattr(module, hook, impl)
    if rules:
        from pjrtkit_cpu.lowering import RULES

        merged = RULES.merged(rules, backend=f"pjrtkit_{name}")

        def compile_hook(program, options, devices):
            return CompiledProgram(executable=cpu.CpuExecutable(build_plan(program, merged),
                                                                False),
                                   cost=estimate_cost(program))
        module.pjrtkit_compile = hookimpl(compile_hook)
    for hook, fn in overrides.items():
        setattr(module, hook, hookimpl(fn))
    return Backend(name, module)


def outcomes(backend) -> dict[str, Outcome]:
    return {check_id: run_check(REGISTRY[check_id], backend).outcome
            for check_id in MULTIDEVICE}


def test_every_many_device_check_passes_on_cpu():
    from pjrtkit.discovery import load_backend

    assert len(MULTIDEVICE) >= 8
    assert set(outcomes(load_backend("cpu")).values()) == {Outcome.PASS}


def _reference_rule(name):
    from pjrtkit.reference import REFERENCE

    return REFERENCE.rules[name]


def _all_reduce_ignoring_groups(op, ctx):
    kernel = _reference_rule("stablehlo.all_reduce")(op, ctx)

    def without_group(*operands):
        # sums over every device: ignores the groups and the reduction body
        from pjrtkit.collectives.launch import current_device

        device = current_device()
        values = device.exchange(tuple(range(4)), operands)
        return tuple(np.sum([v[i] for v in values], axis=0).astype(operands[i].dtype)
                     for i in range(len(operands)))

    return without_group if kernel else None


def _all_gather_in_device_order(op, ctx):
    axis = int(op.attributes["all_gather_dim"])

    def device_order(*operands):
        from pjrtkit.collectives.launch import current_device

        values = current_device().exchange(tuple(range(4)), operands)
        return tuple(np.concatenate([v[i] for v in values], axis=axis)
                     for i in range(len(operands)))

    return device_order


def _permute_to_the_wrong_device(op, ctx):
    kernel = _reference_rule("stablehlo.collective_permute")(op, ctx)

    def shifted(operand):
        (result,) = kernel(operand)
        return (np.roll(result, 1, axis=0),)

    return shifted


@pytest.mark.parametrize("rules, broken", [
    ({"stablehlo.all_reduce": _all_reduce_ignoring_groups},
     {"hooks.multidevice.all_reduce_groups", "hooks.multidevice.all_reduce_max_all_partitions"}),
    ({"stablehlo.all_gather": _all_gather_in_device_order},
     {"hooks.multidevice.all_gather_group_order"}),
    ({"stablehlo.collective_permute": _permute_to_the_wrong_device},
     {"hooks.multidevice.collective_permute"}),
])
def test_a_wrong_collective_fails_exactly_its_check(rules, broken):
    name = next(iter(rules)).split(".")[-1]
    found = outcomes(backend_with(f"wrong_{name}", rules))
    assert {c for c, o in found.items() if o == Outcome.FAIL} == broken, found
    assert all(o == Outcome.PASS for c, o in found.items() if c not in broken), found


def test_a_backend_without_partitioned_programs_is_unsupported():
    def capabilities():
        return dataclasses.replace(cpu.pjrtkit_capabilities(),
                                   features={"compile_only_topologies", "multiple_devices"})

    found = outcomes(backend_with("single_device_only", pjrtkit_capabilities=capabilities))
    assert set(found.values()) == {Outcome.UNSUPPORTED}, found
