"""The core's collectives service: StableHLO process groups, the launch rendezvous (order,
release on failure, devices that disagree) and the reference's collective rules run on several
threads as a launch runs them, including collective_broadcast, which JAX's cpu lowering never
emits (tests/jax/test_many_devices.py covers the rest end to end against XLA)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pjrtkit.collectives import groups as G
from pjrtkit.collectives.launch import Launch, LaunchAborted, running_as
from pjrtkit.errors import Internal
from pjrtkit.lowering.plan import build_plan
from pjrtkit.reference import REFERENCE
from pjrtkit.stablehlo.loader import load_program


# -- process groups (StableHLO spec, "Collective ops": process groups) ------------------------

def test_cross_replica_groups_repeat_per_partition():
    # 2 replicas x 2 partitions; position = replica * 2 + partition
    assert G.process_groups(G.CROSS_REPLICA, [[0, 1]], 2, 2) == [(0, 2), (1, 3)]


def test_cross_partition_groups_repeat_per_replica():
    assert G.process_groups(G.CROSS_PARTITION, [[1, 0]], 2, 2) == [(1, 0), (3, 2)]


def test_cross_replica_and_partition_takes_every_partition_of_the_replicas():
    assert G.process_groups(G.CROSS_REPLICA_AND_PARTITION, [[0], [1]], 2, 2) == [(0, 1), (2, 3)]


def test_flattened_ids_are_positions_and_empty_groups_mean_everyone():
    assert G.process_groups(G.FLATTENED_IDS, [[3, 0], [1, 2]], 1, 4) == [(3, 0), (1, 2)]
    assert G.process_groups(G.CROSS_PARTITION, [], 1, 3) == [(0, 1, 2)]


def test_a_group_naming_a_device_the_program_does_not_have_is_invalid():
    with pytest.raises(Exception, match="runs on 4 device"):
        G.process_groups(G.FLATTENED_IDS, [[0, 4]], 1, 4)


# -- the rendezvous ------------------------------------------------------------------------------

def _run_devices(launch, count, body):
    results, errors = [None] * count, [None] * count

    def main(position):
        try:
            with running_as(launch.device(position)) as device:
                results[position] = body(device)
            launch.finished(position)
        except LaunchAborted as exc:
            errors[position] = exc.error
        except Exception as exc:  # noqa: BLE001 - recorded for the test to inspect
            errors[position] = exc
            launch.fail(Internal(str(exc)))

    threads = [threading.Thread(target=main, args=(p,), daemon=True) for p in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a device thread is still waiting"
    return results, errors


def test_exchange_returns_every_members_payload_in_group_order():
    launch = Launch("t", 1, 4)
    results, errors = _run_devices(launch, 4, lambda d: [
        d.exchange((3, 1, 0, 2), d.position * 10), d.exchange((0, 1, 2, 3), -d.position)])
    assert errors == [None] * 4
    assert results == [[[30, 10, 0, 20], [0, -1, -2, -3]]] * 4


def test_a_failing_device_releases_the_others_at_the_rendezvous():
    launch = Launch("t", 1, 4)

    def body(device):
        if device.position == 2:
            time.sleep(0.3)
            raise ValueError("kernel failed on device 2")
        return device.exchange((0, 1, 2, 3), device.position)

    start = time.monotonic()
    results, errors = _run_devices(launch, 4, body)
    assert time.monotonic() - start < 5
    assert all("kernel failed on device 2" in str(e) for e in errors), errors


def test_a_device_that_ends_without_joining_a_collective_fails_the_launch():
    launch = Launch("t", 1, 2)

    def body(device):
        if device.position == 1:
            return None  # runs no collective
        return device.exchange((0, 1), "x")

    results, errors = _run_devices(launch, 2, body)
    assert isinstance(errors[0], Internal) and "finished without joining" in str(errors[0])


# -- the reference rules on several threads ------------------------------------------------------

def _launch_program(text, num_partitions, arguments):
    plan = build_plan(load_program(text, num_partitions=num_partitions, num_replicas=1),
                      REFERENCE)
    launch = Launch("t", 1, num_partitions)
    results, errors = _run_devices(launch, num_partitions,
                                   lambda d: plan(*arguments[d.position]))
    assert errors == [None] * num_partitions, errors
    return results


def test_collective_broadcast_sends_the_first_members_operand_to_its_group():
    text = """
    func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "stablehlo.collective_broadcast"(%x) {
        replica_groups = dense<[[2, 0], [1, 3]]> : tensor<2x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>
      } : (tensor<3xf32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }"""
    inputs = [np.full(3, p, np.float32) + np.arange(3, dtype=np.float32) for p in range(4)]
    results = _launch_program(text, 4, [[x] for x in inputs])
    first_of = {0: 2, 2: 2, 1: 1, 3: 1}
    for position, (out,) in enumerate(results):
        np.testing.assert_array_equal(out, inputs[first_of[position]])
        assert out is not inputs[first_of[position]]  # never another device's array


def test_all_reduce_with_a_custom_body_and_partition_ids():
    # a body that is no single ufunc: max(a, b) + 0 * a, plus each device's partition id
    text = """
    func.func public @main(%x: tensor<2xi32>) -> (tensor<2xi32>, tensor<ui32>) {
      %0 = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %m = stablehlo.maximum %a, %b : tensor<i32>
        %z = stablehlo.subtract %a, %a : tensor<i32>
        %s = stablehlo.add %m, %z : tensor<i32>
        stablehlo.return %s : tensor<i32>
      }) {replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>,
          use_global_device_ids} : (tensor<2xi32>) -> tensor<2xi32>
      %1 = stablehlo.partition_id : tensor<ui32>
      return %0, %1 : tensor<2xi32>, tensor<ui32>
    }"""
    inputs = [np.array([p, -p], np.int32) for p in range(3)]
    results = _launch_program(text, 3, [[x] for x in inputs])
    expected = np.max(np.stack(inputs), axis=0)
    for position, (reduced, pid) in enumerate(results):
        np.testing.assert_array_equal(reduced, expected)
        assert int(pid) == position


# -- replica groups given as mesh axes (JAX 0.11 and later write them for shard_map) ------------

MESH_AXES_ALL_GATHER = """
module @m attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["a"=2, "b"=4]{device_ids}>
  func.func public @main(%x: tensor<1xi32> {{mhlo.sharding = "{{manual}}"}})
      -> (tensor<{members}xi32> {{mhlo.sharding = "{{manual}}"}}) {{
    %0 = "stablehlo.all_gather"(%x) <{{all_gather_dim = 0 : i64,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
        replica_groups = #stablehlo.replica_group_mesh_axes<mesh = {mesh}, axes = [{axes}]>,
        use_global_device_ids}}> : (tensor<1xi32>) -> tensor<{members}xi32>
    return %0 : tensor<{members}xi32>
  }}
}}"""

INLINE_MESH = '#stablehlo.mesh<axes = [<name = "a", size = 2>, <name = "b", size = 4>]>'


def _axis(name, sub=None):
    return (f'#stablehlo.axis_ref<name = "{name}">' if sub is None else
            f'#stablehlo.axis_ref<name = "{name}", sub_axis_info = ({sub[0]}){sub[1]}>')


FULL_AXES = [([_axis("b")], 4), ([_axis("b"), _axis("a")], 8)]  # the second out of mesh order
SUB_AXES = [([_axis("b", (2, 2)), _axis("a")], 4),            # the minor half of b
            ([_axis("b", (1, 2)), _axis("a")], 4),            # the major half of b
            ([_axis("b", (2, 2)), _axis("b", (1, 2))], 4)]    # both halves, minor one first


# Inline meshes only with whole axes: jaxlib 0.11 and 0.12 drop the sub-axis info of an
# inline mesh when converting to HLO (the verifier then refuses the program, or XLA aborts on
# a repeated axis), so XLA gives no answer to compare with there.
@pytest.mark.parametrize("mesh, axes, members", [
    *((mesh, axes, members) for mesh in ("symbol", "symbol with device ids")
      for axes, members in FULL_AXES + SUB_AXES),
    *(("inline", axes, members) for axes, members in FULL_AXES)])
def test_mesh_axes_groups_gather_what_xla_cpu_gathers(mesh, axes, members):
    from pjrtkit import jax_compat

    device_ids = ", device_ids=[3, 1, 7, 5, 0, 2, 4, 6]" if "ids" in mesh else ""
    text = MESH_AXES_ALL_GATHER.format(
        device_ids=device_ids, members=members, axes=", ".join(axes),
        mesh="@mesh" if mesh != "inline" else INLINE_MESH)
    inputs = [[np.array([100 + p], np.int32)] for p in range(8)]
    expected = jax_compat.run_per_device_program(
        jax_compat.serialize_portable_artifact(text), inputs)
    ours = _launch_program(text, 8, inputs)
    for position in range(8):
        np.testing.assert_array_equal(ours[position][0], expected[position][0],
                                      err_msg=f"device {position}")


def test_mesh_axes_naming_an_axis_the_mesh_lacks_is_invalid():
    text = MESH_AXES_ALL_GATHER.format(device_ids="", members=4, axes=_axis("c"), mesh="@mesh")
    with pytest.raises(Exception, match="axis 'c'"):
        build_plan(load_program(text, num_partitions=8, num_replicas=1), REFERENCE)


def test_a_launch_shortens_the_gil_switch_interval_and_gives_the_callers_back():
    """Device threads meet at every collective; CPython's default 5 ms switch interval would
    keep a released device waiting for the GIL. During a launch (two at once here) the
    interval is at most SHORT_SWITCH_INTERVAL_S; after the last one it is the caller's."""
    import sys

    from pjrtkit.collectives import launch as L
    from pjrtkit.switch_interval import SHORT_SWITCH_INTERVAL_S

    seen = []

    def run_device(position):
        seen.append(sys.getswitchinterval())
        time.sleep(0.05)
        return position

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    try:
        outer = threading.Thread(target=L.launch_on_threads,
                                 args=("a", 1, 2, run_device, lambda exc: Internal(str(exc))))
        outer.start()
        assert L.launch_on_threads("b", 2, 1, run_device, lambda exc: Internal(str(exc))) \
            == [0, 1]
        outer.join()
        assert len(seen) == 4 and max(seen) <= SHORT_SWITCH_INTERVAL_S, seen
        assert sys.getswitchinterval() == pytest.approx(0.004)
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize("ufunc, dtype, from_zero", [
    (np.add, np.float32, True), (np.maximum, np.float32, False),
    (np.multiply, np.float64, False), (np.add, np.int32, False), (np.minimum, np.int8, False)])
