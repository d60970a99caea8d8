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


COLUMN_MAJOR = Layout(major_to_minor=(1, 0))  # JAX's spelling: dimension 1 is the major one


def _single(device):
    from jax.sharding import SingleDeviceSharding

    return SingleDeviceSharding(device)


def test_a_column_major_input_is_reported_and_computed_as_on_xla(devices):
    from jax.experimental.layout import Format

    x = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    results = []
    for device in devices:
        f = jax.jit(lambda v: v * 2 + 1, in_shardings=Format(COLUMN_MAJOR, _single(device)))
        compiled = f.lower(x).compile()
        assert compiled.input_formats[0][0].layout.major_to_minor == (1, 0), device.platform
        out = f(x)  # JAX lays the row-major host array out as the program asks
        results.append((np.asarray(out), out.format.layout.major_to_minor))
    assert results[0][1] == results[1][1]
    np.testing.assert_array_equal(results[0][0], results[1][0])


def test_device_put_and_outputs_with_a_column_major_layout_as_on_xla(devices):
    from jax.experimental.layout import Format

    x = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    seen = []
    for device in devices:
        placed = jax.device_put(x, Format(COLUMN_MAJOR, _single(device)))
        assert placed.format.layout.major_to_minor == (1, 0), device.platform
        f = jax.jit(lambda v: jnp.sin(v).T, out_shardings=Format(COLUMN_MAJOR, _single(device)))
        out = f(placed)
        assert out.format.layout.major_to_minor == (1, 0), device.platform
        seen.append((np.asarray(placed), np.asarray(out), np.asarray(jax.jit(jnp.cos)(out))))
    for ours, theirs in zip(*seen):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(seen[0][0], x)


def test_layout_modes_are_read_as_xla_writes_them():
    import pytest

    from pjrtkit.errors import Unimplemented
    from pjrtkit.runtime.buffer import in_layout
    from pjrtkit.stablehlo.entry_layouts import parse_layout_mode

    assert parse_layout_mode("{0,1}", 2, "p") == (0, 1)
    assert parse_layout_mode("{1,0}", 2, "p") is None  # row-major
    assert parse_layout_mode("default", 2, "p") is None and parse_layout_mode("auto", 3, "p") is None
    assert parse_layout_mode("{}", 0, "p") is None
    with pytest.raises(Unimplemented, match="concrete layouts without tiles"):
        parse_layout_mode("{1,0:T(8,128)}", 2, "parameter 0")
    with pytest.raises(Unimplemented, match="not a permutation"):
        parse_layout_mode("{0,0}", 2, "parameter 0")
    # a column-major view of dense memory: element (i, j) lives at j * rows + i
    memory = np.zeros(6, np.int32)
    in_layout(memory, (2, 3), (0, 1))[...] = np.arange(6).reshape(2, 3)
    assert memory.tolist() == [0, 3, 1, 4, 2, 5]


def test_a_sharded_array_put_column_major_over_four_devices(run_python):
    result = run_python("""
        import jax, numpy as np
        from jax.experimental.layout import Format, Layout
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        x = np.arange(256, dtype=np.int32).reshape(16, 16)
        seen = []
        for platform in ("pjrtkit_cpu", "cpu"):
            mesh = Mesh(np.array(jax.devices(platform)[:4]).reshape(2, 2), ("x", "y"))
            s = NamedSharding(mesh, P("x", "y"))
            placed = jax.device_put(x, Format(Layout(major_to_minor=(1, 0)), s))
            out = jax.jit(lambda v: v @ v.T)(placed)
            seen.append((placed.format.layout.major_to_minor, np.asarray(placed),
                         np.asarray(out)))
        assert seen[0][0] == seen[1][0] == (1, 0), seen[0][0]
        np.testing.assert_array_equal(seen[0][1], x)
        np.testing.assert_array_equal(seen[0][2], seen[1][2])
        print("ok")
    """, JAX_PLATFORMS="pjrtkit_cpu,cpu", PJRTKIT_CPU_DEVICES="4",
        XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
