"""jaxlib itself driving the PJRT_Api (in a subprocess: JAX's platform choice is per process)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pjrtkit_cpu") is None
    or importlib.util.find_spec("pjrtkit.runtime.client") is None,
    reason="needs the runtime and the pjrtkit-cpu plugin installed (pip install -e plugins/cpu)")

PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_platforms", "pjrtkit_cpu,cpu")
    (device,) = jax.devices("pjrtkit_cpu")[:1]
    assert device.platform == "pjrtkit_cpu", device.platform
    host = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]   # non-contiguous host input
    x = jax.device_put(host, device)
    y = jax.jit(lambda a: a * 2 + 1)(x)
    np.testing.assert_array_equal(np.asarray(y), host * 2 + 1)
    assert y.devices() == {device}
    assert y.dtype == np.float32 and y.shape == (3, 2)
    z = jnp.ones((2,), dtype=jnp.bfloat16, device=device) + 1
    np.testing.assert_array_equal(np.asarray(z, dtype=np.float32), [2, 2])
    print("OK")
""")


def test_jit_round_trip_through_jaxlib():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-4000:]
