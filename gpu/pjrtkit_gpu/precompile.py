"""Precompiling, for one GPU target, the kernels an emulated run launched, into Triton's cache.

    python -m pjrtkit_gpu.precompile --log DIR --target sm_90 [--jobs N] [--json PATH]
        [--no-variants]

``DIR`` holds the records ``PJRTKIT_GPU_KERNEL_LOG=DIR`` made (``kernel_log``). Each distinct
kernel is compiled with ``compile_kernel`` exactly as the GPU driver compiles it at its first
launch, so with the same ``TRITON_CACHE_DIR`` that launch finds it in Triton's cache instead of
running Triton and ptxas. Three things an emulated run chooses for the interpreter are mapped to
what a GPU launches (``for_gpu``): the ``WIDEN`` constexpr of the matmul and the convolution
(bfloat16 widened only for the interpreter's ``tl.dot``) is False, and the merge sort's tiles
are ``SORT_TILE`` / ``MERGE_BLOCK``. With variants (the default), every configuration
``autotune`` may choose on a GPU is compiled too for each matmul and row reduction, so neither
a tuned table nor tuning itself compiles there.

Triton's cache key (Triton 3.6 and 3.9, ``triton.runtime.cache``) is the Triton build (its
version and a hash of its Python sources and of ``libtriton.so``), the kernel's source and
signature, the options, the target and ptxas's version; its group files name their members by
absolute path, so the cache must sit at the same path where it is read (the device check copies
it there). The report counts the compiles Triton's cache answered (``cache_hit``): run twice,
the second run's are all hits. Exit status 1 if any compile fails.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any


def for_gpu(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (an emulated launch's kernel) as a GPU launches it."""
    from pjrtkit_gpu.lowering.sort import MERGE_BLOCK, SORT_TILE

    constexprs = dict(record["constexprs"])
    if "WIDEN" in constexprs:
        constexprs["WIDEN"] = False
    if record["name"] == "sort_rows":
        constexprs.update(BI=SORT_TILE, BJ=SORT_TILE)
    if record["name"] == "merge_runs":
        constexprs.update(B=MERGE_BLOCK)
    return {**record, "constexprs": constexprs}


def variants(record: dict[str, Any]) -> list[dict[str, Any]]:
    """``record`` with each configuration autotune may choose for it (itself when none)."""
    from pjrtkit_gpu import autotune

    kind = record["name"]
    if record["module"] == "pjrtkit_gpu.kernels" and kind == autotune.MATMUL \
            and record["constexprs"].get("USE_DOT"):
        space = autotune.SPACES[autotune.MATMUL]
    elif kind == autotune.ROW_REDUCE and record["module"].startswith("pjrtkit_gpu_generated."):
        space = autotune.SPACES[autotune.ROW_REDUCE]
    else:
        return [record]
    return [{**record, "constexprs": {**record["constexprs"], **c.constexprs},
             "options": c.options} for c in space]


def jobs_of(records: list[dict[str, Any]], with_variants: bool) -> list[dict[str, Any]]:
    """The distinct compiles the records ask for (Pallas kernels left out: Triton IR that an
    emulated run never launches)."""
    jobs, seen = [], set()
    for record in records:
        if "module" not in record:
            continue
        for job in (variants if with_variants else lambda r: [r])(for_gpu(record)):
            options = {k: v for k, v in job.get("options", {}).items()}
            identity = json.dumps([job["module"], job["name"], job.get("source"),
                                   job["signature"], job["constexprs"],
                                   options or {"num_warps": 4, "num_stages": 3}],
                                  sort_keys=True)
            if identity not in seen:
                seen.add(identity)
                jobs.append(job)
    return jobs


def _kernel(job):
    from pjrtkit_gpu import codegen

    if job.get("source") is not None:
        return codegen.load_kernel(job["source"], job["name"])
    return getattr(importlib.import_module(job["module"]), job["name"])


_HITS: list = []


def _prepare() -> None:
    from pjrtkit_gpu.triton_setup import import_triton

    triton, _ = import_triton(interpret=False)
    compilation = triton.knobs.compilation

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        _HITS.append(bool(cache_hit))

    compilation.listener = listener


