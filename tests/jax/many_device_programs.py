"""Programs over N devices on pjrtkit_cpu and on XLA's CPU backend in the same process, compared.

Run as ``python many_device_programs.py N`` (tests/jax/test_many_devices.py runs one process per
N: JAX fixes its device count at start-up). It sets ``PJRTKIT_CPU_DEVICES=N`` and
``--xla_force_host_platform_device_count=N`` before importing JAX, runs every program in
PROGRAMS on the first N devices of each backend, and prints one JSON line per program:
``{"name", "outcome"}`` with outcome "ok" or what differed. Each output must match XLA's result
(per-dtype tolerances), be in XLA's memory kind and be sharded as XLA shards it, every device
holding only its shard; a program XLA refuses must be refused as REFUSED_AS_ON_XLA says.
OWN_CHECKS are pjrtkit-only checks (per-device memory statistics, which XLA's CPU lacks).
"""
from __future__ import annotations

import json
import os
import sys
import traceback

N = int(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 4
if __name__ == "__main__":
    os.environ["PJRTKIT_CPU_DEVICES"] = str(N)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={N}")
    os.environ["JAX_PLATFORMS"] = "pjrtkit_cpu,cpu"

import numpy as np  # noqa: E402

PROGRAMS = {}


def program(name):
    def register(fn):
        PROGRAMS[name] = fn
        return fn
    return register


def _mesh(devices, shape, names):
    import jax

    return jax.sharding.Mesh(np.array(devices).reshape(shape), names)


def _put(x, mesh, *spec):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))


def _data(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _two_axes(n):
    return (2, n // 2) if n >= 2 else (1, 1)


# -- sharded jit: mesh x PartitionSpec combinations (uneven shapes among them) -----------------

@program("jit-1d-rows-elementwise")
def _(devices):
    import jax
    import jax.numpy as jnp

    mesh = _mesh(devices, (len(devices),), ("x",))
    x = _put(_data(8 * len(devices), 3), mesh, "x")
    return jax.jit(lambda a: jnp.tanh(a) * 2 + 1)(x)


@program("jit-1d-uneven-rows-max")
def _(devices):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, (len(devices),), ("x",))
    x = _put(_data(4 * len(devices), 5, seed=1), mesh, "x")

    def f(a):
        # 4N - 3 rows over N devices: uneven from N = 2 on (JAX refuses uneven arguments, not
        # uneven values inside a program).
        a = jax.lax.with_sharding_constraint(a[3:] * 1.5, NamedSharding(mesh, P("x")))
        return jnp.max(a, axis=0), jnp.argmax(a, axis=0), jnp.min(a, axis=0), jnp.sum(a, axis=0)

    return jax.jit(f)(x)


@program("jit-2d-matmul-reduce")
def _(devices):
    import jax
    import jax.numpy as jnp

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    a = _put(_data(6, 8, seed=2), mesh, "x", "y")
    b = _put(_data(8, 5, seed=3), mesh, "y", None)
    return jax.jit(lambda a, b: (a @ b, jnp.sum(a @ b, axis=0)))(a, b)


@program("jit-2d-transpose-reshard")
def _(devices):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    x = _put(_data(4, 8, seed=4), mesh, "x", "y")
    return jax.jit(lambda a: a.T + 1, out_shardings=NamedSharding(mesh, P("y", "x")))(x)


@program("jit-uneven-softmax-cumsum")
def _(devices):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, (len(devices),), ("x",))
    x = _put(_data(3, 2 * len(devices), seed=5), mesh, None, "x")

    def f(a):
        a = jax.lax.with_sharding_constraint(jnp.pad(a, ((0, 0), (0, 1))),
                                             NamedSharding(mesh, P(None, "x")))
        return jax.nn.softmax(a, axis=-1).sum(axis=0), jnp.cumsum(a, axis=1)[:, -1]

    return jax.jit(f)(x)


@program("jit-2d-uneven-both-axes")
def _(devices):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    x = _put(_data(4, 2 * len(devices), seed=17), mesh, "x", "y")

    def f(a):
        # 5 x (2N + 1) over the (2, N/2) mesh: uneven along both axes from N = 4 on
        b = jax.lax.with_sharding_constraint(jnp.pad(a, ((0, 1), (0, 1)), constant_values=0.5),
                                             NamedSharding(mesh, P("x", "y")))
        return b @ b.T, jnp.cumsum(b, axis=0), jnp.max(b, axis=1), jnp.flip(b, axis=1)

    return jax.jit(f)(x)


