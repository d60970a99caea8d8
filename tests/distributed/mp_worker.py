"""One process of a multi-process JAX job (started by ``mp_launch.run_job``): joins the job with
``jax.distributed.initialize``, runs the named programs on the platform ``JAX_PLATFORMS`` names,
and writes what this process holds of each result to ``<out>/<case>.p<process>.npz``.

The same file runs on pjrtkit_cpu and on XLA's cpu with the same process count; the test
compares them. A case that raises writes ``<case>.p<process>.error`` with the message.
"""
from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import traceback

import numpy as np

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _local(array) -> np.ndarray:
    """This process's shards of a global array, in device id order, stacked."""
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    return np.stack([np.asarray(s.data) for s in shards])


def _mesh():
    import jax
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()), ("i",))


def _global_input(dtype, per_device=(8,), seed=0):
    """A global array over every device, axis 0 sharded: each device's block is a
    deterministic function of its global position (so XLA and pjrtkit see the same data)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh()
    n = len(jax.devices())
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    shape = (n * per_device[0], *per_device[1:])
    if dtype.kind == "b":
        data = rng.random(shape) < 0.5
    elif dtype.kind in "iu":
        data = rng.integers(1, 5, size=shape).astype(dtype)
    elif dtype.kind == "c":
        data = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    else:
        data = rng.uniform(0.5, 1.5, size=shape).astype(dtype)
    sharding = NamedSharding(mesh, P("i"))
    return jax.make_array_from_callback(shape, sharding, lambda index: data[index]), mesh


def _collectives(dtype):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    x, mesh = _global_input(dtype)
    n = len(jax.devices())
    shard_map = functools.partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    is_bool = np.dtype(dtype).kind == "b"
    out = {}
    programs = {
        "all_gather": lambda v: lax.all_gather(v, "i", tiled=True)[None],
        "all_to_all": lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True),
        "ppermute": lambda v: lax.ppermute(v, "i", [(k, (k + 1) % n) for k in range(n)]),
    }
    if not is_bool:
        programs.update({
            "psum": lambda v: lax.psum(v, "i"),
            "psum_scatter": lambda v: lax.psum_scatter(
                jnp.tile(v, n), "i", scatter_dimension=0, tiled=True),
            "psum_pair": lambda v: lax.psum((v, v * 2), "i")[1],
        })
    if not is_bool and np.dtype(dtype).kind != "c":
        # XLA's CPU backend refuses max/min all-reduces of complex numbers across processes.
        programs.update({
            "pmax": lambda v: lax.pmax(v, "i"),
            "pmin": lambda v: lax.pmin(v, "i"),
        })
    for name, body in programs.items():
        out[name] = _local(jax.jit(shard_map(body))(x))
    return out


for _dtype in ("float32", "bfloat16", "float16", "int32", "int8", "uint8", "bool", "complex64"):
    def _collectives_case(dtype=_dtype):
        import ml_dtypes  # noqa: F401 - bfloat16 by name

        return _collectives(np.dtype(dtype))
    _collectives_case.__name__ = f"collectives_{_dtype}"
    case(_collectives_case)


@case
def sharded_jit_reductions():
    """Reductions over a sharded axis in plain jit: XLA's partitioner makes the all-reduces
    (add, max, min, multiply, and, or)."""
    import jax
    import jax.numpy as jnp

    x, _ = _global_input(np.float32, (4, 3), seed=1)
    b, _ = _global_input(np.bool_, (4, 3), seed=2)
    i, _ = _global_input(np.int32, (4, 3), seed=3)
    f = jax.jit(lambda x, b, i: (jnp.sum(x, 0), jnp.max(x, 0), jnp.min(x, 0), jnp.prod(i, 0),
                                 jnp.all(b, 0), jnp.any(b, 0), x.T @ x))
    return {f"r{k}": np.asarray(v) for k, v in enumerate(f(x, b, i))}


@case
def local_data_to_global_array():
    """jax.make_array_from_process_local_data: each process gives its rows; a jit over the
    global array sees all of them."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    pid, count = jax.process_index(), jax.process_count()
    rows = jax.local_device_count() * 2
    local = (np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + 100 * pid)
    sharding = NamedSharding(_mesh(), P("i"))
    array = jax.make_array_from_process_local_data(sharding, local,
                                                   (rows * count, 3))
    total = jax.jit(lambda a: (jnp.sum(a, axis=0), a * 2))(array)
    return {"sum": np.asarray(total[0]), "doubled": _local(total[1]),
            "shape": np.array(array.shape)}


