"""Memory limits as a JAX user meets them on pjrtkit_cpu (issue 13): a 1 TiB array is
RESOURCE_EXHAUSTED naming the sizes, the process lives, the next call works and memory_stats()
stays true; PJRTKIT_CPU_MEMORY_LIMIT is a per-device limit on both execute paths and on
transfers; the devices share the host's memory; NumPy's MemoryError is RESOURCE_EXHAUSTED.
Each scenario runs in a fresh interpreter (its settings are read when the client starts)."""
from __future__ import annotations

PRELUDE = """
import json, resource
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
devs = jax.devices("pjrtkit_cpu")
d = devs[0]

def attempt(fn):
    try:
        fn()
        return "ok"
    except Exception as exc:
        return str(exc)
"""


def _lines(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()


def test_one_tib_on_device_is_resource_exhausted_and_the_next_call_works(run_python):
    result = run_python(PRELUDE + """
before = d.memory_stats()
print(attempt(lambda: jnp.zeros((1 << 38,), device=d).block_until_ready()))
after = d.memory_stats()
print(after["bytes_in_use"] == before["bytes_in_use"], after["bytes_limit"] < (1 << 40))
x = jnp.arange(6.0, device=d) * 2
print(float(x.sum()), d.memory_stats()["bytes_in_use"] - before["bytes_in_use"] >= 24)
""")
    error, stats_true, next_call = _lines(result)
    assert error.startswith("RESOURCE_EXHAUSTED"), error
    assert "1099511627776 bytes (1.0 TiB)" in error and "float32[274877906944]" in error, error
    assert "host memory shared by the 1 device(s) of pjrtkit_cpu" in error, error
    assert stats_true == "True True"
    assert next_call == "30.0 True"


def test_the_per_device_limit_holds_at_transfer_and_both_execute_paths(run_python):
    result = run_python(PRELUDE + """
small = jax.device_put(np.ones(200, np.float32), d)          # 800 bytes of 1024
print(attempt(lambda: jax.device_put(np.ones(100, np.float32), d)))   # +400: refused
print(attempt(lambda: jax.jit(lambda a: a * 2)(small).block_until_ready()))  # inline path
big_work = jax.jit(lambda a: jnp.broadcast_to(a[:1], (300,)) + 1)       # +1200: refused
print(attempt(lambda: big_work(small).block_until_ready()))
print(json.dumps(d.memory_stats()["bytes_in_use"]))
print(attempt(lambda: jax.device_put(np.ones(100, np.float32), devs[1])))  # its own limit
del small
print(float(jax.jit(lambda a: a * 2)(jax.device_put(np.ones(100, np.float32), d)).sum()))
""", PJRTKIT_CPU_MEMORY_LIMIT="1K", PJRTKIT_CPU_DEVICES="2")
    transfer, inline, general, in_use, other_device, after = _lines(result)
    for error in (transfer, inline, general):
        assert error.startswith("RESOURCE_EXHAUSTED") and "1024 bytes" in error, error
    assert "400 bytes" in transfer and "800 bytes" in inline and "1200 bytes" in general
    assert in_use == "800"
    assert other_device == "ok"
    assert after == "200.0"


def test_a_host_allocation_failure_is_resource_exhausted(run_python):
    # The address space is capped just above what the process maps, so NumPy's allocation
    # of 2 GiB inside the plugin's execute raises a real MemoryError.
    result = run_python(PRELUDE + """
x = jax.device_put(np.float32(2), d)
grow = jax.jit(lambda a: jnp.broadcast_to(a, (1 << 29,)) * a + 1)
print(float(jax.jit(lambda a: a * 3)(x)))
vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
print(attempt(lambda: grow(x).block_until_ready()))
print(float(jax.jit(lambda a: a * 5)(x)))
""")
    first, error, after = _lines(result)
    assert first == "6.0"
    assert error.startswith("RESOURCE_EXHAUSTED") and "MemoryError" in error, error
    assert after == "10.0"
