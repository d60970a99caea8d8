"""The seam between the in-process rendezvous and the engine, with a real engine: two
"processes" (threads of this one, each with its own runtime and gloo communicators over one
in-memory store) run a 4-device program, 2 devices each, through ``ProcessExchange``; every
device's result must equal the same program run as one launch of 4 devices in one process.
This covers collective_broadcast across processes, which JAX's cpu lowering never emits."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from pjrtkit.collectives.launch import launch_on_threads
from pjrtkit.distributed.exchange import ProcessExchange
from pjrtkit.distributed.placement import Placement
from pjrtkit.distributed.runtime import ProcessRuntime
from pjrtkit.distributed.store import InMemoryStore
from pjrtkit.errors import Internal
from pjrtkit.lowering.plan import build_plan
from pjrtkit.reference import REFERENCE
from pjrtkit.stablehlo.loader import load_program
from pjrtkit.types import MultiProcessSupport

pytest.importorskip("torch", reason="the gloo engine needs torch (pip install 'pjrtkit[gloo]')")

PROGRAMS = {
    "collective_broadcast": """
    func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "stablehlo.collective_broadcast"(%x) {
        replica_groups = dense<[[2, 0], [1, 3]]> : tensor<2x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>
      } : (tensor<3xf32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }""",
    "all_reduce_custom_body_then_permute": """
    func.func public @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %0 = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %m = stablehlo.maximum %a, %b : tensor<f32>
        %s = stablehlo.add %m, %a : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>,
          use_global_device_ids} : (tensor<3xf32>) -> tensor<3xf32>
      %1 = "stablehlo.collective_permute"(%0) {
        source_target_pairs = dense<[[0, 3], [3, 1], [1, 2]]> : tensor<3x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>
      } : (tensor<3xf32>) -> tensor<3xf32>
      return %0, %1 : tensor<3xf32>, tensor<3xf32>
    }""",
}


def _inputs():
    return [np.arange(3, dtype=np.float32) * (p + 1) - p for p in range(4)]


def _one_process(plan):
    inputs = _inputs()
    return launch_on_threads("one", 1, 4, lambda p: plan(inputs[p]),
                             lambda exc: Internal(str(exc)))


def _two_processes(plan, monkeypatch):
    monkeypatch.setenv("PJRTKIT_COLLECTIVES", "gloo")
    monkeypatch.setenv("PJRTKIT_DISTRIBUTED_TIMEOUT_S", "60")
    store, inputs = InMemoryStore(), _inputs()
    results, errors = {}, {}

    def process(node):
        try:
            runtime = ProcessRuntime("pjrtkit_seam", Placement(node, 2), store,
                                     MultiProcessSupport(("gloo",)))
            remote = ProcessExchange(runtime, [0, 1, 2, 3], [0, 0, 1, 1])
            positions = [2 * node, 2 * node + 1]
            out = launch_on_threads(f"p{node}", 1, 4, lambda p: plan(inputs[p]),
                                    lambda exc: Internal(str(exc)), positions=positions,
                                    remote=remote)
            results.update(zip(positions, out))
            runtime.close()
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors[node] = exc

    threads = [threading.Thread(target=process, args=(n,), daemon=True) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return [results[p] for p in range(4)], store


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_across_processes_equals_one_process(name, monkeypatch):
    plan = build_plan(load_program(PROGRAMS[name], num_partitions=4, num_replicas=1), REFERENCE)
    expected = _one_process(plan)
    results, store = _two_processes(plan, monkeypatch)
    for position, (ours, theirs) in enumerate(zip(results, expected)):
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}, device {position}")
    # gloo's rendezvous only: each rank's addresses, no operands.
    assert store.traffic.bytes_put < 4096
