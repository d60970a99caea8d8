"""The template plugin is complete: registered with JAX it runs a jitted program through the
real PJRT C API, and what it lacks is UNIMPLEMENTED at compile time, naming the op, with the
process living on."""
from pathlib import Path

TEMPLATE_DIR = Path(__file__).parent.parent / "plugins"


def test_the_template_backend_runs_a_jitted_program_through_jax(run_python):
    out = run_python("""
        import numpy as np, jax, jax.numpy as jnp
        import template_backend
        from pjrtkit.backend import Backend
        from pjrtkit.jax_glue import register_backend
        register_backend(Backend("template", template_backend))
        jax.config.update("jax_platforms", "pjrtkit_template,cpu")
        dev = jax.devices("pjrtkit_template")[0]
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        y = jax.jit(lambda a: -(a * 2 + 1) - a)(x)
        print(dev.platform, y.tolist(), list(y.devices())[0].platform)
        try:
            jax.jit(jnp.sin)(x).block_until_ready()
        except Exception as exc:
            print(type(exc).__name__, "|", str(exc).splitlines()[0])
        print("alive", jax.jit(lambda a: a + a)(x).tolist())
    """, PYTHONPATH=str(TEMPLATE_DIR))
    assert out.returncode == 0, out.stderr
    first, error, alive = out.stdout.strip().splitlines()
    assert first == "pjrtkit_template [-1.0, -4.0, -7.0, -10.0] pjrtkit_template", first
    assert error.startswith("JaxRuntimeError | UNIMPLEMENTED:"), error
    assert "pjrtkit_template" in error and "stablehlo.sine" in error, error
    assert alive == "alive [0.0, 2.0, 4.0, 6.0]"
