"""The example training programs run on the backend under test and match XLA's CPU backend.

Each example runs as a subprocess (it must own JAX's platform setup, which a test process has
usually fixed already) with the interpreter running the tests, so each pinned set (make
JAX=...) runs the examples on its own JAX. The backend comes from PJRTKIT_EXAMPLE_BACKEND
(default ``pjrtkit_cpu``); ``PJRTKIT_EXAMPLE_BACKEND=cpu`` checks the examples themselves by
comparing XLA's CPU backend with itself.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
PYTHON = sys.executable
BACKEND = os.environ.get("PJRTKIT_EXAMPLE_BACKEND", "pjrtkit_cpu")
STEPS = 3
# Generous: a backend written in Python may take a while to compile and run a training step.
TIMEOUT_SECONDS = float(os.environ.get("PJRTKIT_EXAMPLE_TIMEOUT", "900"))

SCRIPTS = ["mlp_train.py", "cnn_train.py", "transformer_train.py"]

# StableHLO ops each example exists to exercise; a "simplified" model that loses one of them
# no longer proves what its docstring claims.
REQUIRED_OPS = {
    "mlp_train.py": {"dot_general", "maximum", "exponential", "log", "reduce"},
    "cnn_train.py": {"convolution", "reduce_window", "select_and_scatter", "pad", "sqrt",
                     "power"},
    "transformer_train.py": {"gather", "scatter", "iota", "compare", "select", "rsqrt", "tanh",
                             "exponential", "log", "dot_general", "minimum", "sqrt"},
}


def run_python(args: list[str], *, env_overrides: dict[str, str | None] | None = None,
               timeout: float = TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for key, value in (env_overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([PYTHON, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_example(script: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return run_python([str(EXAMPLES / script), *args], **kwargs)


def explain(result: subprocess.CompletedProcess) -> str:
    return (f"exit status {result.returncode}\n--- stdout ---\n{result.stdout}"
            f"\n--- stderr (last 4000 chars) ---\n{result.stderr[-4000:]}")


def assert_passed(result: subprocess.CompletedProcess, *, backend: str, steps: int) -> None:
    assert result.returncode == 0, explain(result)
    out = result.stdout
    assert re.search(rf"^backend under test: {re.escape(backend)}:\d+ ", out, re.M), explain(result)
    assert re.search(r"^reference: +cpu:\d+ ", out, re.M), explain(result)
    assert re.search(rf"^step +loss\[{re.escape(backend)}\] +loss\[xla cpu\] +rel diff$", out,
                     re.M), explain(result)
    rows = re.findall(r"^ *(\d+) +(\S+) +(\S+) +(\S+)$", out, re.M)
    assert [int(row[0]) for row in rows] == list(range(1, steps + 1)), explain(result)
    assert re.search(r"^max rel diff: \S+ at step \d+ \(tolerance \S+\)$", out, re.M), \
        explain(result)
    assert re.search(rf"^PASS: \w+ on {re.escape(backend)} matches XLA cpu for {steps} steps",
                     out, re.M), explain(result)
    assert "FAIL" not in out, explain(result)


@pytest.mark.long
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_matches_xla_cpu(script):
    result = run_example(script, "--backend", BACKEND, "--steps", str(STEPS))
    assert_passed(result, backend=BACKEND, steps=STEPS)


def test_example_restores_cpu_when_jax_platforms_names_only_the_backend():
    # The user's JAX_PLATFORMS=<backend> alone would hide the reference; the example re-adds it.
    result = run_example("mlp_train.py", "--backend", BACKEND, "--steps", "2",
                         env_overrides={"JAX_PLATFORMS": BACKEND})
    assert_passed(result, backend=BACKEND, steps=2)


def test_unknown_backend_is_a_setup_error_not_a_pass():
    result = run_example("mlp_train.py", "--backend", "no_such_platform", "--steps", "1",
                         timeout=120)
    assert result.returncode == 2, explain(result)
    assert "cannot start JAX platform 'no_such_platform'" in result.stderr, explain(result)
    assert "PASS" not in result.stdout, explain(result)


def test_non_finite_loss_fails():
    # The harness must turn a NaN loss into FAIL and a non-zero exit, even when both sides agree.
    program = textwrap.dedent("""
        import sys
        import numpy as np
        import _harness

        def build(seed, steps):
            return _harness.Experiment(
                name="nan", state={"w": np.ones((2,), np.float32)},
                batches=[{"x": np.zeros((2,), np.float32)}] * steps,
                train_step=lambda state, batch: (state, (state["w"] * batch["x"]).sum() / 0.0),
                tolerance=1e-5)

        sys.exit(_harness.main(build, description="nan", default_steps=1,
                               argv=["--backend", "cpu", "--steps", "2"]))
    """)
    result = run_python(["-c", program], env_overrides={"PYTHONPATH": str(EXAMPLES)},
                        timeout=120)
    assert result.returncode == 1, explain(result)
    assert re.search(r"^FAIL: nan on cpu: step 1: loss is not finite", result.stdout, re.M), \
        explain(result)


@pytest.fixture(scope="module")
def lowered_ops() -> dict[str, set[str]]:
    """StableHLO op names in each example's lowered training step (lowered for XLA cpu)."""
    program = textwrap.dedent("""
        import importlib, json, re, sys
        import jax
        jax.config.update("jax_platforms", "cpu")
        ops = {}
        for script in sys.argv[1:]:
            experiment = importlib.import_module(script.removesuffix(".py")).build(0, 1)
            lowered = jax.jit(experiment.train_step).lower(experiment.state,
                                                           experiment.batches[0])
            ops[script] = sorted(set(re.findall(r"stablehlo\\.([a-z_]+)", lowered.as_text())))
        print("OPS " + json.dumps(ops))
    """)
    result = run_python(["-c", program, *SCRIPTS], env_overrides={"PYTHONPATH": str(EXAMPLES)},
                        timeout=300)
    assert result.returncode == 0, explain(result)
    # Only the marked line: a plugin that logs to stdout must not break the parse.
    [line] = [line for line in result.stdout.splitlines() if line.startswith("OPS ")]
    return {script: set(names) for script, names in json.loads(line[4:]).items()}


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_exercises_the_ops_it_claims(script, lowered_ops):
    missing = REQUIRED_OPS[script] - lowered_ops[script]
    assert not missing, f"{script} no longer lowers to {sorted(missing)}"