@program("jit-memory-kinds")
def _(devices):
    # arguments and outputs in each memory kind (XLA's partitioner drops the outputs' kinds)
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))

    def put(x, kind, *spec):
        return jax.device_put(x, NamedSharding(mesh, P(*spec), memory_kind=kind))

    a = put(_data(4, 2 * len(devices), seed=20), "pinned_host", "x", "y")
    b = put(_data(4, 2 * len(devices), seed=21), "unpinned_host", "x")
    c = put(_data(4, 2 * len(devices), seed=22), "device", None, "y")
    kinds = ("pinned_host", "device", "unpinned_host")

    def f(a, b, c):
        on_device = NamedSharding(mesh, P("x", "y"), memory_kind="device")
        a, b = jax.device_put(a, on_device), jax.device_put(b, on_device)
        return a * 2, a + b + c, c.T

    shardings = tuple(NamedSharding(mesh, spec, memory_kind=kind) for spec, kind
                      in zip((P("x", "y"), P(None, "y"), P("y")), kinds))
    return jax.jit(f, out_shardings=shardings)(a, b, c), a, b, c


@program("jit-compute_on-device_host")
def _(devices):
    import jax
    import jax.numpy as jnp

    from pjrtkit.jax_compat import compute_on_device_host

    mesh = _mesh(devices, (len(devices),), ("x",))
    x = _put(_data(2 * len(devices), 3, seed=23), mesh, "x")

    @jax.jit
    def f(a):
        b = compute_on_device_host(lambda v: jnp.sin(v) * 3)(a)
        return b + a

    return f(x)


@program("jit-gather-scatter-dus")
def _(devices):
    import jax
    import jax.numpy as jnp

    mesh = _mesh(devices, (len(devices),), ("x",))
    x = _put(_data(4 * len(devices), 3, seed=6), mesh, "x")
    idx = _put(np.array([3, 0, 1, 2 * len(devices) - 1], np.int32), mesh)

    def f(a, i):
        taken = a[i]
        updated = a.at[i].add(10.0)
        dus = jax.lax.dynamic_update_slice(a, jnp.ones((2, 3), a.dtype), (1, 0))
        return taken, updated, dus

    return jax.jit(f)(x, idx)


@program("jit-sharding-constraint-sort")
def _(devices):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    x = _put(_data(4, 10, seed=7), mesh, "x")

    def f(a):
        a = jax.lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P(None, "y")))
        return jnp.sort(a, axis=1), jnp.sort(a, axis=0)

    return jax.jit(f)(x)


@program("jit-int-and-bool")
def _(devices):
    import jax
    import jax.numpy as jnp

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    x = _put(np.arange(8 * 6, dtype=np.int32).reshape(8, 6) % 7, mesh, "y", "x")
    return jax.jit(lambda a: (jnp.sum(a, axis=0), jnp.max(a), jnp.any(a > 5, axis=1)))(x)


@program("jit-erf-top_k")
def _(devices):
    # XLA's HLO writes chlo.erf / chlo.top_k as mhlo.erf / mhlo.topk in partitioned programs
    import jax
    from jax import lax

    mesh = _mesh(devices, (len(devices),), ("x",))
    values = np.round(_data(2 * len(devices), 9, seed=15), 1)  # ties among them
    values[0, 3] = np.nan
    x = _put(values, mesh, "x")
    return jax.jit(lambda a: (lax.erf(a), *lax.top_k(a, 4)))(x)


@program("jit-mlp-grad-data-model")
def _(devices):
    import jax
    import jax.numpy as jnp

    mesh = _mesh(devices, _two_axes(len(devices)), ("data", "model"))
    w1 = _put(_data(5, 8, seed=8) * 0.3, mesh, None, "model")
    w2 = _put(_data(8, 3, seed=9) * 0.3, mesh, "model", None)
    x = _put(_data(8, 5, seed=10), mesh, "data", None)

    def loss(w1, w2, x):
        return jnp.mean(jnp.square(jnp.tanh(x @ w1) @ w2))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(w1, w2, x)


# -- shard_map with each collective ---------------------------------------------------------

def _shard_map(devices, body, *, out_rank=2):
    import jax
    from jax.sharding import PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    x = _put(_data(4, 2 * len(devices), seed=11), mesh, "x", "y")
    mapped = jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"),
                           check_vma=False)
    return jax.jit(mapped)(x)


def _shard_map_case(name, body):
    program(f"shard_map-{name}")(lambda devices: _shard_map(devices, body))


