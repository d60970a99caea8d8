"""The benchmark workloads: each is one JAX function plus NumPy inputs, made from a size preset.

A workload is plain JAX (nothing pjrtkit-specific): ``make(size)`` returns ``(fn, args)`` where
``args`` are NumPy arrays (placed on each device by the runner) and ``fn`` is jitted by the
runner. ``size`` is ``"full"`` (the sizes the targets are about) or ``"smoke"`` (tiny shapes that
only prove the workload runs and matches XLA).

``loosen`` multiplies the per-dtype tolerance of ``pjrtkit.testing.tolerances`` for the
correctness check; every value other than 1 says why next to it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    description: str
    target: float | None     # largest acceptable pjrtkit_s / xla_s (None: reported, no bar)
    make: Callable[[str], tuple[Callable, tuple]]
    loosen: float = 1.0
    # "execute": time calls of jax.jit(fn); "compile": time lower(...).compile(); "call": time
    # calls of fn itself, un-jitted, with the backend's device as JAX's default device
    kind: str = "execute"
    # Workloads over several devices run on the first ``devices`` devices of each backend,
    # ``place(args, devices)`` putting the NumPy inputs there; they are reported on their own
    # lines, outside the single-device geomean.
    devices: int = 1
    place: Callable[[tuple, list], tuple] | None = None
    # Real workloads (``real_workloads``): outside the geomean, with their time to steady state
    real: bool = False
    # The pjrtkit platform it runs on (default ``runner.BACKEND``), e.g. "pjrtkit_tpu"
    backend: str | None = None
    # ``close(actual, expected, loosen)`` raising AssertionError: a check other than the
    # per-dtype tolerances (a sampler's posterior, say)
    close: Callable[[Any, Any, float], None] | None = None
    # Calls in a real workload's time to steady state ("first ten calls" unless it says why)
    steady_calls: int = 10


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(rng, shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- dispatch ------------------------------------------------------------------------------

def make_dispatch(size: str):
    def fn(x):
        return x * 2 + 1
    return fn, (np.arange(3, dtype=np.float32),)


# ---- matmul --------------------------------------------------------------------------------

def make_matmul(size: str):
    n = 1024 if size == "full" else 64
    rng = _rng(1)
    a, b = _normal(rng, (n, n)), _normal(rng, (n, n), 1 / np.sqrt(n))

    def fn(a, b):
        return a @ b
    return fn, (a, b)


# ---- MLP train step ------------------------------------------------------------------------

def _mlp_setup(size: str):
    sizes = (784, 512, 512, 10) if size == "full" else (32, 16, 16, 10)
    batch = 128 if size == "full" else 8
    rng = _rng(2)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append((_normal(rng, (fan_in, fan_out), np.sqrt(2 / fan_in)),
                       np.zeros((fan_out,), np.float32)))
    x = _normal(rng, (batch, sizes[0]))
    labels = rng.integers(0, sizes[-1], size=(batch,))
    y = np.eye(sizes[-1], dtype=np.float32)[labels]

    def loss_fn(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        new_params = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
        return new_params, loss

    return train_step, (params, x, y)


def make_mlp(size: str):
    return _mlp_setup(size)


def place_data_parallel(args: tuple, devices: list) -> tuple:
    """Data parallelism: parameters replicated on every device, the batch split across them
    (XLA's partitioner then all-reduces the gradients)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("data",))
    params, x, y = args
    return (jax.device_put(params, NamedSharding(mesh, PartitionSpec())),
            jax.device_put(x, NamedSharding(mesh, PartitionSpec("data"))),
            jax.device_put(y, NamedSharding(mesh, PartitionSpec("data"))))


# ---- small convnet forward -----------------------------------------------------------------

def make_conv(size: str):
    batch = 32 if size == "full" else 2
    hw = 28 if size == "full" else 8
    c1, c2 = (32, 64) if size == "full" else (4, 8)
    rng = _rng(3)
    x = _normal(rng, (batch, hw, hw, 1))
    k = 5 if size == "full" else 3
    k1 = _normal(rng, (k, k, 1, c1), np.sqrt(2 / (k * k)))
    k2 = _normal(rng, (k, k, c1, c2), np.sqrt(2 / (k * k * c1)))
    flat = (hw // 2) * (hw // 2) * c2
    w = _normal(rng, (flat, 10), np.sqrt(1 / flat))
    dn = ("NHWC", "HWIO", "NHWC")

    def fn(x, k1, k2, w):
        h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
        h = jax.nn.relu(lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dn))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return h.reshape(h.shape[0], -1) @ w
    return fn, (x, k1, k2, w)


# ---- layernorm -----------------------------------------------------------------------------

def make_layernorm(size: str):
    shape = (4096, 1024) if size == "full" else (16, 32)
    rng = _rng(4)
    x = _normal(rng, shape)
    gamma = _normal(rng, shape[-1:]) + 1
    beta = _normal(rng, shape[-1:])

    def fn(x, gamma, beta):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + 1e-5) * gamma + beta
    return fn, (x, gamma, beta)


