"""The suite can fail: on a toy backend with exactly three known faults it exits non-zero and
reports exactly the checks those faults break (and no others) as FAIL.

The suite runs in a subprocess: JAX fixes its platforms once per process. Layer 3 runs its op
families (and complex numbers, where atan2 hides in ``jnp.angle``), not the rest of JAX's
surface (dtypes, linalg, fft, callbacks, training steps): none of those goes through the one
wrong rule, and the whole table on the cpu plugin already runs in make test (twice).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent

# Fault 1, wrong results in stablehlo.atan2: every layer-3 case of jnp.arctan2 (and only those).
WRONG_OP_FAILS = {f"jax.elementwise.atan2[{dtype}-3x4]"
                  for dtype in ("float16", "bfloat16", "float32", "float64")}
# Fault 2, PJRT_Executable_NumOutputs answers UNIMPLEMENTED: the mandatory function's check.
MISSING_FUNCTION_FAILS = {"abi.executable.num_outputs"}
# Fault 3, LookupDevice answers NOT_FOUND for unknown ids instead of INVALID_ARGUMENT: both
# lookup checks, and the struct_size check that reads that error's code through a larger struct.
WRONG_CODE_FAILS = {"abi.client.lookup_device_negative", "abi.client.lookup_device_out_of_range",
                    "abi.struct_size.larger_error_get_code"}

EXPECTED_FAILS = WRONG_OP_FAILS | MISSING_FUNCTION_FAILS | WRONG_CODE_FAILS
CHECKED = ["abi.", "hooks."] + [f"jax.{family}." for family in (
    "elementwise", "compare", "select", "convert", "reduce", "dot", "convolution",
    "reduce_window", "indexing", "sort", "cumulative", "control_flow", "random", "shape",
    "structure", "autodiff", "host_input", "size", "complex")]
# jnp.angle of a complex number is atan2 of its parts, and so is the imaginary part of a complex
# log: FAIL when the rules take complex numbers, UNSUPPORTED where complex is refused at compile.
WRONG_OP_FAILS_WITH_COMPLEX = {f"jax.complex.{op}[{dtype}-3x4]" for op in ("angle", "log")
                               for dtype in ("complex64", "complex128")}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES")}


@pytest.mark.long
def test_the_faulty_toy_backend_fails_exactly_its_known_faults(tmp_path):
    report = tmp_path / "toy.json"
    markdown = tmp_path / "toy.md"
    done = subprocess.run([sys.executable, str(HERE / "toy_faulty.py"), "--json", str(report),
                           "--markdown", str(markdown), "--check", *CHECKED],
                          capture_output=True, text=True, timeout=1200, env=_clean_env(),
                          cwd=HERE)
    assert report.exists(), done.stderr[-4000:]
    data = json.loads(report.read_text())
    outcomes = {c["id"]: c["outcome"] for c in data["checks"]}
    for check_id in WRONG_OP_FAILS_WITH_COMPLEX:
        assert outcomes[check_id] in ("FAIL", "UNSUPPORTED"), (check_id, outcomes[check_id])
    fails = {i for i, outcome in outcomes.items() if outcome == "FAIL"
             and i not in WRONG_OP_FAILS_WITH_COMPLEX}
    assert fails == EXPECTED_FAILS, (
        f"unexpected FAIL: {sorted(fails - EXPECTED_FAILS)}; "
        f"expected but not FAIL: {sorted(EXPECTED_FAILS - fails)}")
    assert done.returncode == 1, done.stdout[-2000:]
    assert data["summary"]["fail"] == len(EXPECTED_FAILS) + sum(
        outcomes[i] == "FAIL" for i in WRONG_OP_FAILS_WITH_COMPLEX)
    # Every layer ran and mostly passed: the faults did not take the suite down.
    layers = {c["layer"] for c in data["checks"]}
    assert layers == {"abi", "hooks", "jax"}
    assert data["summary"]["pass"] > 500
    # Each FAIL says what was expected and what came back.
    by_id = {c["id"]: c for c in data["checks"]}
    assert "NOT_FOUND" in by_id["abi.client.lookup_device_negative"]["actual"]
    assert "INVALID_ARGUMENT" in json.dumps(by_id["abi.client.lookup_device_negative"]["expected"])
    assert "UNIMPLEMENTED" in by_id["abi.executable.num_outputs"]["detail"]
    atan2 = by_id["jax.elementwise.atan2[float32-3x4]"]
    assert atan2["expected"] and atan2["actual"] and atan2["expected"] != atan2["actual"]
    text = markdown.read_text()
    assert "**Not conformant**" in text
    for check_id in EXPECTED_FAILS:
        assert f"### `{check_id}`" in text