def _compile(task) -> dict[str, Any]:
    from pjrtkit_gpu.drivers.compiled_kernels import compile_kernel
    from pjrtkit_gpu.targets import BINARY, TARGETS

    job, target = task
    start = time.monotonic()
    _HITS.clear()
    row = {"kernel": job["name"], "module": job["module"], "constexprs": job["constexprs"],
           "options": job.get("options") or {}, "signature": ",".join(job["signature"].values())}
    try:
        compiled = compile_kernel(_kernel(job), job["signature"], job["constexprs"], target,
                                  job.get("options") or None)
        row.update(binary_bytes=len(compiled.asm[BINARY[TARGETS[target][0]]]), error=None,
                   shared=compiled.metadata.shared, num_warps=compiled.metadata.num_warps,
                   scratch=getattr(compiled.metadata, "global_scratch_size", 0))
    except Exception as exc:  # noqa: BLE001 - every failure is reported, then exit 1
        row.update(binary_bytes=None, error=f"{type(exc).__name__}: "
                                           f"{' '.join(str(exc).split())[:300]}")
    row.update(seconds=round(time.monotonic() - start, 3),
               cache_hit=_HITS[-1] if _HITS else None)
    return row


def precompile(records, target: str, jobs: int = 1, with_variants: bool = True,
               progress=None) -> dict[str, Any]:
    """Compile what ``records`` ask for, for ``target``; the report."""
    started = time.monotonic()
    work = jobs_of(records, with_variants)
    tasks = [(job, target) for job in work]
    _prepare()
    if jobs > 1:
        import concurrent.futures
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # a fresh Triton import per worker
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context,
                                                    initializer=_prepare) as pool:
            rows = []
            for row in pool.map(_compile, tasks, chunksize=4):
                rows.append(row)
                if progress:
                    progress(row)
    else:
        rows = []
        for task in tasks:
            rows.append(_compile(task))
            if progress:
                progress(rows[-1])
    recorded = [r for r in records if "module" in r]
    summary = {
        "target": target,
        "recorded_kernels": len(recorded),
        "recorded_by_name": _count(r["name"] for r in recorded),
        "pallas_recorded": sum("pallas" in r for r in records),
        "compiles": len(rows),
        "variants": with_variants,
        "failures": sum(r["error"] is not None for r in rows),
        "cache_hits": sum(r["cache_hit"] is True for r in rows),
        "cache_misses": sum(r["cache_hit"] is False for r in rows),
        "seconds": round(time.monotonic() - started, 1),
    }
    import triton

    summary["triton"] = triton.__version__
    return {"summary": summary, "rows": rows}


def _count(names) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_gpu.precompile",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="the PJRTKIT_GPU_KERNEL_LOG folder")
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--jobs", type=int, default=1, help="compiles in parallel processes")
    parser.add_argument("--no-variants", action="store_true",
                        help="only the recorded configurations (no autotune candidates)")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)

    from pjrtkit_gpu import kernel_log
    from pjrtkit_gpu.targets import TARGETS

    if args.target not in TARGETS:
        parser.error(f"unknown target {args.target}; known: {', '.join(TARGETS)}")
    records = kernel_log.read(Path(args.log))
    if not records:
        print(f"precompile: no kernel records in {args.log}", file=sys.stderr)
        return 2

    def progress(row):
        status = "ok" if row["error"] is None else f"FAILED {row['error']}"
        hit = {True: "cache hit", False: "compiled", None: ""}[row["cache_hit"]]
        print(f"{row['kernel']:<18} {row['seconds']:>7.2f} s  {hit:<9} {status}", flush=True)

    report = precompile(records, args.target, args.jobs, not args.no_variants, progress)
    s = report["summary"]
    print(f"{s['recorded_kernels']} distinct kernels recorded ({s['recorded_by_name']}); "
          f"{s['compiles']} compiles for {s['target']} with Triton {s['triton']}"
          f"{' (autotune candidates included)' if s['variants'] else ''}: {s['failures']} "
          f"failed, {s['cache_hits']} answered by Triton's cache, {s['cache_misses']} compiled; "
          f"{s['seconds']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
