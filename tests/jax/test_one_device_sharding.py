"""Programs that JAX compiles with Shardy annotations on one device (jax.random on its own,
shardings and shard_map over a one-device mesh, an optax-style training step) run on
pjrtkit_cpu and agree with XLA's CPU backend (issue 9). They run in one child interpreter
(JAX fixes its platforms at the first backend use); one JSON line per program comes back.
The complex-constant program is issue 13's: it used to abort the process inside jaxlib's
bindings while the loader read the constant; it must run and match XLA."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
from one_device_programs import PROGRAMS  # noqa: E402 - the script beside this file

# One xdist worker runs this module (make test passes `--dist loadgroup`): its module fixture
# starts child interpreters, and each worker given some of its tests would start them all again.
pytestmark = pytest.mark.xdist_group("test_one_device_sharding")


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS",
                                                             "PJRTKIT_CPU_DEVICES")}
    child = subprocess.run([sys.executable, os.path.join(HERE, "one_device_programs.py")],
                           capture_output=True, text=True, env=env, timeout=600)
    records = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    assert child.returncode == 0, child.stderr[-3000:]
    return {r["name"]: r["outcome"] for r in records}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_matches_xla_cpu(outcomes, name):
    assert outcomes[name] == "ok"