# ---- fori_loop -----------------------------------------------------------------------------

def make_fori(size: str):
    steps = 1000 if size == "full" else 10

    def body(i, x):
        return x * 0.999 + i.astype(jnp.float32) * 1e-6

    def fn(x):
        return lax.fori_loop(0, steps, body, x)
    return fn, (np.linspace(-1, 1, 128 if size == "full" else 4, dtype=np.float32),)


# ---- scan RNN ------------------------------------------------------------------------------

def make_scan(size: str):
    steps, batch, hidden = (1000, 8, 64) if size == "full" else (10, 2, 4)
    rng = _rng(5)
    xs = _normal(rng, (steps, batch, hidden))
    w = _normal(rng, (hidden, hidden), 1 / np.sqrt(hidden))
    u = _normal(rng, (hidden, hidden), 1 / np.sqrt(hidden))
    h0 = np.zeros((batch, hidden), np.float32)

    def fn(h0, xs, w, u):
        def step(h, x):
            h = jnp.tanh(h @ w + x @ u)
            return h, h
        h, hs = lax.scan(step, h0, xs)
        return h, hs
    return fn, (h0, xs, w, u)


# ---- random.normal -------------------------------------------------------------------------

def make_random(size: str):
    n = 1 << 20 if size == "full" else 1000

    def fn(key):
        return jax.random.normal(jax.random.wrap_key_data(key), (n,), jnp.float32)
    return fn, (np.asarray(jax.random.key_data(jax.random.key(0, impl="threefry2x32"))),)


# ---- transformer block forward -------------------------------------------------------------

def make_transformer(size: str):
    batch, seq, d, heads = (8, 128, 256, 4) if size == "full" else (1, 8, 16, 2)
    ff = 4 * d
    rng = _rng(6)
    p = {
        "ln1_g": np.ones(d, np.float32), "ln1_b": np.zeros(d, np.float32),
        "wqkv": _normal(rng, (d, 3 * d), 1 / np.sqrt(d)),
        "wo": _normal(rng, (d, d), 1 / np.sqrt(d)),
        "ln2_g": np.ones(d, np.float32), "ln2_b": np.zeros(d, np.float32),
        "w1": _normal(rng, (d, ff), 1 / np.sqrt(d)), "b1": np.zeros(ff, np.float32),
        "w2": _normal(rng, (ff, d), 1 / np.sqrt(ff)), "b2": np.zeros(d, np.float32),
    }
    x = _normal(rng, (batch, seq, d))

    def layernorm(x, g, b):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + 1e-5) * g + b

    def fn(p, x):
        B, T, D = x.shape
        h = layernorm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
        def split(t):
            return t.reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3)

        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // heads).astype(np.float32)
        mask = jnp.tril(jnp.ones((T, T), bool))
        scores = jnp.where(mask, scores, -1e9)
        att = jax.nn.softmax(scores, axis=-1) @ v
        x = x + att.transpose(0, 2, 1, 3).reshape(B, T, D) @ p["wo"]
        h = layernorm(x, p["ln2_g"], p["ln2_b"])
        return x + jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return fn, (p, x)


