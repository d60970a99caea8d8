"""OpenBLAS kernel overrides in the environment, and running the suite without them.

Some machines set ``OPENBLAS_CORETYPE`` (and ``OPENBLAS_L2_SIZE``) globally, because older
OpenBLAS builds computed wrong results or crashed on their processor. The variables force every
OpenBLAS in the process onto the named kernel: on an AVX-512 machine with
``OPENBLAS_CORETYPE=Haswell``, NumPy's current OpenBLAS runs GEMM at half speed (1024x1024 f32:
8.9 ms instead of 4.9 ms, measured here). XLA's CPU backend does not use OpenBLAS, so the
override handicaps only one side of the comparison.

By default the suite therefore re-runs itself once with both variables removed, in its own
process only, prints that it did, and records the kernel OpenBLAS then chose; every result is
still checked against XLA before it is timed. ``--keep-blas-env`` keeps the machine's settings.
``--smoke`` (what the tests run) always keeps them: tests and CI run as the machine is set up.
These must be decided before NumPy is imported, so this module imports nothing heavy.
"""
from __future__ import annotations

import os
import sys

OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# Set in the re-run, so the report can say what was removed (and so it never re-runs twice).
REMOVED_MARKER = "PJRTKIT_BENCH_REMOVED_BLAS_ENV"


def overrides(env) -> dict[str, str]:
    """The OpenBLAS overrides present in ``env``."""
    return {name: env[name] for name in OVERRIDES if name in env}


def rerun_env(env, *, keep: bool, smoke: bool) -> dict[str, str] | None:
    """The environment to re-run the suite in, or None to run in this process as it is."""
    found = overrides(env)
    if keep or smoke or not found or REMOVED_MARKER in env:
        return None
    clean = {k: v for k, v in env.items() if k not in OVERRIDES}
    clean[REMOVED_MARKER] = " ".join(f"{k}={v}" for k, v in found.items())
    return clean


def rerun_without_overrides(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with the suite in ``env`` (does not return)."""
    print(f"benchmarks: this machine sets {env[REMOVED_MARKER]}, which forces NumPy's OpenBLAS "
          f"(not XLA) onto an older kernel; re-running without them "
          f"(--keep-blas-env keeps them)", flush=True)
    os.execve(sys.executable, [sys.executable, "-m", "benchmarks", *argv], env)


def describe() -> dict:
    """What the report records: the overrides in effect, those removed, and OpenBLAS's kernel."""
    info = {"overrides_in_effect": overrides(os.environ),
            "overrides_removed": os.environ.get(REMOVED_MARKER, ""),
            "openblas_kernels": []}
    try:
        import threadpoolctl

        info["openblas_kernels"] = sorted({
            f"{p.get('filepath', '?').rsplit('/', 1)[-1]}: {p.get('architecture')}"
            for p in threadpoolctl.threadpool_info() if p.get("internal_api") == "openblas"})
    except Exception as exc:  # noqa: BLE001 - the report still has everything else
        info["openblas_kernels"] = [f"unknown ({type(exc).__name__}: {exc})"]
    return info
