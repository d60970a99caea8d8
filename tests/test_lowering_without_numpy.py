"""``pjrtkit.lowering`` (registry, payloads, plan builder) needs no NumPy, so a backend whose
payloads are not NumPy arrays can plan with it. In a fresh interpreter where ``import numpy``
and ``import ml_dtypes`` fail from the start, the lowering modules import, and a program (an
iota folded at build time by the backend's own kernel, a multiply and an add) is planned and
run with the opaque test backend (``plugins/opaque_backend.py``); the result matches XLA's cpu.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
from jax import lax

from pjrtkit.testing.programs import run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

PLUGINS = pathlib.Path(__file__).parent / "plugins"

CODE = textwrap.dedent("""
    import json, sys
    for name in ("numpy", "ml_dtypes"):
        sys.modules[name] = None  # from here on, `import numpy` raises ImportError
    import pjrtkit.lowering.payloads, pjrtkit.lowering.registry, pjrtkit.lowering.plan
    from pjrtkit.stablehlo.ir import Block, Function, Op, Program, Region, TensorType, Value
    import opaque_backend

    class Float32:  # the IR's dtype, as far as this backend reads it (NumPy is not here)
        name = "float32"

    f32 = TensorType((3,), Float32())
    x, i, product, total = (Value(n, f32) for n in range(4))
    ops = [Op("stablehlo.iota", (), (i,), {"iota_dimension": 0}),
           Op("stablehlo.multiply", (x, i), (product,), {}),
           Op("stablehlo.add", (product, i), (total,), {}),
           Op("func.return", (total,), (), {})]
    main = Function("main", (x,), (f32,), Region([Block((x,), ops)]))
    program = Program({"main": main}, "main", {})
    plan = pjrtkit.lowering.plan.build_plan(program, opaque_backend.RULES)
    (result,) = plan(opaque_backend.Opaque(json.loads(sys.argv[1]), (3,), Float32()))
    print(json.dumps({"steps": [op.name for *_, op in plan.steps], "got": list(result.values),
                      "numpy": sys.modules["numpy"] is None}))
""")


def scaled_by_index(x):
    i = lax.iota(np.float32, 3)
    return x * i + i


def test_the_plan_builder_imports_plans_and_runs_without_numpy():
    x = np.array([0.5, -1.25, 3.1], np.float32)
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = str(PLUGINS) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", CODE, json.dumps(x.tolist())],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["numpy"], "NumPy was imported after all"
    assert out["steps"] == ["stablehlo.multiply", "stablehlo.add"]  # the iota was folded
    (want,) = run_on_xla_cpu(scaled_by_index, (x,))
    assert_close(np.array(out["got"], np.float32), want)
