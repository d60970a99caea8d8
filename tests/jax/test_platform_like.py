"""lax.platform_dependent on pjrtkit_cpu, which declares itself like JAX's cpu: it takes the
cpu branch, as XLA's CPU backend does; a branch named pjrtkit_cpu wins; without a cpu branch
it takes the default."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pjrtkit.jax_platform_like import with_like_platform
from pjrtkit.testing.tolerances import assert_close


def _run(device, fn, x):
    return np.asarray(jax.jit(fn)(jax.device_put(x, device)))


def test_the_cpu_branch_is_taken_as_on_xla_cpu(devices):
    device, reference = devices

    def f(x):
        return jax.lax.platform_dependent(x, cpu=lambda v: jnp.sin(v) * 2,
                                          tpu=lambda v: v * 0, default=lambda v: v - 100)

    x = np.linspace(-2, 2, 7, dtype=np.float32)
    ours, ref = _run(device, f, x), _run(reference, f, x)
    assert_close(ours, ref, what="platform_dependent(cpu=...)")
    assert_close(ref, np.sin(x) * 2, what="XLA cpu took the cpu branch")


def test_a_branch_named_after_the_pjrtkit_platform_wins(devices):
    device, _ = devices

    def f(x):
        return jax.lax.platform_dependent(x, cpu=lambda v: v + 1, pjrtkit_cpu=lambda v: v + 2,
                                          default=lambda v: v + 3)

    np.testing.assert_array_equal(_run(device, f, np.zeros(2, np.float32)), [2.0, 2.0])


def test_without_a_cpu_branch_the_default_is_taken_as_on_xla_cpu(devices):
    device, reference = devices

    def f(x):
        return jax.lax.platform_dependent(x, cuda=lambda v: v + 1, default=lambda v: v * 5)

    x = np.arange(3, dtype=np.int32)
    np.testing.assert_array_equal(_run(device, f, x), _run(reference, f, x))


def test_platform_dependent_outside_jit_on_a_pjrtkit_array(devices):
    device, reference = devices
    results = []
    for d in devices:
        with jax.default_device(d):
            results.append(np.asarray(jax.lax.platform_dependent(
                jnp.arange(3.0), cpu=lambda v: v * 7, default=lambda v: v)))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], [0.0, 7.0, 14.0])


def test_with_like_platform_rewrites_only_the_like_branch():
    branches = (("cpu",), ("cuda", "rocm"), None)
    assert with_like_platform(branches, "pjrtkit_cpu", "cpu") == (
        ("cpu", "pjrtkit_cpu"), ("cuda", "rocm"), None)
    named = (("cpu",), ("pjrtkit_cpu",), None)
    assert with_like_platform(named, "pjrtkit_cpu", "cpu") == named
    assert with_like_platform((("tpu",), None), "pjrtkit_cpu", "cpu") == (("tpu",), None)
