"""Leak soak: many executes, transfers and compiles of distinct programs on one pjrtkit device,
through JAX, measuring what stays behind (``make soak``; not part of ``make test``).

For each phase, after a warm-up: the resident set size (RSS) sampled ten times, its least-squares
slope in MiB per 10,000 operations, and the handles C holds (per kind: buffers, events,
executables, ...) before and after; they must come back to where they started. Issue 13's bar:
under 1 MiB per 10k operations over 100k executes, 100k transfers and 10k compiles.

The arrays have 2**14 elements, so pjrtkit_cpu fuses the programs (run it with fusion on, as
users do), and each distinct program carries a new constant: a new program for JAX, the
partitioner and the fusion rewrite, while its fused kernel (constants are kernel arguments) is
shared with the others. The phase also reports the caches that must stay bounded
(``cache_sizes``: the partitioner's programs, fused kernels in memory and waiting for the
compile thread, their modules, remembered splat constants, kernel sources on disk) and fails
when one grows past its bound.

    python -m pjrtkit_tools.soak [--executes N] [--transfers N] [--compiles N] [--json P]
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import time

import numpy as np

PLATFORM = "pjrtkit_cpu"
SLOPE_LIMIT_MIB = 1.0
SHAPE = (128, 128)  # 2**14 elements: the smallest group pjrtkit_cpu fuses


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def live_handles() -> dict[str, int]:
    """Handles C holds now, per kind."""
    from pjrtkit.abi import handles
    from pjrtkit.abi.errors import ERRORS

    tables = {"client": handles.CLIENTS, "buffer": handles.BUFFERS, "event": handles.EVENTS,
              "executable": handles.EXECUTABLES, "loaded_executable": handles.LOADED_EXECUTABLES,
              "topology": handles.TOPOLOGIES, "error": ERRORS, "blob": handles.BLOBS}
    return {name: len(table) for name, table in tables.items()}


def cache_sizes() -> dict[str, int]:
    """Entries of every cache a stream of distinct programs could grow: the core's partition
    cache and, when the cpu plugin is installed, its fused-kernel caches (looked up by name:
    the core does not depend on the plugin)."""
    from pjrtkit.stablehlo import partition

    sizes = {"partition_programs": partition.cache_entries()}
    try:
        fusion_cache = importlib.import_module("pjrtkit_cpu.fusion.cache")
        groups = importlib.import_module("pjrtkit_cpu.fusion.groups")
    except ImportError:
        return sizes
    sizes.update(fusion_cache.cache_sizes())
    sizes["splat_constants"] = groups.splat_cache_entries()
    directory = fusion_cache.cache_dir()
    sizes["fused_sources_on_disk"] = len(list(directory.glob("k_*.py"))) \
        if directory.is_dir() else 0
    return sizes


def cache_bounds() -> dict[str, int]:
    """The bound of each in-memory cache ``cache_sizes`` reports (the disk is not bounded)."""
    from pjrtkit.stablehlo import partition

    bounds = {"partition_programs": partition.CACHE_ENTRIES}
    try:
        fusion_cache = importlib.import_module("pjrtkit_cpu.fusion.cache")
    except ImportError:
        return bounds
    bounds.update(fused_compiles_started=fusion_cache.kernel_limit(),
                  fused_kernels=fusion_cache.KERNELS_KEPT + fusion_cache.PENDING_LIMIT,
                  fused_compiles_pending=fusion_cache.PENDING_LIMIT,
                  fused_modules=fusion_cache.KERNELS_KEPT + fusion_cache.PENDING_LIMIT)
    return bounds


def _finish_background_compiles(timeout_s: float = 600) -> None:
    """Let the cpu plugin's background kernel compiles land (each adds about 1 MiB once), so
    the warm-up's kernels are not counted as growth of the measured operations."""
    try:
        fusion_cache = importlib.import_module("pjrtkit_cpu.fusion.cache")
    except ImportError:
        return
    fusion_cache.wait_all(timeout=timeout_s)


def _settled(device) -> tuple[float, dict[str, int]]:
    """RSS and live handles once garbage is collected and queued destroys are finished."""
    gc.collect()
    device.memory_stats()  # any C entry finishes the destroys C queued
    return rss_mib(), live_handles()


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares MiB per 10,000 operations."""
    ops = np.array([p[0] for p in points], dtype=float)
    mib = np.array([p[1] for p in points])
    if len(points) < 2 or np.ptp(ops) == 0:
        return 0.0
    return float(np.polyfit(ops, mib, 1)[0] * 10_000)


def _phase(name: str, count: int, operation, device) -> dict:
    for i in range(min(1000, max(count // 10, 1))):  # warm-up: caches fill, pools settle
        operation(i)
    _finish_background_compiles()
    rss0, handles0 = _settled(device)
    points = [(0, rss0)]
    began = time.monotonic()
    step = max(count // 10, 1)
    largest = cache_sizes()
    for i in range(count):
        operation(i)
        if (i + 1) % step == 0:
            gc.collect()
            points.append((i + 1, rss_mib()))
            largest = {k: max(v, largest.get(k, 0)) for k, v in cache_sizes().items()}
    seconds = time.monotonic() - began
    rss1, handles1 = _settled(device)
    bounds = cache_bounds()
    return {"phase": name, "operations": count, "seconds": round(seconds, 1),
            "rss_start_mib": round(rss0, 2), "rss_end_mib": round(rss1, 2),
            "slope_mib_per_10k": round(_slope(points), 3),
            "handles_start": handles0, "handles_end": handles1,
            "handles_back": handles0 == handles1,
            "caches_largest": largest, "caches_end": cache_sizes(),
            "caches_bounded": all(largest.get(k, 0) <= bound for k, bound in bounds.items())}


def run(executes: int, transfers: int, compiles: int) -> list[dict]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", f"{PLATFORM},cpu")
    device = jax.devices(PLATFORM)[0]
    host = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 1000
    x = jax.device_put(host, device)
    step = jax.jit(lambda a: jnp.tanh(a) * 2 + 1)

    def execute(_i):
        step(x).block_until_ready()

    def transfer(i):
        np.asarray(jax.device_put(host + np.float32(i % 3), device))

    def compile_distinct(i):
        # a new function object and a new constant: a distinct program every time
        f = jax.jit(lambda a, k=float(i): a * k + 1)
        f(x).block_until_ready()

    results = []
    for name, count, operation in (("execute", executes, execute),
                                   ("transfer", transfers, transfer),
                                   ("compile", compiles, compile_distinct)):
        if count:
            results.append(_phase(name, count, operation, device))
            print(_line(results[-1]), flush=True)
    return results


def _line(r: dict) -> str:
    return (f"{r['phase']:9} {r['operations']:7} ops {r['seconds']:7.1f} s  RSS "
            f"{r['rss_start_mib']:.1f} -> {r['rss_end_mib']:.1f} MiB, slope "
            f"{r['slope_mib_per_10k']:+.3f} MiB/10k ops  handles back to start: "
            f"{r['handles_back']} {r['handles_end']}\n{'':10}caches bounded: "
            f"{r['caches_bounded']}, largest {r['caches_largest']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executes", type=int, default=100_000)
    parser.add_argument("--transfers", type=int, default=100_000)
    parser.add_argument("--compiles", type=int, default=10_000)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    results = run(args.executes, args.transfers, args.compiles)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    bad = [r for r in results if r["slope_mib_per_10k"] >= SLOPE_LIMIT_MIB
           or not r["handles_back"] or not r["caches_bounded"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
