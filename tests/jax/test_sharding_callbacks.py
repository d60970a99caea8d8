"""Callbacks that XLA's SPMD partitioner makes into the user's Python (inspect_array_sharding,
which visualize_array_sharding inside jit is too, custom_partitioning) and callbacks run per shard
(``partitioned=True``), on pjrtkit_cpu with 4 devices against XLA's CPU backend with 4 devices
in the same interpreter; and eager ``jax.debug.*`` with pjrtkit_cpu alone (no JAX cpu).

Programs whose partitioning calls Python are partitioned in the user's process (the callbacks'
keys name objects of that process); every other program still goes to the parser's child."""
from __future__ import annotations

import pytest

from pjrtkit.stablehlo.partition import calls_python_while_partitioning

FOUR_DEVICES = dict(JAX_PLATFORMS="pjrtkit_cpu,cpu", PJRTKIT_CPU_DEVICES="4",
                    XLA_FLAGS="--xla_force_host_platform_device_count=4")

SCENARIO = """
import io, contextlib, json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental.custom_partitioning import custom_partitioning

def scenario(platform):
    devices = np.array(jax.devices(platform)[:4]).reshape(2, 2)
    mesh = Mesh(devices, ("x", "y"))
    x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4),
                       NamedSharding(mesh, P("x", "y")))
    seen = []

    @jax.jit
    def inspected(v):
        jax.debug.inspect_array_sharding(v * 2, callback=lambda s: seen.append(str(s.spec)))
        return v + 1

    first = np.asarray(inspected(x))

    @custom_partitioning
    def row_sums(v):
        return jnp.sum(v, axis=1, keepdims=True) * jnp.ones_like(v)

    partitioned_with = []

    def partition(mesh, arg_shapes, result_shape):
        sharding = arg_shapes[0].sharding
        partitioned_with.append(str(sharding.spec))
        rows = NamedSharding(mesh, P(sharding.spec[0], None))
        def lower(v):
            return jnp.sum(v, axis=1, keepdims=True) * jnp.ones_like(v)
        return mesh, lower, rows, (rows,)

    def infer(mesh, arg_shapes, result_shape):
        return NamedSharding(mesh, P(arg_shapes[0].sharding.spec[0], None))

    row_sums.def_partition(partition=partition, infer_sharding_from_operands=infer,
                           sharding_rule="i j -> i j")
    second = np.asarray(jax.jit(row_sums)(x))

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        @jax.jit
        def per_shard(v):
            jax.debug.print("shard {v}", v=v, partitioned=True)
            # (visualize_array_sharding in jit is inspect_array_sharding with a callback that
            # draws the sharding with `rich`, which this environment does not install)
            return v
        per_shard(x)
        jax.effects_barrier()
    shards = sorted(printed.getvalue().replace("\\n ", " ").splitlines())
    return dict(first=first.tolist(), seen=seen, second=second.tolist(),
                partitioned_with=partitioned_with, shards=shards)

ours, theirs = scenario("pjrtkit_cpu"), scenario("cpu")
print(json.dumps(dict(ours=ours, theirs=theirs)))
"""


def test_partitioner_callbacks_run_in_this_process_as_on_xla_cpu(run_python):
    import json

    result = run_python(SCENARIO, **FOUR_DEVICES)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    ours, theirs = outcome["ours"], outcome["theirs"]
    assert ours["seen"] == theirs["seen"] and ours["seen"], ours["seen"]  # inspect_array_sharding
    assert ours["partitioned_with"] and ours["partitioned_with"] == theirs["partitioned_with"]
    assert ours["first"] == theirs["first"] and ours["second"] == theirs["second"]
    assert len(ours["shards"]) == 4 and ours["shards"] == theirs["shards"]  # one per device


def test_only_programs_that_call_python_while_partitioning_stay_in_this_process():
    assert calls_python_while_partitioning(b'... stablehlo.custom_call @InspectSharding(%0) ...')
    assert calls_python_while_partitioning(b"\x00CustomSPMDPartitioning\x00")
    assert not calls_python_while_partitioning(b"stablehlo.custom_call @Sharding(%0)")


@pytest.mark.parametrize("devices", ["1", "2"])
def test_eager_debug_callbacks_with_pjrtkit_cpu_alone(run_python, devices):
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        jax.devices()  # JAX's backends start (README: host callbacks)
        jax.debug.print("x: {}", 2)
        jax.debug.callback(lambda v: print("cb", np.asarray(v).tolist(),
                                           sorted(d.platform for d in v.devices())),
                           jnp.arange(3))
        if len(jax.devices()) > 1:
            mesh = jax.make_mesh((2,), ("x",))
            arr = jax.device_put(np.arange(8), NamedSharding(mesh, P("x")))
            with jax.set_mesh(mesh):
                jax.debug.print("sum: {x}", x=arr.sum(), partitioned=True)
        jax.effects_barrier()
    """, JAX_PLATFORMS="pjrtkit_cpu", PJRTKIT_CPU_DEVICES=devices)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[:2] == ["x: 2", "cb [0, 1, 2] ['pjrtkit_cpu']"]
    assert lines[2:] == (["sum: 28"] if devices == "2" else [])