def _ragged_all_to_all(a):
    # Each device's block, flat, is cut into one slot per device of "y"; device j gets
    # 1 + (me + j) % slot values of slot j, written into its own slot `me` of a zero output.
    import jax.numpy as jnp
    from jax import lax

    size, me = _axis_size("y"), lax.axis_index("y")
    flat = a.reshape(-1)
    slot = flat.shape[0] // size
    peers = jnp.arange(size, dtype=jnp.int32)
    received = lax.ragged_all_to_all(
        flat, jnp.zeros_like(flat), peers * slot, 1 + (me + peers) % slot,
        jnp.full((size,), me * slot, jnp.int32), 1 + (peers + me) % slot, axis_name="y")
    return received.reshape(a.shape)


def _register_shard_map_cases():
    import jax.numpy as jnp
    from jax import lax

    cases = {
        "psum": lambda a: lax.psum(a, "x"),
        "psum-both-axes": lambda a: lax.psum(a, ("x", "y")),
        "pmean": lambda a: lax.pmean(a, "y"),
        "pmax": lambda a: lax.pmax(a, ("x", "y")),
        "pmin": lambda a: lax.pmin(a, "y"),
        "all_gather-tiled": lambda a: lax.all_gather(a, "y", axis=1, tiled=True),
        "all_gather": lambda a: lax.all_gather(a, "x").sum(axis=0),
        "ppermute": lambda a: lax.ppermute(a, "y", [(i, (i + 1) % _axis_size("y"))
                                                     for i in range(_axis_size("y"))]),
        "all_to_all": lambda a: lax.all_to_all(a, "y", 1, 0, tiled=True),
        "psum_scatter": lambda a: lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True),
        "axis_index": lambda a: a + lax.axis_index("x") * 10 + lax.axis_index("y"),
        "psum-in-loop": lambda a: lax.fori_loop(0, 3, lambda i, c: lax.psum(c, "y") * 0.5, a),
        "all_to_all-untiled": lambda a: lax.all_to_all(
            a.reshape(_axis_size("x"), -1), "x", 0, 0).reshape(a.shape),
        "psum_scatter-untiled": lambda a: jnp.tile(lax.psum_scatter(
            a.reshape(_axis_size("y"), -1), "y"), _axis_size("y")).reshape(a.shape),
        "pshuffle": lambda a: lax.pshuffle(a, "y", list(reversed(range(_axis_size("y"))))),
        "pswapaxes": lambda a: lax.pswapaxes(
            a.reshape(_axis_size("x"), -1), "x", 0).reshape(a.shape),
        "ragged_all_to_all": _ragged_all_to_all,
    }
    for name, body in cases.items():
        _shard_map_case(name, body)


def _axis_size(name):
    from jax import lax

    return lax.axis_size(name)


# -- pmap with every lax.p* collective -----------------------------------------------------

def _pmap(devices, body, *, shape=(4, 8)):
    import jax

    x = _data(len(devices), *shape, seed=12)
    return jax.pmap(body, axis_name="i", devices=devices)(x)


def _register_pmap_cases():
    from jax import lax

    def size():
        return _axis_size("i")

    cases = {
        "psum": lambda a: lax.psum(a, "i"),
        "pmean": lambda a: lax.pmean(a, "i"),
        "pmax": lambda a: lax.pmax(a, "i"),
        "pmin": lambda a: lax.pmin(a, "i"),
        "all_gather": lambda a: lax.all_gather(a, "i"),
        "all_gather-tiled": lambda a: lax.all_gather(a, "i", axis=1, tiled=True),
        "all_to_all": lambda a: lax.all_to_all(
            a.reshape(size(), -1), "i", 0, 0).reshape(size(), -1),
        "ppermute": lambda a: lax.ppermute(a, "i", [(i, (i + 1) % size())
                                                    for i in range(size())]),
        "pshuffle": lambda a: lax.pshuffle(a, "i", list(reversed(range(size())))),
        "psum_scatter": lambda a: lax.psum_scatter(
            a.reshape(size(), -1), "i", scatter_dimension=0, tiled=True),
        "axis_index": lambda a: a * lax.axis_index("i"),
        "psum-int": lambda a: lax.psum((a * 10).astype(np.int32), "i"),
        "pmax-tuple": lambda a: lax.pmax((a, -a), "i"),
        "psum_scatter-untiled": lambda a: lax.psum_scatter(a.reshape(size(), -1), "i"),
        "all_to_all-tiled": lambda a: lax.all_to_all(a, "i", 1, 1, tiled=True),
        "psum-axis_index_groups": lambda a: lax.psum(
            a, "i", axis_index_groups=[list(range(0, size(), 2)), list(range(1, size(), 2))]
            if size() % 2 == 0 else None),
        "pmin-int": lambda a: lax.pmin((a * 10).astype(np.int32), "i"),
    }
    for name, body in cases.items():
        program(f"pmap-{name}")(lambda devices, body=body: _pmap(devices, body))
    # Sums across devices of types XLA's CPU backend widens for the whole collective (rounded
    # once, not after every device's term); float16 is added as it is.
    for dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "float16"):
        for name, body in {"psum": lambda a: lax.psum(a, "i"),
                           "psum_scatter": lambda a: lax.psum_scatter(a, "i", tiled=True)}.items():
            program(f"pmap-{name}-{dtype}")(
                lambda devices, body=body, dtype=dtype: _pmap_narrow(devices, body, dtype))


