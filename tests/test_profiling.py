"""PJRTKIT_PROFILE: per-op and per-C-function tables at exit, and nothing when it is off."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    from jax import lax
    f = jax.jit(lambda a, b: jnp.tanh(a @ b).sum())
    g = jax.jit(lambda x: lax.fori_loop(0, 10, lambda i, x: x * 2.0 + 1.0, x))
    a = jnp.ones((32, 32), jnp.float32)
    for _ in range(3):
        f(a, a).block_until_ready()
    g(jnp.ones(3, jnp.float32)).block_until_ready()
    from pjrtkit import profiling
    json.dump({"enabled": profiling.ENABLED, "ops": profiling.op_stats(),
               "c": profiling.c_stats()}, sys.stdout)
""")


def run(profile: str | None):
    env = {k: v for k, v in os.environ.items() if k != "PJRTKIT_PROFILE"}
    env["JAX_PLATFORMS"] = "pjrtkit_cpu"
    if profile is not None:
        env["PJRTKIT_PROFILE"] = profile
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(proc.stdout)


def test_profile_to_stderr_names_real_ops_and_c_functions():
    proc, stats = run("1")
    assert stats["enabled"] is True
    table = proc.stderr
    assert "pjrtkit profile" in table
    # x * 2.0 + 1.0 runs as one multiply-add (rounded once, as XLA rounds it)
    for op in ("stablehlo.dot_general", "stablehlo.tanh", "stablehlo.while",
               "pjrtkit_cpu.multiply_add"):
        assert op in table, op
    for fn in ("PJRT_LoadedExecutable_Execute", "PJRT_Client_Compile", "PJRT_Buffer_Destroy"):
        assert fn in table, fn
    ops, c = stats["ops"], stats["c"]
    assert ops["stablehlo.dot_general"][0] == 3          # one per call of f
    assert ops["pjrtkit_cpu.multiply_add"][0] == 10      # the loop body ran 10 times
    calls, total, self_time = ops["stablehlo.while"]
    assert total >= self_time >= 0                       # body ops are nested, not self time
    assert c["PJRT_LoadedExecutable_Execute"][0] >= 4
    assert c["PJRT_Client_Compile"][0] >= 2


def test_profile_to_a_file_sorted_by_time(tmp_path):
    path = tmp_path / "profile.txt"
    proc, _ = run(str(path))
    assert "pjrtkit profile" not in proc.stderr
    text = path.read_text()
    assert "stablehlo.dot_general" in text and "PJRT_LoadedExecutable_Execute" in text
    c_section = text.split("PJRT C functions by total time")[1].strip().splitlines()[2:]
    totals = [float(line.split()[2]) for line in c_section if line.startswith("PJRT_")]
    assert totals and totals == sorted(totals, reverse=True)


def test_off_by_default_and_nothing_recorded():
    proc, stats = run(None)
    assert stats == {"enabled": False, "ops": {}, "c": {}}
    assert "pjrtkit profile" not in proc.stderr


@pytest.mark.skipif(bool(os.environ.get("PJRTKIT_PROFILE")), reason="profiling is on here")
def test_normal_path_pays_nothing():
    from pjrtkit import profiling
    from pjrtkit.lowering import plan

    assert plan._PLAN is plan.Plan
    fn = lambda: None  # noqa: E731
    assert profiling.wrap_c_function("PJRT_Anything", fn) is fn
