"""Layer 2, many devices: per-device programs with collectives, compiled by the backend and run
as the core runs a launch (``pjrtkit.collectives.launch.launch_on_threads``: a thread per
device, the core's rendezvous), each device's outputs compared with StableHLO's semantics
computed here in NumPy from every device's inputs.

A backend that does not declare the ``partitioned_programs`` feature, or leaves a collective
out of its declared ops, is UNSUPPORTED. The launch has 4 devices; its positions run on the
client's devices, cycling when the client has fewer (positions, not device placement, decide
a collective's groups).

Split from ``hooks_checks``; the runner imports every ``hooks_checks*`` module of the layer.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import PjrtError
from pjrtkit.conformance.checks import Failed, Unsupported, check
from pjrtkit.conformance.hooks_support import (LAYER, as_host, client_topology,
                                                       expect_result, is_unimplemented)
from pjrtkit.types import CompileOptions

DEVICES = 4
CHANNEL = "channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>"


def _inputs(position: int) -> np.ndarray:
    """Device ``position``'s operand: 4x2 float32, distinct on every device."""
    return (np.arange(8, dtype=np.float32).reshape(4, 2) * (position + 1)
            - np.float32(3 * position))


def _run(backend, text: str, ops: tuple[str, ...]) -> list[list[np.ndarray]]:
    """Compile ``text`` for 4 partitions and run it on 4 threads; every device's outputs."""
    from pjrtkit.collectives.launch import launch_on_threads
    from pjrtkit.stablehlo.loader import load_program

    caps = backend.capabilities()
    if "partitioned_programs" not in caps.features:
        raise Unsupported("partitioned_programs", "not declared in pjrtkit_capabilities")
    missing = sorted(set(ops) - caps.ops) if caps.ops is not None else []
    if missing:
        raise Unsupported(", ".join(missing), "not declared in pjrtkit_capabilities")
    topology = client_topology(backend).devices
    specs = [topology[i % len(topology)] for i in range(DEVICES)]
    options = CompileOptions(num_replicas=1, num_partitions=DEVICES,
                             device_assignment=(tuple(d.id for d in specs),),
                             use_spmd_partitioning=True)
    try:
        compiled = backend.compile(program=load_program(text, num_partitions=DEVICES,
                                                        num_replicas=1),
                                   options=options, devices=tuple(specs))
    except PjrtError as exc:
        if is_unimplemented(exc):
            raise Failed(f"a program of declared ops {list(ops)} compiles for {DEVICES} "
                         f"partitions", expected="an executable",
                         actual=f"UNIMPLEMENTED: {exc}"[:300]) from exc
        raise
    payloads = [backend.transfer_to_device(array=_inputs(p), device=specs[p],
                                           memory_kind=specs[p].default_memory_kind)
                for p in range(DEVICES)]

    def run_device(position: int) -> list:
        out = compiled.executable.execute([[payloads[position]]], [specs[position]])
        return [as_host(backend, o, specs[position], specs[position].default_memory_kind)
                for o in out[0]]

    def error_of(exc: Exception) -> PjrtError:
        if isinstance(exc, PjrtError):
            return exc
        return Failed(f"every device of a {DEVICES}-device launch runs its program",
                      expected="outputs", actual=f"{type(exc).__name__}: {exc}"[:300])

    try:
        return launch_on_threads("conformance", 1, DEVICES, run_device, error_of)
    except Failed:
        raise
    except PjrtError as exc:
        raise Failed(f"every device of a {DEVICES}-device launch runs its program",
                     expected="outputs", actual=f"{exc.code.name}: {exc}"[:300]) from exc


def _expect_per_device(outputs, expected_of, what: str) -> str:
    for position, outs in enumerate(outputs):
        expected = expected_of(position)
        for k, (got, want) in enumerate(zip(outs, expected)):
            expect_result(got, want, f"{what}, device {position} output {k}")
    return f"{DEVICES} devices agree with StableHLO's semantics"


def _program(body: str, result: str = "tensor<4x2xf32>") -> str:
    return (f"func.func public @main(%x: tensor<4x2xf32>) -> {result} {{\n{body}\n"
            f"  return %0 : {result}\n}}")


ALL = [_inputs(p) for p in range(DEVICES)]