def _pmap_narrow(devices, body, dtype):
    import jax
    import ml_dtypes

    x = _data(len(devices), 64, 3, seed=18) * 3
    # no value rounds to -0: XLA's one-device reduce_scatter returns +0 for it, pjrtkit -0
    # (README, "Many devices"); signed zeros across devices are pmap-psum-signed-zeros'
    x = (x + np.copysign(0.5, x)).astype(getattr(ml_dtypes, dtype, dtype))
    return jax.pmap(body, axis_name="i", devices=devices)(x)


@program("pmap-psum-signed-zeros")
def _(devices):
    # XLA's sums across devices start from +0: all -0 sums to +0 (signbit compared exactly)
    import jax
    import jax.numpy as jnp
    from jax import lax

    x = np.zeros((len(devices), 4, 3), np.float32)
    x[:, 0] = -0.0
    x[:, 1, 0] = 1.0
    x[:, 2] = np.where(np.arange(len(devices))[:, None] % 2 == 0, -0.0, 0.0)
    x[:, 3] = -1.0
    return jax.pmap(lambda a: jnp.signbit(lax.psum(a, "i")), axis_name="i", devices=devices)(
        x.astype(np.float32))


@program("jit-bfloat16-sum-over-sharded-axis")
def _(devices):
    # the partitioner's own all_reduce of a bfloat16 sum
    import jax
    import jax.numpy as jnp
    import ml_dtypes

    mesh = _mesh(devices, (len(devices),), ("x",))
    x = _put((_data(8 * len(devices), 16, seed=19) * 3).astype(ml_dtypes.bfloat16), mesh, "x")
    return jax.jit(lambda a: (jnp.sum(a, axis=0), jnp.max(a, axis=0)))(x)


@program("shard_map-partial-manual")
def _(devices):
    # manual over "x" only; "y" stays automatic (XLA partitions the body's matmul over it)
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))
    x = _put(_data(4, 2 * len(devices), seed=13), mesh, "x", "y")
    w = _put(_data(2 * len(devices), 3, seed=14), mesh, "y", None)

    def body(a, w):
        return lax.psum(jnp.tanh(a @ w), "x")

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=P(),
                           axis_names=frozenset({"x"}), check_vma=False)
    return jax.jit(mapped)(x, w)


@program("pmap-linalg-custom-call")
def _(devices):
    # lu's custom call has several results: XLA's partitioned program returns them as a tuple
    import jax

    x = np.eye(6, dtype=np.float32) * 0.3 + 0.01  # host data: each backend gets its own copy
    return jax.pmap(jax.scipy.linalg.expm, devices=devices)(np.stack([x] * len(devices)))


_register_shard_map_cases()
_register_pmap_cases()


# -- comparison --------------------------------------------------------------------------------

def compare(name, under_test, reference) -> str:
    import jax

    from pjrtkit.testing.tolerances import assert_close

    got, want = jax.tree.leaves(under_test), jax.tree.leaves(reference)
    if len(got) != len(want):
        return f"{len(got)} outputs, XLA has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k}: {g.dtype}{g.shape}, XLA {w.dtype}{w.shape}"
        if g.sharding.memory_kind != w.sharding.memory_kind:
            return f"output {k}: in {g.sharding.memory_kind} memory, XLA's in {w.sharding.memory_kind}"
        try:
            assert_close(np.asarray(g), np.asarray(w), what=f"{name} output {k}")
        except AssertionError as exc:
            return str(exc)[:2000]
        mine = sorted((s.device.id, s.index, s.data.shape) for s in g.addressable_shards)
        theirs = sorted((s.device.id, s.index, s.data.shape) for s in w.addressable_shards)
        if [(i, str(ix), sh) for i, ix, sh in mine] != [(i, str(ix), sh) for i, ix, sh in theirs]:
            return f"output {k}: shards {mine}, XLA {theirs}"
        expected = np.asarray(w)
        for shard in g.addressable_shards:
            if shard.device.platform != "pjrtkit_cpu":
                return f"output {k}: a shard lives on {shard.device}"
            try:
                assert_close(np.asarray(shard.data), expected[shard.index],
                             what=f"{name} output {k} shard on device {shard.device.id}")
            except AssertionError as exc:
                return str(exc)[:2000]
    return "ok"


