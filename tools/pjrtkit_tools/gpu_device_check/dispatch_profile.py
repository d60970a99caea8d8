"""Where one small call's host time goes on a GPU backend, next to XLA's: one JSON line.

    python -m pjrtkit_tools.gpu_device_check.dispatch_profile [--backend pjrtkit_cuda]
        [--reference cuda] [--calls 2000] [--profile-top 25]

The program is the benchmark suite's ``dispatch`` workload (``jit(x * 2 + 1)`` on f32[3]: one
kernel launch). Measured in one process, on the same input each call:

- ``pipelined_us``: a loop of calls, one ``block_until_ready`` at the end, per call (what the
  benchmark reports), on the backend and on the reference;
- ``latency_us``: each call followed by its own ``block_until_ready``;
- ``without_stream_wait_us``: the backend's pipelined loop with the driver's ``synchronize``
  made a no-op for the loop (a GPU executable waits for its stream before ``execute``
  returns): the share of a call that is the wait. Measurement only: results of such calls
  are complete before the device is done, so nothing reads them;
- ``profile``: ``cProfile`` over the pipelined loop on the caller's thread (Python functions
  by own time per call; the worker thread's work shows only where the caller waits on it).

Runs emulated too (``PJRTKIT_GPU_EMULATE=1``, reference ``cpu``), where the numbers say
nothing about a GPU.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time


def _pipelined(fn, x, calls: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            y = fn(x)
        y.block_until_ready()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def _latency(fn, x, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(x).block_until_ready()
    return (time.perf_counter() - start) / calls * 1e6


def measure(backend: str, reference: str, calls: int, top: int) -> dict:
    os.environ.setdefault("JAX_PLATFORMS", f"{backend},{reference}")
    import jax
    import numpy as np

    fn = jax.jit(lambda x: x * 2 + 1)
    report: dict = {"calls": calls}
    for name in (backend, reference):
        device = jax.devices(name)[0]
        x = jax.device_put(np.arange(3, dtype=np.float32), device)
        for _ in range(50):
            fn(x).block_until_ready()
        report[name] = {"device": f"{device} ({device.device_kind})",
                        "pipelined_us": round(_pipelined(fn, x, calls), 2),
                        "latency_us": round(_latency(fn, x, calls), 2)}
    device = jax.devices(backend)[0]
    x = jax.device_put(np.arange(3, dtype=np.float32), device)
    try:
        from pjrtkit_gpu.drivers.base import Driver

        drivers = [cls for cls in _subclasses(Driver) if "synchronize" in cls.__dict__]
        saved = {cls: cls.__dict__["synchronize"] for cls in drivers}
        for cls in drivers:
            cls.synchronize = lambda self, device_index: None
        try:
            report[backend]["without_stream_wait_us"] = round(_pipelined(fn, x, calls), 2)
        finally:
            for cls, method in saved.items():
                cls.synchronize = method
        fn(x).block_until_ready()
    except ImportError as exc:
        report[backend]["without_stream_wait_us"] = f"not measured: {exc}"
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        y = fn(x)
    y.block_until_ready()
    profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    rows = []
    for (path, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():
        rows.append({"function": f"{os.path.basename(path)}:{line}:{func}",
                     "calls_per_call": round(ncalls / calls, 2),
                     "own_us_per_call": round(tottime / calls * 1e6, 2),
                     "cumulative_us_per_call": round(cumtime / calls * 1e6, 2)})
    rows.sort(key=lambda r: -r["own_us_per_call"])
    report[backend]["profile"] = rows[:top]
    return report


def _subclasses(cls) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_tools.gpu_device_check."
                                     "dispatch_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pjrtkit_cuda")
    parser.add_argument("--reference", default="cuda")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(json.dumps(measure(args.backend, args.reference, args.calls, args.profile_top)),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
