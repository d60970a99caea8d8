"""Layer 2 measures something: it passes on the cpu backend, calls every hook of the contract,
and each of its checks fails on a backend broken in the way that check is about."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import types

import numpy as np
import pytest

import pjrtkit_cpu.plugin as cpu
from pjrtkit import builtin, hookimpl
from pjrtkit.backend import Backend
from pjrtkit.errors import InvalidArgument, Unimplemented
from pjrtkit.conformance import hooks_checks
from pjrtkit.conformance.checks import REGISTRY, Outcome, run_check
from pjrtkit.conformance.runner import import_layer
from pjrtkit.types import (CompiledProgram, CostEstimate, MemorySpaceSpec, MemoryStats,
                           MultiProcessSupport, Topology)

HOOKS = sorted(hooks_checks.all_hook_names())
import_layer("hooks")  # every hooks_checks* module registers its checks
LAYER2 = [c for c in REGISTRY.values() if c.layer == "hooks"]


def make_backend(name="mutant", **overrides) -> Backend:
    """The cpu backend's hooks with some replaced (each override is a plain function)."""
    module = types.ModuleType(f"mutant_{name}")
    for hook in HOOKS:
        impl = getattr(cpu, hook, None)
        if impl is not None:
            setattr(module, hook, impl)
    for hook, fn in overrides.items():
        setattr(module, hook, hookimpl(fn))
    return Backend(name, module)


def two_devices(options):
    from pjrtkit_cpu.topology import cpu_topology
    return cpu_topology("cpu", 2)


def topology_with(**device_changes):
    def client_topology(options):
        base = two_devices(options)
        devices = tuple(dataclasses.replace(d, **{k: (v(d) if callable(v) else v)
                                                  for k, v in device_changes.items()})
                        for d in base.devices)
        return Topology(base.name, devices)
    return client_topology


def run_layer2(backend) -> dict[str, Outcome]:
    return {c.id: run_check(c, backend).outcome for c in LAYER2}


def test_layer2_passes_on_cpu_with_at_least_20_checks():
    from pjrtkit.discovery import load_backend

    outcomes = run_layer2(load_backend("cpu"))
    failed = [i for i, o in outcomes.items() if o == Outcome.FAIL]
    assert not failed
    assert sum(o == Outcome.PASS for o in outcomes.values()) >= 20


def test_layer2_calls_every_hook_of_the_contract():
    # Record calls in the implementations themselves: the facade may call a hook without
    # pluggy's dispatch (hot paths), so pluggy's call monitoring would miss it.
    called: set[str] = set()

    def recording(hook):
        impl = getattr(cpu, hook, None) or getattr(builtin, hook)

        @functools.wraps(impl)
        def record(*args, **kwargs):
            called.add(hook)
            return impl(*args, **kwargs)
        return record

    backend = make_backend("recording", **{h: recording(h) for h in HOOKS})
    called.clear()
    run_layer2(backend)
    assert called >= set(HOOKS), f"hooks no layer-2 check calls: {sorted(set(HOOKS) - called)}"


_counter = itertools.count()


def _flip_float32(array, device, memory_kind):
    if array.dtype == np.float32:
        return (array.view(np.uint32) ^ np.uint32(1)).view(np.float32)
    return array


def _unimplemented_int8(array, device, memory_kind):
    if array.dtype == np.int8:
        raise Unimplemented("int8 not stored")
    return array


def _unstable_topology(options):
    from pjrtkit_cpu.topology import cpu_topology
    return cpu_topology("cpu", 1 + next(_counter) % 2)


def _make_topology_any_name(name, options):
    from pjrtkit_cpu.topology import cpu_topology
    return cpu_topology(name, 1)


def _aot_duplicate_ids(name, options):
    topology = cpu.pjrtkit_make_topology(name, options)
    if topology is None:
        return None
    d = topology.devices[0]
    return Topology(topology.name, (d, d))


def _aot_other_kind(name, options):
    topology = cpu.pjrtkit_make_topology(name, options)
    if topology is None:
        return None
    return Topology(topology.name, tuple(dataclasses.replace(d, kind="other")
                                         for d in topology.devices))


class _MutantExecutable:
    """The cpu executable with its outputs changed by ``change(inner, arguments, devices)``."""

    def __init__(self, inner, change):
        self.inner, self.change = inner, change

    def execute(self, arguments, devices):
        return self.change(self.inner, arguments, devices)


