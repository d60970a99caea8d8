"""Where the slowest GPU workloads spend their time: each named workload of the GPU benchmark
suite jitted on ``--backend``, warmed up, then called ``--calls`` times with every launch
timed (``pjrtkit_gpu.launch_profile``); one JSON line per run on stdout:

    python -m pjrtkit_tools.gpu_device_check.profile_workloads --names layernorm,softmax
        [--backend pjrtkit_cuda] [--calls 3] [--smoke]

Per workload: the wall time of a profiled call, launches per call, and the kernel families
that take the most of it. The device check's bench stage runs it on the three workloads with
the highest ratio to XLA.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def profile(names: list[str], backend: str, calls: int, size: str) -> dict:
    os.environ["JAX_PLATFORMS"] = backend
    os.environ["PJRTKIT_GPU_LAUNCH_PROFILE"] = "1"  # before the driver is made
    import jax

    from benchmarks.gpu_workloads import GPU_WORKLOADS
    from pjrtkit_gpu.launch_profile import PROFILE

    chosen = {w.name: w for w in GPU_WORKLOADS if w.name in names}
    device = jax.devices(backend)[0]
    report: dict = {"backend": f"{device} ({device.device_kind})", "calls": calls,
                    "size": size, "workloads": {}}
    for name in names:
        workload = chosen.get(name)
        if workload is None:
            report["workloads"][name] = {"error": "no such GPU workload"}
            continue
        try:
            fn, args = workload.make(size)
            args = jax.device_put(args, device)
            jitted = jax.jit(fn)
            for _ in range(2):  # compile, then one warm call
                jax.block_until_ready(jitted(*args))
            PROFILE.reset()
            start = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(jitted(*args))
            wall = (time.perf_counter() - start) / calls
            row = PROFILE.summary(calls=calls)
            row["wall_s_per_call"] = wall
            report["workloads"][name] = row
        except Exception as exc:  # noqa: BLE001 - reported per workload
            report["workloads"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_tools.gpu_device_check."
                                     "profile_workloads", description=__doc__.splitlines()[0])
    parser.add_argument("--names", required=True, help="comma-separated GPU workloads")
    parser.add_argument("--backend", default="pjrtkit_cuda")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="the suite's tiny sizes")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    names = [n.strip() for n in args.names.split(",") if n.strip()]
    report = profile(names, args.backend, args.calls, "smoke" if args.smoke else "full")
    print(json.dumps(report), flush=True)
    return 0 if all("error" not in w for w in report["workloads"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
