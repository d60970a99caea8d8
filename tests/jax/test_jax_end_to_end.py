"""JAX end to end on pjrtkit_cpu: selection, errors that reach the user, and that the process
lives on after each. Each scenario runs in a fresh interpreter, because JAX fixes its set of
platforms at the first backend use (the ``run_python`` fixture, conftest.py)."""

import pytest


def test_installing_the_plugin_does_not_change_the_default_backend(run_python):
    out = run_python("""
        import jax
        print(jax.default_backend(), jax.devices()[0].platform)
        print(sorted(jax._src.xla_bridge.backends()))
    """)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "cpu cpu"
    assert "pjrtkit_cpu" in second


def test_jax_platforms_selects_pjrtkit_cpu_with_no_code_change(run_python):
    out = run_python("""
        import jax, jax.numpy as jnp
        print(jax.default_backend(), len(jax.devices()), jax.devices()[0].platform)
        x = jnp.arange(6.0).reshape(2, 3)
        y = jax.jit(lambda a: (a @ a.T).sum())(x)
        print(float(y), list(y.devices())[0].platform)
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["pjrtkit_cpu 1 pjrtkit_cpu", "83.0 pjrtkit_cpu"]


def test_pjrtkit_cpu_devices_sets_the_device_count(run_python):
    out = run_python("""
        import jax
        print([d.id for d in jax.devices()], {d.device_kind for d in jax.devices()})
    """, JAX_PLATFORMS="pjrtkit_cpu", PJRTKIT_CPU_DEVICES="4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 1, 2, 3] {'cpu'}"


def test_pjrtkit_backends_can_leave_the_plugin_unregistered(run_python):
    out = run_python("""
        import jax
        print(sorted(jax._src.xla_bridge.backends()))
    """, PJRTKIT_BACKENDS="tpu")
    assert out.returncode == 0, out.stderr
    assert "pjrtkit_cpu" not in out.stdout


def test_an_op_the_plugin_lacks_is_unimplemented_naming_the_op_and_the_process_lives_on(run_python):
    out = run_python("""
        import jax, jax.numpy as jnp
        from jax import lax
        try:
            # QR with fixed pivot columns: SciPy's geqp3 has no input pivots (refused when
            # the pivots are seen, at run time).
            from pjrtkit import jax_compat
            geqp3 = jax_compat.linalg_primitive("geqp3")
            pivots = jnp.array([1, 0, 0], jnp.int32)
            jax.jit(lambda a, p: geqp3.bind(a, p, use_magma=None))(
                jnp.ones((3, 3)), pivots)[0].block_until_ready()
        except Exception as exc:
            print(type(exc).__name__, "|", str(exc).splitlines()[0])
        print("alive", float(jnp.ones(3).sum()))
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    first, alive = out.stdout.strip().splitlines()
    assert first.startswith("JaxRuntimeError | UNIMPLEMENTED:"), first
    assert "@pjrtkit_geqp3" in first and "fixed columns" in first, first
    assert alive == "alive 3.0"


def test_an_exception_in_execute_is_internal_naming_the_executable_and_the_process_lives(
        run_python):
    out = run_python("""
        import jax, jax.numpy as jnp
        import faulty_plugin
        from pjrtkit.backend import Backend
        from pjrtkit.jax_glue import register_backend
        register_backend(Backend("faulty", faulty_plugin))
        jax.config.update("jax_platforms", "pjrtkit_faulty,cpu")
        dev = jax.devices("pjrtkit_faulty")[0]
        x = jax.device_put(jnp.arange(3, dtype=jnp.int32), dev)
        try:
            print(jax.jit(lambda a: a * 3)(x))
        except Exception as exc:
            print(type(exc).__name__, "|", str(exc).splitlines()[0])
        y = jax.device_put(jnp.arange(4, dtype=jnp.int32), dev)
        print("alive", jax.jit(lambda a: a * 3)(y).tolist())
    """)
    assert out.returncode == 0, out.stderr
    first, alive = out.stdout.strip().splitlines()
    assert first.startswith("JaxRuntimeError | INTERNAL:"), first
    assert "FaultyExecutable.execute raised KeyError" in first, first
    assert "pjrtkit_faulty" in first, first
    assert alive == "alive [0, 3, 6, 9]"


def test_donation_is_allowed_and_donated_inputs_read_as_deleted(run_python):
    out = run_python("""
        import jax, jax.numpy as jnp
        from jax._src.interpreters import mlir
        x = jnp.arange(4.0)  # the first backend use registers the plugins
        assert "pjrtkit_cpu" in mlir._platforms_with_donation
        f = jax.jit(lambda a: a + 1, donate_argnums=0)
        y = f(x)
        print(y.tolist(), x.is_deleted())
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1.0, 2.0, 3.0, 4.0] True"


def test_compiled_as_text_reads_the_optimized_program(run_python):
    """jaxlib turns PJRT_Executable_OptimizedProgram (the bytes Compile was given) into HLO."""
    out = run_python("""
        import jax, jax.numpy as jnp
        f = jax.jit(lambda a, b: jnp.tanh(a @ b))
        c = f.lower(jnp.ones((2, 3)), jnp.ones((3, 4))).compile()
        text = c.as_text()
        print(text.splitlines()[0].split(",")[0])
        print("tanh" in text and "dot" in text and "f32[2,4]" in text)
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["HloModule", "jit__lambda", "True"], out.stdout


def test_an_error_raised_while_jaxlib_destroys_buffers_reaches_the_user_intact(run_python):
    # jaxlib destroys buffers while the exception is propagating; a callback entered with a
    # pending Python exception used to replace it with SystemError.
    out = run_python("""
        import jax, jax.numpy as jnp
        for _ in range(3):
            try:
                jnp.linalg.cholesky(jnp.eye(3) * 2.0)
            except Exception as exc:
                print(type(exc).__name__, "|", str(exc).splitlines()[0][:60])
        print("alive")
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "alive"
    assert all(line.startswith("JaxRuntimeError | UNIMPLEMENTED:") for line in lines[:-1]), lines
    assert "SystemError" not in out.stderr


def test_aot_compile_against_a_topology_then_load_and_run_on_the_live_client(run_python):
    """Compile-only topology (pjrtkit_make_topology) -> PJRT_Compile -> serialize -> load."""
    out = run_python("""
        import jax, jax.numpy as jnp
        from jax.experimental import topologies
        from jax.experimental.serialize_executable import serialize, deserialize_and_load
        print(float(jnp.ones(3).sum()))  # a live client exists first
        topo = topologies.get_topology_desc("cpu:2", platform="pjrtkit_cpu")
        print(len(topo.devices))
        spec = jax.ShapeDtypeStruct((4,), jnp.float32,
                                    sharding=jax.sharding.SingleDeviceSharding(topo.devices[0]))
        compiled = jax.jit(lambda x: x * 2 + 1).trace(spec).lower().compile()
        print(compiled.cost_analysis()["flops"] > 0)
        payload, in_tree, out_tree = serialize(compiled)
        loaded = deserialize_and_load(payload, in_tree, out_tree)
        print(loaded(jnp.arange(4.0, dtype=jnp.float32)).tolist())
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines() == ["3.0", "2", "True", "[1.0, 3.0, 5.0, 7.0]"]


def test_a_program_with_scheduling_hints_runs_as_on_xla_cpu(run_python):
    # jax.experimental.control_deps (jax 0.10) emits custom_call @control_dep: an order for
    # XLA's scheduler that changes no value; the core drops it before any plugin sees it.
    pytest.importorskip("jax.experimental.control_deps", reason="jax 0.10 only (gone from 0.11)")
    out = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        from jax.experimental.control_deps import schedule
        def f(x):
            a, b, c = jnp.sin(x @ x), jnp.cos(x + 1), jnp.exp(x * 0.5)
            schedule([c, b, a])
            return a + b + c
        x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
        assert 'control_dep' in jax.jit(f).lower(x).as_text()
        ours = jax.jit(f)(jax.device_put(x, jax.devices("pjrtkit_cpu")[0]))
        xla = jax.jit(f)(jax.device_put(x, jax.devices("cpu")[0]))
        np.testing.assert_allclose(np.asarray(ours), np.asarray(xla), rtol=2e-6)
        print(list(ours.devices())[0].platform)
    """, JAX_PLATFORMS="pjrtkit_cpu,cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["pjrtkit_cpu"]
