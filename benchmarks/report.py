"""The readable table, the JSON document and the machine description."""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from benchmarks import blas_env, runner
from benchmarks.runner import Result
from benchmarks.workloads import GEOMEAN_TARGET


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def _row(r: Result) -> str:
    p = r.stats.get(runner.BACKEND)
    x = r.stats.get(runner.REFERENCE)
    ratio = r.ratio
    target = "-" if r.workload.target is None else f"{r.workload.target:.2f}x"
    met = {True: "yes", False: "NO", None: "-"}[r.met]
    spread = (f"{100 * p.spread:4.1f}/{100 * x.spread:4.1f}%" if p and x else "-")
    status = ("ok" if r.ok else "ERROR" if r.error else "MISMATCH")
    return (f"{r.workload.name:<18} {fmt_time(p and p.median_s):>10} "
            f"{fmt_time(x and x.median_s):>10} "
            f"{'-' if ratio is None else f'{ratio:.2f}x':>8} "
            f"{target:>7} {met:>5}  {spread:>11}  {status}")


def _pair(times: dict) -> str:
    p, x = times.get(runner.BACKEND), times.get(runner.REFERENCE)
    ratio = f" ({p / x:.2f}x)" if p and x else ""
    return f"{fmt_time(p)} / {fmt_time(x)}{ratio}"


def table(results: list[Result]) -> str:
    header = (f"{'workload':<18} {'pjrtkit':>10} {'xla':>10} {'ratio':>8} {'target':>7} "
              f"{'met?':>5}  {'spread p/x':>11}  status")
    lines = [header, "-" * len(header)]
    single = [r for r in results if r.workload.devices == 1 and not r.workload.real]
    many = [r for r in results if r.workload.devices > 1 and not r.workload.real]
    real = [r for r in results if r.workload.real]
    for r in single:
        lines.append(_row(r))
    g = geomean([r.ratio for r in single])
    lines.append("-" * len(header))
    met = "-" if g is None else ("yes" if g <= GEOMEAN_TARGET else "NO")
    lines.append(f"{'geomean':<18} {'':>10} {'':>10} {'-' if g is None else f'{g:.2f}x':>8} "
                 f"{GEOMEAN_TARGET:>6.2f}x {met:>5}")
    if many:
        lines.append("-" * len(header))
        lines.append("several devices (outside the geomean; both backends on as many devices):")
        for r in many:
            partition = "-" if r.partition_s is None else fmt_time(r.partition_s)
            lines.append(f"{_row(r)}  (one-time partitioning {partition})")
    if real:
        lines.append("-" * len(header))
        lines.append("real workloads (outside the geomean); time to steady state, compile "
                     "included, pjrtkit / xla:")
        for r in real:
            lines.append(_row(r))
            lines.append(f"{'':<18} first call {_pair(r.first_call_s)}, first "
                         f"{r.workload.steady_calls} calls {_pair(r.first_ten_s)}")
    problems = [r for r in results if not r.ok]
    for r in problems:
        lines.append("")
        if r.error:
            lines.append(f"ERROR in {r.workload.name}: {r.error}")
        if r.mismatch:
            lines.append(f"MISMATCH in {r.workload.name} (pjrtkit vs XLA, checked before "
                         f"timing):\n{r.mismatch}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    import jax
    import numpy as np

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "cpu": cpu, "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__,
        "git_commit": commit,
        # Other load on the machine skews both backends; worth a look when numbers jump.
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "blas": blas_env.describe(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def document(results: list[Result], *, mode: str, settings: Any, elapsed_s: float) -> dict:
    workloads = []
    for r in results:
        p, x = r.stats.get(runner.BACKEND), r.stats.get(runner.REFERENCE)
        workloads.append({
            "name": r.workload.name,
            "pjrtkit_s": p.median_s if p else None,
            "xla_s": x.median_s if x else None,
            "ratio": r.ratio,
            "target": r.workload.target,
            "met": r.met,
            "description": r.workload.description,
            "kind": r.workload.kind,
            "correct": r.mismatch is None and r.error is None,
            "background_compile_s": r.background_compile_s,
            "devices": r.workload.devices,
            "partition_s": r.partition_s,
            "real": r.workload.real,
            "platform": r.workload.backend or runner.BACKEND,
            "first_call_s": dict(r.first_call_s) or None,
            "first_ten_s": dict(r.first_ten_s) or None,
            "mismatch": r.mismatch,
            "error": r.error,
            "pjrtkit": p.as_dict() if p else None,
            "xla": x.as_dict() if x else None,
        })
    g = geomean([r.ratio for r in results if r.workload.devices == 1 and not r.workload.real])
    return {
        "workloads": workloads,
        "geomean_ratio": g,
        "geomean_target": GEOMEAN_TARGET,
        "geomean_met": None if g is None else g <= GEOMEAN_TARGET,
        "mode": mode,
        "settings": {"repeats": settings.repeats, "sample_s": settings.sample_s,
                     "max_calls": settings.max_calls, "warmup": settings.warmup,
                     "pause_s": settings.pause_s,
                     "persistent_compilation_cache": False},
        "backends": {"pjrtkit": runner.BACKEND, "xla": runner.REFERENCE},
        "elapsed_s": elapsed_s,
        "machine": machine(),
    }


def write_json(path: str, doc: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