@check("hooks.multidevice.all_reduce_groups", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def all_reduce_groups(backend):
    """all_reduce (add) over groups [[0, 2], [1, 3]] with global device ids: each device gets
    its group's sum"""
    text = _program(f"""
  %0 = "stablehlo.all_reduce"(%x) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, {CHANNEL},
      use_global_device_ids}} : (tensor<4x2xf32>) -> tensor<4x2xf32>""")
    outputs = _run(backend, text, ("stablehlo.all_reduce",))
    return _expect_per_device(outputs, lambda p: [ALL[p % 2] + ALL[p % 2 + 2]],
                              "all_reduce add")


@check("hooks.multidevice.all_reduce_max_all_partitions", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def all_reduce_max_all_partitions(backend):
    """all_reduce (maximum) with a channel and replica groups [[0]]: cross_replica_and_partition
    takes every partition of replica 0, so every device gets the maximum over all four"""
    text = _program(f"""
  %0 = "stablehlo.all_reduce"(%x) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.maximum %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{replica_groups = dense<[[0]]> : tensor<1x1xi64>, {CHANNEL}}}
      : (tensor<4x2xf32>) -> tensor<4x2xf32>""")
    outputs = _run(backend, text, ("stablehlo.all_reduce",))
    return _expect_per_device(outputs, lambda p: [np.max(ALL, axis=0)], "all_reduce maximum")


@check("hooks.multidevice.all_gather_group_order", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def all_gather_group_order(backend):
    """all_gather along dimension 1 over the group [3, 2, 1, 0]: operands concatenated in
    group order, not device order"""
    text = _program(f"""
  %0 = "stablehlo.all_gather"(%x) {{all_gather_dim = 1 : i64,
      replica_groups = dense<[[3, 2, 1, 0]]> : tensor<1x4xi64>, {CHANNEL},
      use_global_device_ids}} : (tensor<4x2xf32>) -> tensor<4x8xf32>""", "tensor<4x8xf32>")
    outputs = _run(backend, text, ("stablehlo.all_gather",))
    gathered = np.concatenate([ALL[3], ALL[2], ALL[1], ALL[0]], axis=1)
    return _expect_per_device(outputs, lambda p: [gathered], "all_gather")


@check("hooks.multidevice.reduce_scatter", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def reduce_scatter(backend):
    """reduce_scatter (add) along dimension 0 over all four: device i gets row i of the sum"""
    text = _program(f"""
  %0 = "stablehlo.reduce_scatter"(%x) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{scatter_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>,
      {CHANNEL}, use_global_device_ids}} : (tensor<4x2xf32>) -> tensor<1x2xf32>""",
                    "tensor<1x2xf32>")
    outputs = _run(backend, text, ("stablehlo.reduce_scatter",))
    total = np.sum(ALL, axis=0, dtype=np.float32)
    return _expect_per_device(outputs, lambda p: [total[p:p + 1]], "reduce_scatter")


@check("hooks.multidevice.all_to_all", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def all_to_all(backend):
    """all_to_all splitting dimension 0 in 2 and concatenating along 1 within partitions
    [[0, 1], [2, 3]]: device j of a group gets block j of each member, in group order"""
    text = _program(f"""
  %0 = "stablehlo.all_to_all"(%x) {{split_dimension = 0 : i64, concat_dimension = 1 : i64,
      split_count = 2 : i64, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>,
      {CHANNEL}}} : (tensor<4x2xf32>) -> tensor<2x4xf32>""", "tensor<2x4xf32>")
    outputs = _run(backend, text, ("stablehlo.all_to_all",))

    def expected(p):
        group, index = (0, 1) if p < 2 else (2, 3), p % 2
        return [np.concatenate([ALL[m][2 * index:2 * index + 2] for m in group], axis=1)]

    return _expect_per_device(outputs, expected, "all_to_all")


@check("hooks.multidevice.collective_permute", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def collective_permute(backend):
    """collective_permute along pairs 0->1, 1->2, 2->0 (partition ids): device 3, which no
    pair targets, gets zeros"""
    text = _program(f"""
  %0 = "stablehlo.collective_permute"(%x) {{
      source_target_pairs = dense<[[0, 1], [1, 2], [2, 0]]> : tensor<3x2xi64>, {CHANNEL}}}
      : (tensor<4x2xf32>) -> tensor<4x2xf32>""")
    outputs = _run(backend, text, ("stablehlo.collective_permute",))
    source = {1: 0, 2: 1, 0: 2}
    return _expect_per_device(
        outputs, lambda p: [ALL[source[p]] if p in source else np.zeros((4, 2), np.float32)],
        "collective_permute")


@check("hooks.multidevice.collective_broadcast", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def collective_broadcast(backend):
    """collective_broadcast over partitions [[2, 0], [1, 3]]: each device gets the operand of
    its group's first member"""
    text = _program(f"""
  %0 = "stablehlo.collective_broadcast"(%x) {{
      replica_groups = dense<[[2, 0], [1, 3]]> : tensor<2x2xi64>, {CHANNEL}}}
      : (tensor<4x2xf32>) -> tensor<4x2xf32>""")
    outputs = _run(backend, text, ("stablehlo.collective_broadcast",))
    first = {0: 2, 2: 2, 1: 1, 3: 1}
    return _expect_per_device(outputs, lambda p: [ALL[first[p]]], "collective_broadcast")


@check("hooks.multidevice.partition_and_replica_id", layer=LAYER, mandatory=False,
       capability="partitioned_programs")
def partition_and_replica_id(backend):
    """partition_id is each device's position in the launch; replica_id is 0 (one replica)"""
    text = """func.func public @main(%x: tensor<4x2xf32>) -> (tensor<ui32>, tensor<ui32>) {
  %0 = stablehlo.partition_id : tensor<ui32>
  %1 = stablehlo.replica_id : tensor<ui32>
  return %0, %1 : tensor<ui32>, tensor<ui32>
}"""
    outputs = _run(backend, text, ("stablehlo.partition_id", "stablehlo.replica_id"))
    return _expect_per_device(outputs, lambda p: [np.array(p, np.uint32),
                                                  np.array(0, np.uint32)], "device ids")