# Programs XLA's CPU backend refuses: pjrtkit must refuse them too, UNIMPLEMENTED naming the op
# (JAX has no cpu lowering of lax.pbroadcast at all, so it is not among them).
REFUSED_AS_ON_XLA = {"shard_map-ragged_all_to_all": "ragged_all_to_all"}


def refusal(name, fn, devices) -> str:
    """"ok" when ``fn(devices)`` raises UNIMPLEMENTED naming ``REFUSED_AS_ON_XLA[name]``."""
    try:
        fn(devices)
    except Exception as exc:  # noqa: BLE001 - the refusal is the outcome
        message = str(exc)
        if "UNIMPLEMENTED" in message and REFUSED_AS_ON_XLA[name] in message:
            return "ok"
        return f"refused, but not as UNIMPLEMENTED naming {REFUSED_AS_ON_XLA[name]}: {message}"
    return "ran, but XLA's CPU backend refuses it (expected UNIMPLEMENTED)"


# -- each device holds only its shard: per-device memory ----------------------------------------

def shard_bytes_per_device(devices) -> str:
    """Per-device ``memory_stats()["bytes_in_use"]`` grows by exactly the bytes of that device's
    shards when a sharded array is put and a sharded jit returns (XLA's CPU backend reports no
    memory statistics, so this is pjrtkit's own account, checked against the shard shapes JAX
    sees, which compare() matches with XLA's)."""
    import gc

    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(devices, _two_axes(len(devices)), ("x", "y"))

    def used():
        gc.collect()
        return [d.memory_stats()["bytes_in_use"] for d in devices]

    def expected(*arrays):
        held = {d: 0 for d in devices}
        for array in arrays:
            for shard in array.addressable_shards:
                held[shard.device] += shard.data.nbytes
        return [held[d] for d in devices]

    f = jax.jit(lambda a: ((a * 2).T, a.sum(axis=0)),
                out_shardings=(NamedSharding(mesh, P("y", None)), NamedSharding(mesh, P())))
    warm = f(_put(_data(64, 32), mesh, "x", "y"))
    del warm
    before = used()
    x = _put(_data(64, 32, seed=16), mesh, "x", "y")
    x.block_until_ready()
    after_put = used()
    outputs = f(x)
    jax.block_until_ready(outputs)
    after_jit = used()
    put_delta = [b - a for a, b in zip(before, after_put)]
    jit_delta = [b - a for a, b in zip(after_put, after_jit)]
    if put_delta != expected(x):
        return f"device_put: bytes_in_use grew by {put_delta}, shards hold {expected(x)}"
    if jit_delta != expected(*outputs):
        return f"jit outputs: bytes_in_use grew by {jit_delta}, shards hold {expected(*outputs)}"
    if len(devices) > 1 and max(put_delta) >= x.nbytes:
        return f"device_put: a device holds {max(put_delta)} bytes of a {x.nbytes}-byte array"
    return "ok"


OWN_CHECKS = {"memory-each-device-holds-only-its-shard": shard_bytes_per_device}


def main() -> None:
    import jax

    ours, xla = jax.devices("pjrtkit_cpu")[:N], jax.devices("cpu")[:N]
    assert len(ours) == N and len(xla) == N, (ours, xla)
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
    for name, fn in PROGRAMS.items():
        if only and name not in only:
            continue
        try:
            reference = fn(xla)
        except Exception as exc:  # noqa: BLE001 - a case XLA itself refuses at this N
            outcome = (refusal(name, fn, ours) if name in REFUSED_AS_ON_XLA
                       else f"xla-refuses: {exc}"[:300])
            print(json.dumps({"name": name, "outcome": outcome}), flush=True)
            continue
        try:
            outcome = compare(name, fn(ours), reference)
        except Exception:  # noqa: BLE001 - reported as the program's outcome
            outcome = traceback.format_exc()[-3000:]
        print(json.dumps({"name": name, "outcome": outcome}), flush=True)
    for name, check in OWN_CHECKS.items():
        if only and name not in only:
            continue
        try:
            outcome = check(ours)
        except Exception:  # noqa: BLE001 - reported as the check's outcome
            outcome = traceback.format_exc()[-3000:]
        print(json.dumps({"name": name, "outcome": outcome}), flush=True)


if __name__ == "__main__":
    main()
