"""Start a multi-process JAX job of ``mp_worker.py`` on one platform and collect what each
process wrote (helpers for the tests; no test here)."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys

import numpy as np

WORKER = pathlib.Path(__file__).with_name("mp_worker.py")
# platform -> {process: what devices.p<process>.json said} of the last job run_job ran
last_devices: dict[str, dict[int, dict]] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


class JobFailed(AssertionError):
    pass


def start_processes(script, num_processes: int, env: dict, extra_args=(), out=None):
    """Popen objects for ``num_processes`` copies of ``script`` joined through one coordinator."""
    coordinator = f"localhost:{free_port()}"
    procs = []
    for pid in range(num_processes):
        log = open(pathlib.Path(out) / f"log.p{pid}.txt", "wb") if out else subprocess.DEVNULL
        procs.append(subprocess.Popen(
            [sys.executable, str(script), "--process-id", str(pid), "--num-processes",
             str(num_processes), "--coordinator", coordinator, *extra_args],
            env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def wait_all(procs, timeout_s: float) -> list[int]:
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
    return codes


def job_env(platform: str, devices_per_process: int, **extra) -> dict:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = platform
    env["PJRTKIT_CPU_DEVICES"] = str(devices_per_process)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices_per_process}"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_job(platform: str, num_processes: int, cases, out: pathlib.Path, *,
            devices_per_process: int = 2, timeout_s: float = 600, **env) -> dict:
    """{process: {case: {name: array} or the error text}} of one job."""
    out.mkdir(parents=True, exist_ok=True)
    procs = start_processes(WORKER, num_processes,
                            job_env(platform, devices_per_process, **env),
                            ["--out", str(out), "--cases", ",".join(cases)], out)
    codes = wait_all(procs, timeout_s)
    if any(code != 0 for code in codes):
        logs = "\n".join(f"--- process {pid} (exit {code}"
                         f"{', ' + signal.Signals(-code).name if code < 0 else ''}) ---\n"
                         + (out / f"log.p{pid}.txt").read_text(errors="replace")[-4000:]
                         for pid, code in enumerate(codes))
        raise JobFailed(f"{platform} job of {num_processes} processes failed:\n{logs}")
    last_devices[platform] = {
        pid: json.loads((out / f"devices.p{pid}.json").read_text())
        for pid in range(num_processes)}
    results = {}
    for pid in range(num_processes):
        results[pid] = {}
        for name in cases:
            error = out / f"{name}.p{pid}.error"
            if error.exists():
                results[pid][name] = error.read_text()
            else:
                with np.load(out / f"{name}.p{pid}.npz") as data:
                    results[pid][name] = {k: data[k] for k in data.files}
    return results
