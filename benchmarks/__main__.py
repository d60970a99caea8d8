"""pjrtkit_cpu vs XLA's CPU backend, workload by workload, in one process.

    .venv/bin/python -m benchmarks [--quick | --smoke] [--only NAMES] [--real] [--repeats N]
                                   [--json PATH] [--plot PATH.png] [--keep-blas-env]
                                   [--backend pjrtkit_cuda --reference cuda --suite gpu]

``--backend``/``--reference`` measure another pjrtkit backend against another of XLA's
platforms (pjrtkit_cuda against XLA's cuda on a GPU machine); ``--suite gpu`` takes the GPU
workloads (benchmarks/gpu_workloads.py) instead of the CPU suite.

A machine-wide OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE slows NumPy's OpenBLAS but not XLA: the
suite re-runs itself once without them unless --keep-blas-env or --smoke (see blas_env.py).

Exit status: 0 when every workload ran and matched XLA (targets missed are reported, not
failures: machines are noisy); 1 when a workload raised or its result differed from XLA's;
2 on bad arguments or when the backends cannot be started.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

EXIT_OK, EXIT_FAIL, EXIT_SETUP = 0, 1, 2


def parse_args(argv):
    from benchmarks.workloads import by_name

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="workloads: " + ", ".join(w.name for w in by_name([""])))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help="fewer, shorter samples (the whole suite in well under 3 minutes)")
    mode.add_argument("--smoke", action="store_true",
                      help="tiny shapes, one call per sample: proves every workload runs and "
                           "matches XLA, and that the outputs are written; timings meaningless")
    parser.add_argument("--only", metavar="NAMES",
                        help="comma-separated workloads (substrings of names), e.g. dispatch,matmul")
    parser.add_argument("--repeats", type=int, metavar="N",
                        help="samples per backend (median taken over them); overrides the mode")
    parser.add_argument("--real", action="store_true",
                        help="also run the real workloads (benchmarks/real_workloads.py: flax, "
                             "optax, numpyro, the bench extra; minutes more, numpyro's NUTS "
                             "most); --only selects them by name too")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--plot", metavar="PATH.png", help="write a PNG bar chart of the ratios")
    parser.add_argument("--backend", default="pjrtkit_cpu",
                        help="the pjrtkit platform measured (default: %(default)s)")
    parser.add_argument("--reference", default="cpu",
                        help="XLA's platform it is compared with (default: %(default)s; cuda "
                             "on a GPU machine)")
    parser.add_argument("--suite", choices=("cpu", "gpu"), default="cpu",
                        help="the workload list: cpu (benchmarks/workloads.py, default) or gpu "
                             "(benchmarks/gpu_workloads.py)")
    parser.add_argument("--keep-blas-env", action="store_true",
                        help="keep OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE if the machine sets them "
                             "(by default the suite re-runs itself without them)")
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv=None) -> int:
    from benchmarks import blas_env

    argv = sys.argv[1:] if argv is None else list(argv)
    # Decided before parse_args, which imports NumPy (and with it OpenBLAS) through workloads.
    env = blas_env.rerun_env(os.environ, keep="--keep-blas-env" in argv, smoke="--smoke" in argv)
    if env is not None and not {"-h", "--help"} & set(argv):
        blas_env.rerun_without_overrides(argv, env)
    args = parse_args(argv)
    from benchmarks import plot, report, runner, timing, workloads

    runner.use_backends(args.backend, args.reference)
    if args.suite == "gpu":
        from benchmarks.gpu_workloads import GPU_WORKLOADS as suite
    else:
        suite = workloads.all_workloads()  # the CPU suite and the real workloads
    try:
        if args.only:
            chosen = workloads.by_name([n.strip() for n in args.only.split(",") if n.strip()],
                                       suite)
        else:
            chosen = [w for w in suite if args.real or not w.real]
    except ValueError as exc:
        print(f"benchmarks: {exc}", file=sys.stderr)
        return EXIT_SETUP
    try:
        runner.enable_platforms(workloads.devices_needed(chosen),
                                workloads.platforms_needed(chosen))
        devs = runner.devices()
    except Exception as exc:  # noqa: BLE001
        print(f"benchmarks: cannot start {runner.BACKEND} and {runner.REFERENCE}: {exc}",
              file=sys.stderr)
        return EXIT_SETUP

    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    settings = {"smoke": timing.SMOKE, "quick": timing.QUICK, "full": timing.FULL}[mode]
    if args.repeats is not None:
        settings = dataclasses.replace(settings, repeats=args.repeats)
    size = "smoke" if args.smoke else "full"

    print(f"pjrtkit benchmarks ({mode}): {devs[runner.BACKEND]} vs {devs[runner.REFERENCE]}; "
          f"{settings.repeats} interleaved samples per backend of ~{settings.sample_s * 1e3:.0f} ms "
          f"(loop of calls, one block_until_ready, divided by the count)", flush=True)
    if hasattr(os, "getloadavg"):
        print(f"load average before the run: {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} cpus (other load skews both backends)", flush=True)
    blas = blas_env.describe()
    print(f"OpenBLAS kernel: {', '.join(blas['openblas_kernels']) or 'none loaded'}; overrides in "
          f"effect: {blas['overrides_in_effect'] or 'none'}", flush=True)
    start = time.perf_counter()
    results = []
    for w in chosen:
        t0 = time.perf_counter()
        r = runner.run(w, size, settings)
        results.append(r)
        status = "ok" if r.ok else ("ERROR" if r.error else "MISMATCH")
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        waited = (f", {r.background_compile_s:.1f} s of it waiting for background compiles"
                  if r.background_compile_s >= 0.05 else "")
        if r.partition_s is not None:
            waited += f", {r.partition_s:.2f} s of it partitioning once"
        if r.first_ten_s:
            waited += f", first {w.steady_calls} calls " + " / ".join(
                f"{report.fmt_time(r.first_ten_s.get(b))}" for b in (runner.BACKEND,
                                                                     runner.REFERENCE))
        print(f"  {w.name:<18} {status:<8} ratio {ratio:>8}  ({time.perf_counter() - t0:.1f} s"
              f"{waited})", flush=True)
        if r.error_traceback:
            print(r.error_traceback, file=sys.stderr)
        if args.json:  # what is done so far survives a run stopped at a deadline
            report.write_json(args.json, report.document(
                results, mode=mode, settings=settings, elapsed_s=time.perf_counter() - start))
    elapsed = time.perf_counter() - start

    print()
    print(report.table(results))
    print(f"\n{len(results)} workloads in {elapsed:.1f} s")
    doc = report.document(results, mode=mode, settings=settings, elapsed_s=elapsed)
    if args.json:
        report.write_json(args.json, doc)
        print(f"wrote {args.json}")
    if args.plot:
        rows = [(r.workload.name, r.ratio, r.workload.target) for r in results
                if r.workload.devices == 1 and not r.workload.real]
        rows.append(("geomean", doc["geomean_ratio"], workloads.GEOMEAN_TARGET))
        rows += [(f"{r.workload.name} ({r.workload.devices} dev)", r.ratio, r.workload.target)
                 for r in results if r.workload.devices > 1 and not r.workload.real]
        rows += [(r.workload.name, r.ratio, r.workload.target) for r in results
                 if r.workload.real]
        plot.write(args.plot, rows, f"{runner.BACKEND} vs xla {runner.REFERENCE} ({mode})")
        print(f"wrote {args.plot}")
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
