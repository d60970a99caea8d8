"""The GPU device check (package docstring): every stage, one deadline, results under ``--out``.

    python -m pjrtkit_tools.gpu_device_check --out DIR [--emulate] [--budget-s S]
        [--stages device,conformance,training,bench,pallas,vendor] [--carry DIR]
        [--baseline PATH] [--work DIR] [--conformance-shards N]

On a GPU (no ``--emulate``): ``PJRTKIT_GPU_EMULATE=0``, XLA's ``cuda`` is the reference, the
kernels recorded by the emulated run (``--carry``, from ``make gpu-device-carry``) are compiled
into Triton's cache first, the benchmarks autotune and write ``tuned_configs.json``. With
``--emulate``: Triton's interpreter, XLA's ``cpu`` as the reference, small step counts and the
benchmarks' smoke sizes; the kernels launched are recorded under ``--work`` (``kernel-log``)
for ``make gpu-device-carry``, and ``baseline.json`` is written (the record the GPU run is
compared with; committed as ``docs/gpu-device-check-baseline.json``).

Files under ``--out`` (at most eight, as the device tool brings back): ``summary.md`` (rewritten
after every stage), ``log.txt`` (every stage's output), ``conformance.json``,
``conformance.md``, ``bench.json``, ``checks.json`` (stage by stage: the machine, training,
Pallas, the cuBLAS path's probe, conformance and matmul benchmarks, times), ``kernels.json``
(kernels compiled and Triton cache hits), and on a GPU ``tuned_configs.json``; emulated,
``baseline.json``. Every stage but ``vendor`` runs with
``PJRTKIT_GPU_VENDOR_LIBRARIES=off`` (the Triton kernels), ``vendor`` with ``require``
(cuBLAS). Exit status 0 when every stage ran and
passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pjrtkit_tools.gpu_device_check import stages

# vendor last: the cuBLAS path, never run on a GPU before, cannot take the others' time.
STAGES = ("device", "conformance", "training", "bench", "pallas", "vendor")
# Seconds each stage may take at most (the stages share one deadline, --budget-s).
GPU_CAPS = {"device": 20, "conformance": 70, "training": 30, "bench": 165, "pallas": 15,
            "vendor": 60}
EMULATED_CAPS = {"device": 0, "conformance": 900, "training": 550, "bench": 250,
                 "pallas": 100, "vendor": 300}
# On a GPU the budget is the stages' caps together; emulated, the 30 minutes of the baseline.
DEFAULT_BUDGET = {False: sum(GPU_CAPS.values()), True: 1800}
WORK = {False: "/tmp/pjrtkit-gpu-check", True: "build/gpu-device-check"}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_tools.gpu_device_check",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the results folder ($OUT on the GPU)")
    parser.add_argument("--emulate", action="store_true",
                        help="Triton's interpreter and XLA's cpu (the baseline, no GPU)")
    parser.add_argument("--budget-s", type=float, help="seconds for every stage together "
                        "(default 360 on a GPU, 1800 emulated)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--carry", default=".gpu-check",
                        help="the carried folder (kernel records, Triton cache)")
    parser.add_argument("--baseline", default="docs/gpu-device-check-baseline.json",
                        help="the emulated run's record the GPU run is compared with")
    parser.add_argument("--work", help="scratch folder (default /tmp/pjrtkit-gpu-check on a "
                        "GPU, build/gpu-device-check emulated)")
    parser.add_argument("--conformance-shards", type=int,
                        help="parallel conformance processes (default: CPU count, at most 8)")
    args = parser.parse_args(argv)
    chosen = [s for s in args.stages.split(",") if s]
    unknown = [s for s in chosen if s not in STAGES]
    if unknown:
        parser.error(f"unknown stages {unknown}; stages: {', '.join(STAGES)}")
    args.stages = [s for s in STAGES if s in chosen and not (args.emulate and s == "device")]
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    emulate = args.emulate
    budget = args.budget_s or DEFAULT_BUDGET[emulate]
    caps = EMULATED_CAPS if emulate else GPU_CAPS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or WORK[emulate]).resolve()
    run = stages.Run(out=out, work=work, emulate=emulate, carry=Path(args.carry).resolve(),
                     baseline=Path(args.baseline), started=time.monotonic(), budget_s=budget,
                     shards=args.conformance_shards or min(8, os.cpu_count() or 1))
    run.prepare()
    run.log(f"gpu device check: {'emulated' if emulate else 'GPU'}; stages "
            f"{', '.join(args.stages)}; budget {budget:.0f} s; work {work}")
    functions = {"device": stages.device, "conformance": stages.conformance,
                 "training": stages.training, "bench": stages.bench, "pallas": stages.pallas,
                 "vendor": stages.vendor}
    for name in args.stages:
        left = run.seconds_left()
        if left < 5:
            run.record(name, {"status": "not run", "why": f"out of time ({left:.0f} s left)"})
            continue
        limit = min(caps[name], left)
        start = time.monotonic()
        run.log(f"=== stage {name} (at most {limit:.0f} s)")
        try:
            result = functions[name](run, limit)
        except Exception as exc:  # noqa: BLE001 - a broken stage is reported; the rest run
            import traceback

            run.log(traceback.format_exc())
            result = {"status": "error", "why": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.monotonic() - start, 1)
        run.record(name, result)
    if emulate:
        stages.write_baseline(run)
    run.log(f"gpu device check done in {time.monotonic() - run.started:.0f} s")
    return 0 if all(r.get("status") == "ok" for r in run.results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