def test_a_fold_in_pieces_is_the_whole_fold_bit_for_bit(ufunc, dtype, from_zero):
    from pjrtkit.reference import collectives

    rng = np.random.default_rng(0)
    size = 3 * collectives.FOLD_PIECE + 123  # pieces and a ragged end
    values = []
    for _ in range(4):
        if np.dtype(dtype).kind == "f":
            v = rng.standard_normal(size).astype(dtype)
            v[:50] = -0.0  # every member -0 there: the sum from +0 gives +0
            v[50:60] = np.nan
        else:
            v = rng.integers(-100, 100, size).astype(dtype)
        values.append(v.reshape(-1, 1))
    combiner = collectives._Combiner(ufunc, np.dtype(dtype), from_zero=from_zero)
    whole = np.array(values[0], copy=True)
    if from_zero:
        np.add(whole, np.dtype(dtype).type(0), out=whole)
    for v in values[1:]:
        ufunc(whole, v, out=whole)
    pieces = collectives._fold(values, combiner, np.dtype(dtype))
    assert pieces.shape == whole.shape and pieces.dtype == whole.dtype
    assert pieces.tobytes() == whole.tobytes()
    if from_zero:
        assert not np.signbit(pieces[:50]).any()


# -- lockstep launches: the order of steps and the runs of collectives -----------------------

