"""Programs that JAX compiles with Shardy annotations on one device (jax.random on its own,
shardings and shard_map over a one-device mesh, an optax-style training step) run on
pjrtkit_cpu and agree with XLA's CPU backend (issue 9). They run in one child interpreter
(JAX fixes its platforms at the first backend use); one JSON line per program comes back."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
from one_device_programs import PROGRAMS  # noqa: E402 - the script beside this file

# Running complex programs needs complex kernels, which pjrtkit_cpu does not have yet: the
# program must load and either match XLA (once the kernels exist) or fail with UNIMPLEMENTED
# naming the op and the dtype; never abort.
EXPECTED_UNIMPLEMENTED = {"complex-constant": ("stablehlo.constant", "complex64")}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS",
                                                             "PJRTKIT_CPU_DEVICES")}
    child = subprocess.run([sys.executable, os.path.join(HERE, "one_device_programs.py")],
                           capture_output=True, text=True, env=env, timeout=600)
    records = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    assert child.returncode == 0, child.stderr[-3000:]
    return {r["name"]: r["outcome"] for r in records}


@pytest.mark.parametrize("name", [n for n in PROGRAMS if n not in EXPECTED_UNIMPLEMENTED])
def test_program_matches_xla_cpu(outcomes, name):
    assert outcomes[name] == "ok"


@pytest.mark.parametrize("name", list(EXPECTED_UNIMPLEMENTED))
def test_program_loads_and_matches_or_is_unimplemented_naming_op_and_dtype(outcomes, name):
    outcome = outcomes[name]
    if outcome == "ok":
        return  # the plugin has the kernels now, and the numbers matched XLA's
    op, dtype = EXPECTED_UNIMPLEMENTED[name]
    assert "UNIMPLEMENTED" in outcome and op in outcome and dtype in outcome, outcome
