"""``jax.experimental.layout`` on pjrtkit_cpu: the ``LayoutConstraint`` custom call of
``with_layout_constraint`` (and of a ``Format`` in ``with_sharding_constraint``) is the value
unchanged, on one device (forwarded by the core) and over four (a rule: XLA's partitioner keeps
the call), with the same values as XLA's CPU backend."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.layout import Layout, with_layout_constraint


def test_with_layout_constraint_on_one_device_as_on_xla(devices):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)

    def f(v):
        return with_layout_constraint(jnp.sin(v).T, Layout(major_to_minor=(1, 0))) * 2

    ours, theirs = (np.asarray(jax.jit(f)(jax.device_put(x, d))) for d in devices)
    np.testing.assert_array_equal(ours, theirs)
    assert "LayoutConstraint" in jax.jit(f).lower(x).as_text()


def test_a_format_in_with_sharding_constraint_over_four_devices(run_python):
    result = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.experimental.layout import Format, Layout
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        outs = []
        for platform in ("pjrtkit_cpu", "cpu"):
            mesh = Mesh(np.array(jax.devices(platform)[:4]).reshape(2, 2), ("x", "y"))
            s = NamedSharding(mesh, P("x"))
            x = jax.device_put(np.arange(16 * 8, dtype=np.int32).reshape(16, 8), s)
            f = jax.jit(lambda v: jax.lax.with_sharding_constraint(
                v.T + 1, Format(Layout(major_to_minor=(0, 1)), s)))
            assert "LayoutConstraint" in f.lower(x).as_text()
            outs.append(np.asarray(f(x)))
        np.testing.assert_array_equal(outs[0], outs[1])
        print("ok")
    """, JAX_PLATFORMS="pjrtkit_cpu,cpu", PJRTKIT_CPU_DEVICES="4",
        XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