def _steps(*rows):
    """Plan steps (kernel, operand slots, result slots, op) from (op name, ins, outs)."""
    from types import SimpleNamespace

    return [(None, tuple(ins), tuple(outs), SimpleNamespace(name=name, operands=()))
            for name, ins, outs in rows]


def test_collectives_late_gathers_every_gradients_all_reduce_into_one_phase():
    from pjrtkit.collectives.lockstep import collectives_late

    # Two gradients, each all-reduced right after it is computed (as JAX places them), and
    # each update reading its all-reduced gradient.
    steps = _steps(("stablehlo.dot_general", (0, 1), (10,)),      # 0: gradient of w
                   ("stablehlo.all_reduce", (10,), (11,)),        # 1
                   ("stablehlo.subtract", (0, 11), (12,)),        # 2: w's update
                   ("stablehlo.dot_general", (1, 2), (13,)),      # 3: gradient of v
                   ("stablehlo.all_reduce", (13,), (14,)),        # 4
                   ("stablehlo.subtract", (2, 14), (15,)))        # 5: v's update
    assert collectives_late(steps) == [0, 3, 1, 4, 2, 5]


def test_collectives_late_keeps_effects_in_program_order():
    from pjrtkit.collectives.lockstep import collectives_late

    steps = _steps(("stablehlo.all_reduce", (0,), (1,)),
                   ("stablehlo.custom_call", (1,), (2,)),         # prints the all-reduced x
                   ("stablehlo.custom_call", (0,), (3,)),         # then prints x itself
                   ("stablehlo.add", (0, 0), (4,)))
    order = collectives_late(steps)
    assert order.index(1) < order.index(2)  # the second callback does not overtake the first
    assert order[0] == 3  # a pure step that reads no collective goes first


def test_a_collective_that_reads_another_starts_a_run_of_its_own():
    from pjrtkit.collectives.lockstep import LockstepProgram, collectives_late

    plan_steps = _steps(("stablehlo.all_reduce", (0,), (1,)),
                        ("stablehlo.all_reduce", (2,), (3,)),
                        ("stablehlo.all_gather", (1,), (4,)))     # reads the first's result
    order = collectives_late(plan_steps)
    assert order == [0, 1, 2]
    steps = [(k, ins, outs, (), True, op) for k, ins, outs, op in plan_steps]
    program = LockstepProgram(None, steps, (4,))
    assert [(kind, [s[5].name for s in run]) for kind, run in program.segments] == [
        ("collectives", ["stablehlo.all_reduce", "stablehlo.all_reduce"]),
        ("collectives", ["stablehlo.all_gather"])]
