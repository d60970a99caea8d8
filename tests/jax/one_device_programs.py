"""Real JAX programs whose compiled form carries Shardy annotations on one device (run as a
script by test_one_device_sharding.py): each runs on pjrtkit_cpu and on XLA's CPU backend in
this process, and one JSON line per program reports the comparison."""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pjrtkit.testing.tolerances import assert_close


def adam_step(params, grads, m, v, t):
    """One Adam update as optax writes it, in jax.numpy."""
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
    def update(p, m, v):
        return p - 1e-3 * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return jax.tree.map(update, params, m, v), m, v


def train_step(key):
    """A tiny MLP's loss, gradient and Adam step on random data (keys split on the device)."""
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w": jax.random.normal(k1, (4, 3)) * 0.1, "b": jnp.zeros(3)}
    x = jax.random.uniform(k2, (8, 4))
    y = jax.random.bernoulli(k3, 0.5, (8, 3)).astype(jnp.float32)
    def loss(p):
        return jnp.mean((jax.nn.sigmoid(x @ p["w"] + p["b"]) - y) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    new, _, _ = jax.jit(adam_step)(params, grads, zeros, zeros, 1.0)
    return value, new


DEVICE = None  # the device the program under test runs on (set by run)


def one_device_mesh():
    return jax.sharding.Mesh(np.array([DEVICE]), ("i",))


def named_sharding(x):
    sharding = jax.sharding.NamedSharding(one_device_mesh(), jax.P("i"))
    return jax.jit(lambda a: jnp.sin(a) * 2, out_shardings=sharding)(jax.device_put(x, sharding))


def shard_map_program(x):
    mesh = one_device_mesh()
    def body(a):
        return (a * 2 + lax.psum(a, "i") + lax.pmax(a, "i"), lax.all_gather(a, "i", tiled=True),
                lax.psum_scatter(a, "i", tiled=True), lax.ppermute(a, "i", [(0, 0)]),
                a + lax.axis_index("i"))
    f = jax.shard_map(body, mesh=mesh, in_specs=jax.P("i"), out_specs=(jax.P("i"),) * 5)
    return jax.jit(f)(jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.P("i"))))


def partial_manual_shard_map(x):
    """shard_map manual over one axis of a 1x1 mesh: constraints inside an all_reduce body."""
    mesh = jax.sharding.Mesh(np.array([DEVICE]).reshape(1, 1), ("i", "j"))
    f = jax.shard_map(lambda a: a * 2 + lax.psum(a, "i"), mesh=mesh, in_specs=jax.P("i"),
                      out_specs=jax.P("i"), axis_names={"i"})
    return jax.jit(f)(jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.P("i"))))


def complex_constant():
    """Issue 13's program: a complex splat constant (used to abort while loading)."""
    c = np.full((25, 25), 0.5 + 0j, np.complex64)
    return jax.jit(lambda a: a * 2 + c)(np.ones((25, 25), np.complex64))


def sharding_constraint(x):
    sharding = jax.sharding.NamedSharding(one_device_mesh(), jax.P())
    return jax.jit(lambda a: lax.with_sharding_constraint(a * 3, sharding) + 1)(x)


PROGRAMS = {
    "random.normal": lambda: jax.random.normal(jax.random.PRNGKey(0), (3,)),
    "random.uniform": lambda: jax.random.uniform(jax.random.PRNGKey(1), (2, 5)),
    "random.bernoulli": lambda: jax.random.bernoulli(jax.random.PRNGKey(2), 0.3, (7,)),
    "random.categorical": lambda: jax.random.categorical(
        jax.random.PRNGKey(3), jnp.log(jnp.arange(1.0, 6.0)), shape=(4,)),
    "random.split-fold_in": lambda: jax.random.key_data(
        jax.random.fold_in(jax.random.split(jax.random.PRNGKey(4))[1], 7)),
    "random.typed-key-threefry": lambda: jax.random.normal(
        jax.random.fold_in(jax.random.key(5), 2), (3,)),
    "random.typed-key-rbg": lambda: jax.random.uniform(jax.random.key(6, impl="rbg"), (4,)),
    "random.permutation": lambda: jax.random.permutation(jax.random.PRNGKey(7), 6),
    "optax-style-adam-step": lambda: train_step(jax.random.PRNGKey(8)),
    "with_sharding_constraint": lambda: sharding_constraint(jnp.arange(6.0)),
    "named-sharding-one-device-mesh": lambda: named_sharding(jnp.arange(4.0)),
    "shard_map-one-device-mesh": lambda: shard_map_program(jnp.arange(4.0)),
    "shard_map-partial-manual": lambda: partial_manual_shard_map(jnp.arange(4.0)),
    "complex-constant": complex_constant,
}


def run(name: str) -> dict:
    global DEVICE
    fn = PROGRAMS[name]
    outputs = {}
    for platform in ("pjrtkit_cpu", "cpu"):
        DEVICE = jax.devices(platform)[0]
        with jax.default_device(DEVICE):
            leaves = jax.tree_util.tree_leaves(fn())
            outputs[platform] = [np.asarray(leaf) for leaf in leaves]
            placed = {d.platform for leaf in leaves for d in leaf.devices()}
            assert placed == {platform}, f"ran on {placed}, expected {platform}"
    ours, xla = outputs["pjrtkit_cpu"], outputs["cpu"]
    assert len(ours) == len(xla)
    for i, (a, b) in enumerate(zip(ours, xla)):
        assert_close(a, b, what=f"{name} output {i}")
    return {"name": name, "outcome": "ok"}


if __name__ == "__main__":
    # only when run as a script: the test imports PROGRAMS and must leave its JAX untouched
    jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
    for name in sys.argv[1:] or PROGRAMS:
        try:
            record = run(name)
        except Exception as exc:  # noqa: BLE001 - each program's failure is reported
            record = {"name": name, "outcome": f"{type(exc).__name__}: {exc}"[:1500]}
        print(json.dumps(record), flush=True)
