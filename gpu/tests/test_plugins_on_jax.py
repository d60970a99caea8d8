"""pjrtkit_cuda and pjrtkit_rocm under JAX, emulated (a child process: JAX fixes its platforms
once): a training step agrees with XLA's CPU backend, memory_stats' bytes_in_use is the sum of
the live buffers, the topology is the documented fake device description."""
from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from pjrtkit.testing.tolerances import assert_close

def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w[0]) @ w[1] - y) ** 2)

def step(w, x, y):
    g = jax.grad(loss)(w, x, y)
    return [p - 0.1 * q for p, q in zip(w, g)]

rng = np.random.default_rng(0)
w = [rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)]
x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
cpu = jax.devices("cpu")[0]
with jax.default_device(cpu):
    expected = [np.asarray(p) for p in jax.jit(step)(w, x, y)]
out = {}
for platform in ("pjrtkit_cuda", "pjrtkit_rocm"):
    device = jax.devices(platform)[0]
    before = device.memory_stats()["bytes_in_use"]
    a = jax.device_put(np.zeros(1000, np.float32), device)
    b = jax.device_put(np.zeros(500, np.int8), device)
    during = device.memory_stats()["bytes_in_use"]
    a.delete()
    after = device.memory_stats()["bytes_in_use"]
    out[platform] = {"kind": device.device_kind, "added": during - before,
                     "after_delete": after - before, "limit": device.memory_stats()["bytes_limit"]}
    got = jax.jit(step)(*jax.device_put((w, x, y), device))
    for a, b in zip(got, expected):
        assert_close(np.asarray(a), b, what=platform)
    assert all(p.devices() == {device} for p in got)
print(json.dumps(out))
"""


def test_both_gpu_plugins_run_a_training_step_emulated():
    env = dict(os.environ, PJRTKIT_GPU_EMULATE="1",
               JAX_PLATFORMS="pjrtkit_cuda,pjrtkit_rocm,cpu")
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for platform in ("pjrtkit_cuda", "pjrtkit_rocm"):
        facts = result[platform]
        assert facts["kind"] == "pjrtkit emulated GPU (Triton interpreter)"
        assert facts["added"] == 1000 * 4 + 500
        assert facts["after_delete"] == 500
        assert facts["limit"] == 4 << 30


CALLBACKS_AND_STORED_TYPES = r"""
import jax, jax.numpy as jnp, ml_dtypes, numpy as np
from jax.experimental import io_callback
from pjrtkit.testing.tolerances import assert_close

device = jax.devices("pjrtkit_cuda")[0]
cpu = jax.devices("cpu")[0]
seen = []

def program(x, z, f8):
    y = jax.pure_callback(lambda a: np.sin(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    io_callback(lambda a: seen.append(np.asarray(a).sum()) or None, None, y, ordered=True)
    jax.debug.print("sum {s}", s=jnp.sum(x))
    w = jax.pure_callback(lambda a: a * 2, jax.ShapeDtypeStruct(z.shape, z.dtype), z)
    return y * 2, w * z, (f8.astype(jnp.float32) * 3).astype(f8.dtype)

rng = np.random.default_rng(0)
args = (rng.standard_normal((2, 3)).astype(np.float32),
        (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64),
        rng.standard_normal(5).astype(ml_dtypes.float8_e4m3fn))
expected = jax.jit(program)(*jax.device_put(args, cpu))
got = jax.jit(program)(*jax.device_put(args, device))
jax.effects_barrier()
for a, b in zip(got, expected):
    assert a.devices() == {device} and a.dtype == b.dtype
    assert_close(np.asarray(a), np.asarray(b), what=str(a.dtype))
assert len(seen) == 2 and abs(seen[0] - seen[1]) < 1e-5, seen
print("ok")
"""


def test_host_callbacks_complex_and_float8_buffers_on_the_emulated_gpu():
    env = dict(os.environ, PJRTKIT_GPU_EMULATE="1", JAX_PLATFORMS="pjrtkit_cuda,cpu")
    run = subprocess.run([sys.executable, "-c", CALLBACKS_AND_STORED_TYPES],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-1] == "ok" and lines.count(lines[0]) == 2 and lines[0].startswith("sum ")