def mutant_execute(change):
    """A pjrtkit_compile that compiles as the cpu backend does but executes through ``change``."""
    def compile_hook(program, options, devices):
        compiled = cpu.pjrtkit_compile(program, options, devices)
        return dataclasses.replace(compiled,
                                   executable=_MutantExecutable(compiled.executable, change))
    return compile_hook


def _add_one_to_f32(inner, arguments, devices):
    out = inner.execute(arguments, devices)
    return [[o + np.float32(1) if o.dtype == np.float32 else o for o in outs] for outs in out]


def _add_one_to_i32_scalars(inner, arguments, devices):
    out = inner.execute(arguments, devices)
    return [[o + np.int32(1) if o.dtype == np.int32 and o.ndim == 0 else o for o in outs]
            for outs in out]


def _add_one_to_u32(inner, arguments, devices):
    out = inner.execute(arguments, devices)
    return [[o + np.uint32(1) if o.dtype == np.uint32 else o for o in outs] for outs in out]


def _reverse_outputs(inner, arguments, devices):
    return [list(reversed(list(outs))) for outs in inner.execute(arguments, devices)]


def _at_least_1d(inner, arguments, devices):
    return [[np.atleast_1d(o) for o in outs] for outs in inner.execute(arguments, devices)]


def _writes_inputs(inner, arguments, devices):
    out = inner.execute(arguments, devices)
    for args in arguments:
        for a in args:
            a[...] = 0
    return out


_first_results: dict = {}


def _remembers_first(inner, arguments, devices):
    out = inner.execute(arguments, devices)
    return _first_results.setdefault(id(inner), out)


def _wrong_on_device_1(inner, arguments, devices):
    out = inner.execute(arguments, devices)
    return [[o * 0 if devices[i].id == 1 else o for o in outs] for i, outs in enumerate(out)]


class _LazyExecutable:
    def execute(self, arguments, devices):
        raise Unimplemented("found out at execute time")


def _lazy_compile(program, options, devices):
    return CompiledProgram(executable=_LazyExecutable())


def _refusing(dtype_name: str, error):
    """The cpu compile, except that a program touching ``dtype_name`` is refused with ``error``
    (the cpu plugin itself compiles every dtype, so these backends lie about one)."""
    from pjrtkit.stablehlo.ir import walk_ops

    def compile(program, options, devices):
        if any(getattr(value.type, "dtype", None) is not None
               and value.type.dtype.name == dtype_name
               for op in walk_ops(program) for value in (*op.operands, *op.results)):
            raise error(f"this backend refuses {dtype_name}")
        return cpu.pjrtkit_compile(program, options, devices)
    return compile


def _negative_cost(program, options, devices):
    return dataclasses.replace(cpu.pjrtkit_compile(program, options, devices),
                               cost=CostEstimate(flops=-1.0))


def _plus_one(inner, arguments, devices):
    return [[np.asarray(r) + 1 for r in outs] for outs in inner.execute(arguments, devices)]


def _every_other_compile_wrong(program, options, devices):
    compiled = cpu.pjrtkit_compile(program, options, devices)
    if next(_counter) % 2:
        return dataclasses.replace(compiled,
                                   executable=_MutantExecutable(compiled.executable, _plus_one))
    return compiled


def _capabilities_with(**changes):
    def capabilities():
        return dataclasses.replace(cpu.pjrtkit_capabilities(), **changes)
    return capabilities


def _no_topologies_at_all(name, options):
    return None


def _to_host_zero_for(predicate):
    def transfer_to_host(payload, device, memory_kind):
        return np.zeros_like(payload) if predicate(device, memory_kind) else payload
    return transfer_to_host


