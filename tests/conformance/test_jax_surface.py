"""Layer 3 measures JAX's surface, not the plugin's: on the small test backends (the template,
six ops on float32/int32; the opaque backend, float32 add/multiply on non-NumPy payloads) what
they lack is UNSUPPORTED, never FAIL and never skipped, and the report says how much of the
surface they cover, below 100%, naming what is missing.

Each backend runs in a subprocess (JAX fixes its platforms once per process), on a sample of
the table that spans every part of the surface: dtypes, complex, linalg, fft, random, host
callbacks and a training step.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from pjrtkit.conformance.checks import CheckResult, Outcome
from pjrtkit.conformance.report import to_markdown
from pjrtkit.conformance.results import SuiteResult

PLUGINS = pathlib.Path(__file__).resolve().parents[1] / "plugins"

SAMPLE = ["jax.elementwise.add[float32-3x4]", "jax.elementwise.negate[float32-3x4]",
          "jax.dtype.*[float32-3x4]", "jax.dtype.*[float8_e4m3fn-3x4]",
          "jax.dtype.transfer[int4-3x4]", "jax.complex.add[*", "jax.linalg.eigh[float32-*",
          "jax.fft.fft[complex64-*", "jax.random.eager_prngkey_normal[*",
          "jax.random.typed_key_normal[*", "jax.callbacks.pure_callback[*",
          "jax.callbacks.debug_print[*", "jax.program.mlp_adam[*"]

RUN_BACKEND = textwrap.dedent("""
    import importlib, sys
    from pjrtkit.backend import Backend
    from pjrtkit.conformance.runner import main_for_backend
    name = sys.argv[1]
    backend = Backend(name, importlib.import_module(name + "_backend"))
    sys.exit(main_for_backend(backend, sys.argv[2:]))
""")


def _run_sample(name: str, tmp_path) -> tuple[subprocess.CompletedProcess, dict, str]:
    report, markdown = tmp_path / f"{name}.json", tmp_path / f"{name}.md"
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES")}
    env["PYTHONPATH"] = str(PLUGINS) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", RUN_BACKEND, name, "--layer", "jax",
                           "--json", str(report), "--markdown", str(markdown), "--check",
                           *SAMPLE], capture_output=True, text=True, timeout=900, env=env)
    assert report.exists(), done.stderr[-4000:]
    return done, json.loads(report.read_text()), markdown.read_text()


@pytest.mark.parametrize("name", ["template", "opaque"])
def test_a_small_backend_shows_what_it_lacks_as_unsupported_and_covers_less_than_all(
        name, tmp_path):
    done, data, markdown = _run_sample(name, tmp_path)
    outcomes = {c["id"]: c["outcome"] for c in data["checks"]}
    failed = {i: c["detail"] for c in data["checks"] if c["outcome"] == "FAIL"
              for i in [c["id"]]}
    assert not failed, failed  # lacking something is never a FAIL
    assert done.returncode == 0, done.stdout[-2000:]
    assert "SKIP" not in outcomes.values()  # XLA's cpu runs every sampled case
    assert outcomes["jax.elementwise.add[float32-3x4]"] == "PASS"
    for absent in ("jax.complex.add[complex64-3x4]", "jax.linalg.eigh[float32-5x5]",
                   "jax.fft.fft[complex64-4x8]", "jax.dtype.add[float8_e4m3fn-3x4]",
                   "jax.callbacks.pure_callback[float32-3x4]",
                   "jax.program.mlp_adam[float32-train_step]"):
        assert outcomes[absent] == "UNSUPPORTED", (absent, outcomes[absent])
    surface = data["jax_surface"]
    assert surface["checks"] == len(outcomes)
    assert 0 < surface["pass"] < surface["checks"] and surface["percent"] < 100
    assert {"JAX complex", "JAX linalg", "JAX fft", "JAX host callbacks",
            "JAX training programs", "JAX dtype float8_e4m3fn"} <= set(surface["unsupported"])
    assert f"covers {surface['percent']:g}% of the JAX surface" in done.stdout
    assert "**Conformant**:" not in markdown  # never plainly conformant without complex
    assert "Conformant on what it supports, not on all of JAX" in markdown
    assert "unsupported: " in markdown and "JAX complex (2 checks)" in markdown


def _suite(outcomes: dict[str, tuple[Outcome, str]]) -> SuiteResult:
    results = [CheckResult(i, "jax", outcome, capability=capability)
               for i, (outcome, capability) in outcomes.items()]
    results.append(CheckResult("hooks.topology.unique_ids", "hooks", Outcome.PASS))
    return SuiteResult(info={"target": "t", "platform": "pjrtkit_t"}, results=results,
                       durations={}, duration_seconds=0.0, layers=("hooks", "jax"))


def test_the_verdict_says_conformant_alone_only_when_all_of_the_surface_passes():
    full = _suite({"jax.a.b[float32-3]": (Outcome.PASS, "JAX a"),
                   "jax.a.c[float32-3]": (Outcome.SKIP, "JAX a")})
    assert "**Conformant**: no check failed, and the plugin covers 100% of the JAX surface " \
           "(1 of 1 checks)" in to_markdown(full)
    lacking = _suite({"jax.a.b[float32-3]": (Outcome.PASS, "JAX a"),
                      "jax.a.b[float64-3]": (Outcome.PASS, "JAX a"),
                      "jax.complex.add[complex64-3]": (Outcome.UNSUPPORTED, "JAX complex")})
    surface = lacking.jax_surface()
    assert surface == {"checks": 3, "pass": 2, "percent": 66.6, "fail": 0, "skip": 0,
                       "unsupported": {"JAX complex": 1}}
    text = to_markdown(lacking)
    assert "**Conformant**:" not in text
    assert "covers 66.6% of the JAX surface (2 of 3 checks); unsupported: JAX complex " \
           "(1 check)" in text
    almost = _suite({f"jax.a.b[float32-{i}]": (Outcome.PASS, "JAX a") for i in range(1999)}
                    | {"jax.c.d[float32-1]": (Outcome.UNSUPPORTED, "JAX c")})
    assert almost.jax_surface()["percent"] == 99.9  # rounded down: never reads 100%
    failing = _suite({"jax.a.b[float32-3]": (Outcome.FAIL, "JAX a")})
    assert "**Not conformant**" in to_markdown(failing)
    no_jax = SuiteResult(info={"target": "t"}, results=[], durations={},
                         duration_seconds=0.0, layers=("hooks",))
    assert no_jax.jax_surface() is None
    assert "the JAX surface was not measured" in to_markdown(no_jax)
