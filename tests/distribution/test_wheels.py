"""pjrtkit installed as a user installs it: from wheels, into a fresh virtual environment.

`make wheels` builds every distribution; the core and cpu wheels go into a new venv in a
temporary folder (third-party packages from the package index, pinned by this JAX set's
constraints file), with PYTHONPATH unset and the repository out of sight. Without pytest there:
`pjrtkit list`, `pjrtkit info cpu` and a JAX program work, and `pjrtkit conformance` names the
extra it needs; with `pjrtkit[conformance]` the suite's ABI and hook layers pass. Then every
wheel installs into the same venv together. Long (minutes: it installs JAX): `make test-long`,
which CI runs on the pinned and the newest set.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

from distribution_support import ROOT, clean_env

pytestmark = [pytest.mark.long, pytest.mark.xdist_group("wheels")]


def _jax_set() -> str:
    """make's JAX= for the JAX release this test runs with ("" for the pinned 0.10 set)."""
    import jax

    line = ".".join(jax.__version__.split(".")[:2])
    return line if (ROOT / f"constraints-jax{line}.txt").is_file() else ""


def _constraints() -> pathlib.Path:
    """The pinned set of the JAX release this test runs with."""
    return ROOT / (f"constraints-jax{_jax_set()}.txt" if _jax_set() else "constraints.txt")


def _run(args, *, cwd, env=None, timeout=1800, ok=True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          env=env or clean_env(), timeout=timeout)
    if ok:
        assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheels")
    _run(["make", "--no-print-directory", "wheels", f"WHEELS_DIR={out}", f"JAX={_jax_set()}",
          f"PYTHON={sys.executable}", f"VENV={pathlib.Path(sys.executable).parents[1]}"],
         cwd=ROOT)
    names = sorted(p.name.split("-")[0] for p in out.glob("*.whl"))
    assert names == ["pjrtkit", "pjrtkit_cpu", "pjrtkit_cuda", "pjrtkit_gpu", "pjrtkit_rocm",
                     "pjrtkit_tools", "pjrtkit_tpu"], names
    return out


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, wheels) -> pathlib.Path:
    """A new venv (this interpreter's base Python) with only the core and cpu wheels."""
    folder = tmp_path_factory.mktemp("user")
    venv = folder / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=folder)
    core = next(wheels.glob("pjrtkit-0*.whl"))
    cpu = next(wheels.glob("pjrtkit_cpu-*.whl"))
    _run([venv / "bin/python", "-m", "pip", "install", "-q", "-c", _constraints(), core, cpu],
         cwd=folder)
    return venv


def test_a_plain_install_runs_without_pytest(fresh_venv):
    folder = fresh_venv.parent
    python = fresh_venv / "bin/python"
    where = _run([python, "-c", "import pjrtkit, importlib.util; print(pjrtkit.__file__); "
                  "print(importlib.util.find_spec('pytest'))"], cwd=folder).stdout.split()
    assert pathlib.Path(where[0]).resolve().is_relative_to(fresh_venv.resolve()), where
    assert where[1] == "None", "pytest is installed in a plain install"
    listed = _run([fresh_venv / "bin/pjrtkit", "list"], cwd=folder).stdout
    assert "pjrtkit_cpu" in listed and " ok" in listed, listed
    info = _run([fresh_venv / "bin/pjrtkit", "info", "cpu"], cwd=folder).stdout
    assert "JAX platform pjrtkit_cpu" in info, info
    program = textwrap.dedent("""
        import sys, numpy as np, jax, jax.numpy as jnp
        f = jax.jit(lambda x, y: jnp.tanh(x @ y).sum(axis=0))
        x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
        ours = f(jax.device_put(x, jax.devices("pjrtkit_cpu")[0]), x.T)
        xla = f(jax.device_put(x, jax.devices("cpu")[0]), x.T)
        assert ours.devices() == {jax.devices("pjrtkit_cpu")[0]}
        np.testing.assert_allclose(np.asarray(ours), np.asarray(xla), rtol=1e-6, atol=1e-6)
        assert not {"pytest", "pjrtkit_tools", "pjrtkit.conformance"} & set(sys.modules)
        print("ok")
    """)
    done = _run([python, "-c", program], cwd=folder,
                env=clean_env(JAX_PLATFORMS="pjrtkit_cpu,cpu"))
    assert done.stdout.strip().endswith("ok")
    refused = _run([fresh_venv / "bin/pjrtkit", "conformance", "cpu"], cwd=folder, ok=False)
    assert refused.returncode == 2 and "pip install 'pjrtkit[conformance]'" in refused.stderr


def test_the_conformance_extra_runs_the_suite(fresh_venv, wheels):
    folder = fresh_venv.parent
    core = next(wheels.glob("pjrtkit-0*.whl"))
    _run([fresh_venv / "bin/python", "-m", "pip", "install", "-q", "-c", _constraints(),
          f"pjrtkit[conformance] @ {core.as_uri()}"], cwd=folder)
    done = _run([fresh_venv / "bin/pjrtkit", "conformance", "cpu", "--layer", "abi,hooks"],
                cwd=folder)
    assert "FAIL 0" in done.stdout, done.stdout


def test_every_wheel_installs_together(fresh_venv, wheels):
    folder = fresh_venv.parent
    _run([fresh_venv / "bin/python", "-m", "pip", "install", "-q", "-c", _constraints(),
          *sorted(wheels.glob("*.whl"))], cwd=folder)
    listed = _run([fresh_venv / "bin/pjrtkit", "list"], cwd=folder,
                  env=clean_env(PJRTKIT_GPU_EMULATE="1")).stdout
    for platform in ("pjrtkit_cpu", "pjrtkit_tpu", "pjrtkit_cuda", "pjrtkit_rocm"):
        line = next((ln for ln in listed.splitlines() if platform in ln), "")
        assert line.rstrip().endswith("ok"), listed
    commands = _run([fresh_venv / "bin/pjrtkit", "--help"], cwd=folder).stdout
    assert "jax-tests" in commands and "build-library" in commands
