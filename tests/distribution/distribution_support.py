"""What the distribution tests share: XLA's own CPU plugin library, the C host, programs for it."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DECLARATIONS_DIR = ROOT / "core" / "pjrtkit" / "abi"
HOST_SOURCE = pathlib.Path(__file__).resolve().parents[1] / "c_host" / "pjrt_host.c"


def xla_cpu_plugin() -> pathlib.Path:
    """XLA's own CPU PJRT plugin library (PyPI xla-cpu-pjrt, a dev dependency)."""
    spec = importlib.util.find_spec("xla_plugins")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("xla-cpu-pjrt is not installed; it is a dev dependency: pip install -e '.[dev]'")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "xla_cpu_pjrt" / "xla_cpu_pjrt.so"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a child: no PYTHONPATH, JAX's and pjrtkit's selections cleared."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "JAX_PLATFORMS", "PJRTKIT_BACKENDS",
                        "PJRT_NAMES_AND_LIBRARY_PATHS")}
    env.update(extra)
    return env


def compile_host(out_dir: pathlib.Path) -> pathlib.Path:
    """tests/c_host/pjrt_host.c built against pjrtkit's own declarations of the ABI."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(compiler[0]) is None:
        pytest.fail(f"no C compiler {compiler[0]!r}; the C host test needs one (gcc)")
    binary = out_dir / "pjrt_host"
    subprocess.run([*compiler, "-O1", "-Wall", "-Werror", f"-I{DECLARATIONS_DIR}", str(HOST_SOURCE),
                    "-o", str(binary), "-ldl", "-lpthread"], check=True)
    return binary


def mlp_forward(x, w1, b1, w2, b2):
    import jax.numpy as jnp

    return jnp.tanh(x @ w1 + b1) @ w2 + b2


def mlp_arguments() -> list[np.ndarray]:
    rng = np.random.default_rng(20261126)
    shapes = [(8, 16), (16, 32), (32,), (32, 4), (4,)]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def run_host(host: pathlib.Path, plugin: pathlib.Path, program: pathlib.Path,
             options: pathlib.Path, out_prefix: pathlib.Path, inputs: list[str],
             threads: bool = False) -> subprocess.CompletedProcess:
    env = clean_env(THREADS="1" if threads else "0")
    return subprocess.run([str(host), str(plugin), str(program), str(options), str(out_prefix),
                           *inputs], capture_output=True, text=True, env=env, timeout=600,
                          cwd=out_prefix.parent)


def python_of_other_minor() -> str | None:
    """An interpreter of another minor version than this one (pyenv's), or None."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    other = "3.12" if here != "3.12" else "3.11"
    candidates = [shutil.which(f"python{other}")]
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip() \
        if shutil.which("pyenv") else ""
    if root:
        candidates += sorted(str(p) for p in pathlib.Path(root, "versions").glob(
            f"{other}.*/bin/python{other}"))
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None
