"""The core serves a backend whose payloads are not NumPy arrays (``plugins/opaque_backend.py``:
payloads are ``Opaque`` objects, kernels plain Python): a real jitted JAX program with
constants is planned (constants made and folded by the backend), run, and matches XLA's cpu."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np

from pjrtkit.lowering.plan import build_plan
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

PLUGINS = pathlib.Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))

import opaque_backend  # noqa: E402  (found through the path above, like the subprocess does)


def scale_and_shift(x):
    # The dtype is spelled out because the cpu plugin's tests turn on jax_enable_x64 for the
    # whole session, where jnp.arange(3.0) alone would be float64 (the subprocess below runs
    # the plain ``x * 2.0 + jnp.arange(3.)`` with JAX's defaults).
    return x * 2.0 + jnp.arange(3.0, dtype=x.dtype)


X = np.array([0.5, -1.25, 3.1], np.float32)


def test_constants_are_made_and_folded_by_the_backend_on_its_own_payloads():
    program = lower_program(scale_and_shift, X)
    plan = build_plan(program, opaque_backend.RULES)
    # constant -> broadcast_in_dim and iota were folded at build time by the backend's own
    # kernels; only the two ops that read the argument are left to run.
    assert [op.name for _, _, _, op in plan.steps] == ["stablehlo.multiply", "stablehlo.add"]
    assert plan.constants and all(isinstance(c, opaque_backend.Opaque)
                                  for c in plan.constants.values())
    x = opaque_backend.Opaque(X.tolist(), X.shape, X.dtype)
    (result,) = plan(x)
    assert isinstance(result, opaque_backend.Opaque)
    got = opaque_backend.pjrtkit_transfer_to_host(result, device=None, memory_kind="device")
    (want,) = run_on_xla_cpu(scale_and_shift, (X,))
    assert_close(got, want)


def test_an_op_the_opaque_backend_lacks_is_unimplemented_naming_it():
    program = lower_program(lambda x: jnp.sin(x) * 2.0, X)
    try:
        build_plan(program, opaque_backend.RULES)
    except Exception as exc:  # noqa: BLE001 - the type is checked right below
        assert type(exc).__name__ == "Unimplemented"
        assert "pjrtkit_opaque" in str(exc) and "stablehlo.sine" in str(exc)
    else:
        raise AssertionError("a program with sine was planned by a backend without sine")


def test_a_jitted_program_runs_on_the_opaque_backend_through_the_core():
    # A fresh interpreter: JAX fixes its platforms at the first backend use.
    code = textwrap.dedent("""
        import json
        import jax, jax.numpy as jnp, numpy as np
        import opaque_backend
        from pjrtkit.backend import Backend
        from pjrtkit.jax_glue import register_backend
        register_backend(Backend("opaque", opaque_backend))
        jax.config.update("jax_platforms", "pjrtkit_opaque,cpu")
        f = jax.jit(lambda x: x * 2.0 + jnp.arange(3.0))
        x = np.array([0.5, -1.25, 3.1], np.float32)
        on_opaque = jax.device_put(x, jax.devices("pjrtkit_opaque")[0])
        got = f(on_opaque)
        again = f(got)  # a result of the backend fed back to it
        want = f(jax.device_put(x, jax.devices("cpu")[0]))
        try:
            jax.jit(jnp.sin)(on_opaque).block_until_ready()
            error = ""
        except Exception as exc:
            error = str(exc).splitlines()[0]
        print(json.dumps({"platform": got.devices().pop().platform, "got": got.tolist(),
                          "again": again.tolist(), "want": want.tolist(),
                          "want_again": f(want).tolist(), "error": error}))
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES")}
    env["PYTHONPATH"] = str(PLUGINS) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["platform"] == "pjrtkit_opaque"
    assert_close(np.array(out["got"], np.float32), np.array(out["want"], np.float32))
    assert_close(np.array(out["again"], np.float32), np.array(out["want_again"], np.float32))
    assert out["error"].startswith("UNIMPLEMENTED") and "pjrtkit_opaque" in out["error"], out


def _hooks(module):
    return {name for name in dir(module) if name.startswith("pjrtkit_")}


def test_the_opaque_backend_is_the_template_with_its_payloads_replaced():
    # Made from the template (copy it, replace payloads and rules): it answers every hook the
    # template answers, so a change to the template that a new backend must follow shows here.
    import template_backend

    assert _hooks(template_backend) <= _hooks(opaque_backend), \
        sorted(_hooks(template_backend) - _hooks(opaque_backend))
    capabilities = opaque_backend.pjrtkit_capabilities()
    assert capabilities.dtypes == {"float32"}
    assert {"stablehlo.add", "stablehlo.multiply", "stablehlo.constant"} <= capabilities.ops
    assert opaque_backend.pjrtkit_make_topology("opaque", {}).devices[0].kind == "opaque"
    assert opaque_backend.pjrtkit_make_topology("v5e:2x4", {}) is None