@case
def multihost_utils_functions():
    import jax
    from jax.experimental import multihost_utils

    pid = jax.process_index()
    multihost_utils.sync_global_devices("pjrtkit test barrier")
    gathered = multihost_utils.process_allgather(np.arange(4, dtype=np.int32) + 10 * pid)
    tiled = multihost_utils.process_allgather(np.full((2,), pid, np.float32), tiled=True)
    tree = {"a": np.full((3,), pid + 1, np.float32), "b": np.int32(7 * (pid + 1))}
    broadcast = multihost_utils.broadcast_one_to_all(tree)
    multihost_utils.assert_equal(np.arange(3), "equal everywhere")
    return {"gathered": np.asarray(gathered), "tiled": np.asarray(tiled),
            "broadcast_a": np.asarray(broadcast["a"]), "broadcast_b": np.asarray(broadcast["b"])}


@case
def pmap_across_processes():
    import jax
    from jax import lax

    n_local = jax.local_device_count()
    pid = jax.process_index()
    x = np.arange(n_local * 3, dtype=np.float32).reshape(n_local, 3) + pid
    f = jax.pmap(lambda v: (lax.psum(v, "i"), lax.axis_index("i"),
                            lax.all_gather(v, "i")), axis_name="i")
    total, index, gathered = f(x)
    return {"total": np.asarray(total), "index": np.asarray(index),
            "gathered": np.asarray(gathered)}


@case
def host_callbacks():
    """jax.pure_callback in a sharded jit (runs where JAX places it) and io_callback /
    debug.callback inside shard_map (on every device of every process)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback
    from jax.sharding import PartitionSpec as P

    x, mesh = _global_input(np.float32, (2,), seed=4)
    seen = []

    def host_square(v):
        return np.asarray(v) ** 2

    f = jax.jit(lambda v: jax.pure_callback(host_square, jax.ShapeDtypeStruct(v.shape, v.dtype),
                                            v) + 1)
    squared = f(x)

    def record(v):
        seen.append(np.asarray(v).copy())
        return np.asarray(v) * 3

    g = jax.jit(jax.shard_map(
        lambda v: io_callback(record, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + jnp.sum(v),
        mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    tripled = g(x)
    jax.block_until_ready(tripled)
    seen_sorted = np.sort(np.concatenate(seen)) if seen else np.zeros(0, np.float32)
    return {"squared": _local(squared), "tripled": _local(tripled),
            "seen": seen_sorted, "seen_count": np.array(len(seen))}


@case
def store_traffic():
    """A collective-heavy program (training-sized all-reduces, all-gathers, permutes), and the
    bytes the key-value store carried before and during it (pjrtkit only)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    from pjrtkit.distributed.runtime import live_runtimes

    (runtime,) = live_runtimes()
    x, mesh = _global_input(np.float32, (256, 256), seed=5)  # 256 KiB per device
    n = len(jax.devices())
    step = jax.jit(jax.shard_map(
        lambda v: lax.psum(v, "i") * 0.5 + lax.ppermute(v, "i", [(k, (k + 1) % n)
                                                                 for k in range(n)])
        + jnp.mean(lax.all_gather(v, "i"), axis=0),
        mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    jax.block_until_ready(step(x))  # the engine's communicators are made here
    before = runtime.root_store.traffic.total_bytes
    for _ in range(20):
        x = step(x)
    jax.block_until_ready(x)
    after = runtime.root_store.traffic.total_bytes
    moved = 20 * 3 * x.nbytes  # at least: every step moves each operand to every process
    return {"before": np.array(before), "during": np.array(after - before),
            "array_bytes_moved": np.array(moved)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", required=True)
    args = parser.parse_args()
    import jax

    jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, heartbeat_timeout_seconds=60,
                               shutdown_timeout_seconds=30, initialization_timeout=120)
    out = pathlib.Path(args.out)
    info = {"devices": [[d.id, d.process_index] for d in jax.devices()],
            "local": [d.id for d in jax.local_devices()], "process_index": jax.process_index(),
            "platform": jax.devices()[0].platform}
    (out / f"devices.p{args.process_id}.json").write_text(json.dumps(info))
    for name in args.cases.split(","):
        try:
            result = CASES[name]()
            np.savez(out / f"{name}.p{args.process_id}.npz", **result)
        except Exception:  # noqa: BLE001 - recorded for the test to report
            (out / f"{name}.p{args.process_id}.error").write_text(traceback.format_exc())
    return 0


if __name__ == "__main__":
    sys.exit(main())