# check id -> hook overrides that break exactly what the check is about.
MUTANTS = {
    "hooks.platform.info": dict(pjrtkit_platform=lambda: cpu.PlatformInfo(
        name="pjrtkit_mutant", version="", device_kind="cpu")),
    "hooks.platform.name": dict(pjrtkit_platform=lambda: cpu.PlatformInfo(
        name="cpu", version="1", device_kind="cpu")),
    "hooks.platform.like": dict(pjrtkit_platform=lambda: cpu.PlatformInfo(
        name="pjrtkit_mutant", version="1", device_kind="cpu", like_platform="gpu")),
    "hooks.topology.devices": dict(pjrtkit_client_topology=lambda options: Topology(
        "cpu", ({"id": 0},))),
    "hooks.topology.unique_ids": dict(pjrtkit_client_topology=topology_with(id=0)),
    "hooks.topology.process_index": dict(pjrtkit_client_topology=topology_with(process_index=1)),
    "hooks.topology.local_hardware_ids": dict(
        pjrtkit_client_topology=topology_with(local_hardware_id=0)),
    "hooks.topology.coords": dict(pjrtkit_client_topology=topology_with(
        coords=lambda d: (d.id,) * (d.id + 1))),
    "hooks.topology.device_kind": dict(pjrtkit_client_topology=topology_with(kind="")),
    "hooks.topology.memory_kinds": dict(pjrtkit_client_topology=topology_with(
        memory_spaces=(MemorySpaceSpec("device"), MemorySpaceSpec("hbm")))),
    "hooks.topology.default_memory": dict(pjrtkit_client_topology=topology_with(
        memory_spaces=(MemorySpaceSpec("device"),), default_memory_kind="pinned_host")),
    "hooks.topology.capacity": dict(pjrtkit_client_topology=topology_with(
        memory_spaces=(MemorySpaceSpec("device", 0),))),
    "hooks.topology.stable": dict(pjrtkit_client_topology=_unstable_topology),
    "hooks.make_topology.default": dict(pjrtkit_make_topology=_aot_duplicate_ids),
    "hooks.make_topology.unknown_name": dict(pjrtkit_make_topology=_make_topology_any_name),
    "hooks.make_topology.matches_client": dict(pjrtkit_make_topology=_aot_other_kind),
    "hooks.transfer.round_trip[float32]": dict(pjrtkit_transfer_to_device=_flip_float32),
    "hooks.transfer.round_trip[int8]": dict(pjrtkit_transfer_to_device=_unimplemented_int8),
    "hooks.transfer.every_memory_kind": dict(
        pjrtkit_transfer_to_host=_to_host_zero_for(lambda d, kind: kind == "pinned_host")),
    "hooks.transfer.shapes": dict(
        pjrtkit_transfer_to_host=lambda payload, device, memory_kind: np.atleast_1d(payload)),
    "hooks.transfer.every_device": dict(
        pjrtkit_client_topology=two_devices,
        pjrtkit_transfer_to_host=_to_host_zero_for(lambda d, kind: d.id == 1)),
    "hooks.copy_buffer.round_trip": dict(pjrtkit_copy_buffer=lambda payload, **kw: payload * 0),
    "hooks.copy_buffer.no_aliasing": dict(pjrtkit_copy_buffer=lambda payload, **kw: payload),
    "hooks.copy_buffer.between_devices": dict(
        pjrtkit_client_topology=two_devices,
        pjrtkit_copy_buffer=lambda payload, dst_device, **kw: payload * 0
        if dst_device.id == 1 else payload.copy()),
    "hooks.buffer_address": dict(pjrtkit_buffer_address=lambda payload, device, memory_kind: 4096),
    "hooks.memory_stats.consistent": dict(
        pjrtkit_memory_stats=lambda device, tracked: MemoryStats(bytes_in_use=-1)),
    "hooks.memory_stats.every_device": dict(
        pjrtkit_client_topology=two_devices,
        pjrtkit_memory_stats=lambda device, tracked: {"bytes": 0} if device.id == 1 else tracked),
    "hooks.compile.compiled_program": dict(pjrtkit_compile=_negative_cost),
    "hooks.execute.elementwise": dict(pjrtkit_compile=mutant_execute(_add_one_to_f32)),
    "hooks.execute.multiple_outputs": dict(pjrtkit_compile=mutant_execute(_reverse_outputs)),
    "hooks.execute.scalar_and_zero_size": dict(pjrtkit_compile=mutant_execute(_at_least_1d)),
    "hooks.execute.control_flow": dict(pjrtkit_compile=mutant_execute(_add_one_to_i32_scalars)),
    "hooks.execute.inputs_unchanged": dict(pjrtkit_compile=mutant_execute(_writes_inputs)),
    "hooks.execute.repeatable": dict(pjrtkit_compile=mutant_execute(_remembers_first)),
    "hooks.execute.every_device": dict(pjrtkit_client_topology=two_devices,
                                       pjrtkit_compile=mutant_execute(_wrong_on_device_1)),
    "hooks.compile.unsupported_op": dict(pjrtkit_compile=_lazy_compile),
    # Declares only float32 and answers INVALID_ARGUMENT, not UNIMPLEMENTED, for complex64.
    "hooks.compile.undeclared_dtype": dict(
        pjrtkit_capabilities=_capabilities_with(dtypes={"float32"}),
        pjrtkit_compile=_refusing("complex64", InvalidArgument)),
    "hooks.compile.deterministic": dict(pjrtkit_compile=_every_other_compile_wrong),
    "hooks.capabilities.record": dict(pjrtkit_capabilities=_capabilities_with(
        dtypes={"float32", "float33"})),
    # Declares float64 and refuses it at compile.
    "hooks.capabilities.declared_dtypes_compile": dict(
        pjrtkit_capabilities=_capabilities_with(dtypes={"float32", "float64"}),
        pjrtkit_compile=_refusing("float64", Unimplemented)),
    "hooks.capabilities.custom_call_targets": dict(pjrtkit_capabilities=_capabilities_with(
        custom_call_targets={"pjrtkit_conformance_no_such_target"})),
    "hooks.capabilities.features": dict(pjrtkit_make_topology=_no_topologies_at_all),
    # Per-process, yet numbers its devices with the job's process index itself.
    "hooks.multi_process.declaration": dict(
        pjrtkit_multi_process=lambda: MultiProcessSupport(("gloo",)),
        pjrtkit_client_topology=topology_with(process_index=1)),
    "hooks.jax_lowering_rules.records": dict(
        pjrtkit_jax_lowering_rules=lambda: [("eigh", "not a lowering rule")]),
    # Many devices: outputs off by one (tests/conformance/test_multidevice_checks.py breaks
    # each collective its own way).
    **{f"hooks.multidevice.{name}": dict(pjrtkit_compile=mutant_execute(_add_one_to_f32))
       for name in ("all_reduce_groups", "all_reduce_max_all_partitions",
                    "all_gather_group_order", "reduce_scatter", "all_to_all",
                    "collective_permute", "collective_broadcast")},
    "hooks.multidevice.partition_and_replica_id": dict(
        pjrtkit_compile=mutant_execute(_add_one_to_u32)),
}