# ---- the suite -----------------------------------------------------------------------------

WORKLOADS: list[Workload] = [
    Workload("dispatch", "jit x*2+1 on f32[3]", 2.0, make_dispatch),
    # K=1024 accumulations in a different order (BLAS blocking vs Eigen): absolute errors near
    # zero-valued outputs reach ~1e-5, past the f32 atol of 1e-6.
    Workload("matmul", "f32[1024,1024] @ f32[1024,1024]", 1.1, make_matmul, loosen=20),
    # Forward and backward through three matmuls (K up to 784) and a log-softmax.
    Workload("mlp_train_step", "MLP 784-512-512-10, batch 128, xent, SGD", 1.3, make_mlp,
             loosen=20),
    # Two convolutions (K = 25*32 for the second) and a dense layer with K = 14*14*64.
    Workload("convnet_fwd", "2x conv5x5 (32, 64 ch) + maxpool + dense, batch 32, 28x28", 1.1,
             make_conv, loosen=20),
    Workload("layernorm", "layernorm over f32[4096,1024]", 2.0, make_layernorm, loosen=5),
    # 1000 dependent multiply-adds: rounding differences compound along the chain.
    Workload("fori_loop", "fori_loop of 1000 steps x*0.999+i*1e-6 on f32[128]", 10.0, make_fori,
             loosen=10),
    # 1000 dependent tanh(h@W + x@U) steps: a long chain of matmuls and transcendental
    # approximations (NumPy's tanh vs XLA's), each step feeding the next.
    Workload("scan_rnn", "scan RNN, 1000 steps, batch 8, hidden 64", 2.0, make_scan, loosen=50),
    # Bits are exact (Threefry); the normal transform uses erf_inv, whose approximations differ.
    Workload("random_normal", "jax.random.normal, 2**20 f32", 2.0, make_random, loosen=5),
    # Attention + MLP: several chained matmuls, softmax and gelu (tanh approximation).
    Workload("transformer_block", "pre-LN block fwd, batch 8, seq 128, d 256, 4 heads", 1.3,
             make_transformer, loosen=20),
    Workload("jit_compile", "jit(mlp_train_step).lower(x).compile(), lowering excluded", 0.3,
             make_mlp, kind="compile"),
    # The MLP step data-parallel over 4 devices (batch 32 per device); same tolerance reason.
    Workload("mlp_train_step_dp4", "mlp_train_step, batch split over 4 devices, params "
             "replicated", 2.0, make_mlp, loosen=20, devices=4, place=place_data_parallel),
]

GEOMEAN_TARGET = 1.5


def all_workloads() -> list[Workload]:
    from benchmarks.real_workloads import REAL_WORKLOADS

    return WORKLOADS + REAL_WORKLOADS


def devices_needed(chosen: list[Workload]) -> int:
    """How many devices each backend needs for ``chosen``."""
    return max((w.devices for w in chosen), default=1)


def platforms_needed(chosen: list[Workload]) -> list[str]:
    """The pjrtkit platforms besides the default one that ``chosen`` runs on."""
    return sorted({w.backend for w in chosen if w.backend})


def by_name(names: list[str], suite: list[Workload] | None = None) -> list[Workload]:
    """Workloads of ``suite`` (default: the CPU suite with the real workloads) whose name
    contains any of ``names`` (in suite order); a name that is a workload's whole name selects
    that one alone (``scan_rnn``, not ``scan_rnn_large``)."""
    everything = all_workloads() if suite is None else suite
    exact = {w.name for w in everything}
    chosen = [w for w in everything
              if any(n == w.name or (n not in exact and n in w.name) for n in names)]
    unknown = [n for n in names if not any(n in w.name for w in everything)]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; known: "
                         f"{', '.join(w.name for w in everything)}")
    return chosen


def leaves(tree: Any) -> list:
    return jax.tree_util.tree_leaves(tree)