def test_every_non_generated_layer2_check_has_a_mutant():
    generated = {c.id for c in LAYER2 if c.id.startswith("hooks.transfer.round_trip[")}
    missing = {c.id for c in LAYER2} - generated - set(MUTANTS)
    assert not missing, f"layer-2 checks without a backend that makes them fail: {missing}"


@pytest.mark.parametrize("check_id", sorted(MUTANTS))
def test_each_layer2_check_fails_on_a_backend_broken_its_way(check_id):
    backend = make_backend(check_id.replace(".", "_").replace("[", "_").replace("]", ""),
                           **MUTANTS[check_id])
    result = run_check(REGISTRY[check_id], backend)
    assert result.outcome == Outcome.FAIL, (result.outcome, result.detail)
    assert result.detail


# The template plugin declares six ops on float32 and int32 and no partitioned programs: the
# checks that need more report UNSUPPORTED (not FAIL), and everything it declares holds.
TEMPLATE_UNSUPPORTED = {"hooks.execute.multiple_outputs", "hooks.execute.control_flow",
                        "hooks.compile.deterministic", "hooks.buffer_address",
                        *(c.id for c in LAYER2 if c.id.startswith("hooks.multidevice."))}


def test_layer2_on_the_template_backend_fails_nothing(template_backend):
    outcomes = run_layer2(template_backend)
    failed = {i: o for i, o in outcomes.items() if o == Outcome.FAIL}
    assert not failed
    unsupported = {i for i, o in outcomes.items() if o == Outcome.UNSUPPORTED}
    assert TEMPLATE_UNSUPPORTED <= unsupported
    assert unsupported - TEMPLATE_UNSUPPORTED <= {
        f"hooks.transfer.round_trip[{d}]" for d in ("complex64", "complex128")}, unsupported


def test_ops_declared_but_unimplemented_fail(template_backend):
    import template_backend as template

    def overclaiming():
        caps = template.pjrtkit_capabilities()
        return dataclasses.replace(caps, ops=caps.ops | {"stablehlo.while", "stablehlo.compare"},
                                   dtypes=caps.dtypes | {"bool"})

    module = types.ModuleType("overclaiming_template")
    for hook in HOOKS:
        if hasattr(template, hook):
            setattr(module, hook, getattr(template, hook))
    module.pjrtkit_capabilities = hookimpl(overclaiming)
    result = run_check(REGISTRY["hooks.execute.control_flow"], Backend("overclaiming", module))
    assert result.outcome == Outcome.FAIL, (result.outcome, result.detail)
    assert "declared ops" in result.detail
