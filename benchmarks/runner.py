"""Runs one workload on both backends: place inputs, check results against XLA, then time.

Each backend gets its own copy of the NumPy inputs (``jax.device_put`` to its device, so the
jitted function runs there; nothing computed on one backend is handed to the other). The check
runs before any timing: a mismatch is recorded on the result (and makes the suite exit non-zero)
but the workload is still timed, since a near-miss is still worth a number; an exception on
either backend skips the timing. pjrtkit_cpu's background compiles (fused and native loops) are
waited for after the first call, and its output is checked both before and after them.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any

import jax

from benchmarks import timing
from benchmarks.workloads import Workload
from pjrtkit.testing.tolerances import assert_close

# The backend measured and XLA's backend it is compared with: pjrtkit_cpu and XLA's cpu unless
# ``use_backends`` (``--backend``, ``--reference``) says otherwise, e.g. pjrtkit_cuda and cuda.
BACKEND = "pjrtkit_cpu"
REFERENCE = "cpu"


def use_backends(backend: str, reference: str) -> None:
    """Measure ``backend`` against XLA's ``reference`` platform (before enable_platforms)."""
    global BACKEND, REFERENCE
    BACKEND, REFERENCE = backend, reference


def enable_platforms(device_count: int = 1, extra_platforms: list[str] = ()) -> None:
    """Start the backend and XLA's reference side by side (whatever JAX_PLATFORMS says) with
    the persistent compilation cache off, each with ``device_count`` devices when that is more
    than one (JAX's ``jax_num_cpu_devices``, which pjrtkit_cpu follows unless
    PJRTKIT_CPU_DEVICES says otherwise). Must run before anything starts a backend."""
    from pjrtkit import jax_compat

    if jax_compat.backends_are_initialized():
        raise RuntimeError("benchmarks: JAX backends were started before the suite could "
                           f"enable {BACKEND!r} and {REFERENCE!r}")
    jax.config.update("jax_platforms", ",".join([BACKEND, *extra_platforms, REFERENCE]))
    jax.config.update("jax_enable_compilation_cache", False)
    jax.config.update("jax_compilation_cache_dir", None)
    if device_count > 1:
        jax.config.update("jax_num_cpu_devices", device_count)


def devices() -> dict[str, Any]:
    return {BACKEND: jax.devices(BACKEND)[0], REFERENCE: jax.devices(REFERENCE)[0]}


def devices_for(workload: Workload) -> dict[str, list]:
    """The devices ``workload`` runs on, per backend (the first ``workload.devices``)."""
    found = {b: jax.devices(platform)[:workload.devices]
             for b, platform in ((BACKEND, workload.backend or BACKEND), (REFERENCE, REFERENCE))}
    for backend, devs in found.items():
        if len(devs) < workload.devices:
            raise RuntimeError(f"{workload.name} needs {workload.devices} devices; {backend} "
                               f"has {len(devs)} (PJRTKIT_CPU_DEVICES may be set lower)")
    return found


@dataclasses.dataclass
class Result:
    workload: Workload
    stats: dict[str, timing.Stats] = dataclasses.field(default_factory=dict)
    mismatch: str | None = None     # why the pjrtkit result differs from XLA's
    error: str | None = None        # an exception on either backend (then no timing)
    error_traceback: str | None = None
    background_compile_s: float = 0.0   # waited after the first call (see wait_for_background)
    partition_s: float | None = None    # pjrtkit's one-time partitioning (several devices)
    # Real workloads: the first call and the first ten calls, compile included, per backend
    first_call_s: dict[str, float] = dataclasses.field(default_factory=dict)
    first_ten_s: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.mismatch is None and self.error is None

    @property
    def timed(self) -> bool:
        return BACKEND in self.stats and REFERENCE in self.stats

    @property
    def ratio(self) -> float | None:
        if not self.timed:
            return None
        return self.stats[BACKEND].median_s / self.stats[REFERENCE].median_s

    @property
    def met(self) -> bool | None:
        ratio = self.ratio
        if ratio is None or self.workload.target is None:  # no bar: the ratio is reported
            return None
        return ratio <= self.workload.target


def check(name: str, actual: Any, expected: Any, devices: list, loosen: float,
          close=None) -> None:
    """Every output of ``actual`` (pjrtkit) close to ``expected`` (XLA) and on ``devices``
    (``close(actual, expected, loosen)`` instead of the tolerances when given)."""
    if close is not None:
        close(actual, expected, loosen)
        return
    got, want = jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)
    if len(got) != len(want):
        raise AssertionError(f"{name}: {len(got)} outputs, XLA gives {len(want)}")
    for i, (a, e) in enumerate(zip(got, want)):
        if a.devices() != set(devices):
            raise AssertionError(f"{name}: output {i} is on {a.devices()}, expected {devices}")
        assert_close(a, e, what=f"{name} output {i}", loosen=loosen)


def wait_for_background(timeout_s: float = 120.0) -> float:
    """Wait until pjrtkit_cpu's background compiles (fused loops, native while loops) are done;
    returns the seconds waited.

    pjrtkit_cpu compiles its Numba loops on a background thread and runs the unfused kernels
    meanwhile, so compile never waits. "Warm" for the suite means after those compiles, as for
    XLA it means after its (synchronous) compile. The wait is reported per workload, and the
    outputs are checked against XLA both before and after it, so the path that is timed is the
    path that was checked."""
    try:
        from pjrtkit_cpu.fusion import cache
    except ImportError:
        return 0.0
    start = time.perf_counter()
    cache.wait_all(timeout=timeout_s)
    return time.perf_counter() - start


# Samples per backend of a real workload at most (each is seconds long).
REAL_REPEATS = 5


def _on_device(fn, args, device):
    """A call of ``fn(*args)`` un-jitted, with ``device`` as JAX's default device."""
    def call():
        with jax.default_device(device):
            return fn(*args)
    return call


def run(workload: Workload, size: str, settings: timing.Settings) -> Result:
    from pjrtkit.stablehlo.partition import partitioning_seconds

    result = Result(workload)
    try:
        devs = devices_for(workload)
        fn, args = workload.make(size)
        if workload.place is None:
            placed = {b: jax.device_put(args, d[0]) for b, d in devs.items()}
        else:
            placed = {b: workload.place(args, d) for b, d in devs.items()}
        if workload.kind == "compile":
            lowerers = {b: (lambda a=placed[b]: jax.jit(fn).lower(*a)) for b in devs}
            outs = {b: lowerers[b]().compile()(*placed[b]) for b in devs}
        else:
            if workload.kind == "call":
                calls = {b: _on_device(fn, placed[b], d[0]) for b, d in devs.items()}
            else:
                jitted = jax.jit(fn)
                calls = {b: (lambda a=placed[b]: jitted(*a)) for b in devs}
            before = partitioning_seconds()
            outs = {}
            for b in devs:
                start = time.perf_counter()
                outs[b] = jax.block_until_ready(calls[b]())
                if workload.real:  # time to steady state: compile and unfused calls included
                    result.first_call_s[b] = time.perf_counter() - start
                    for _ in range(workload.steady_calls - 1):
                        jax.block_until_ready(calls[b]())
                    result.first_ten_s[b] = time.perf_counter() - start
            if workload.devices > 1:
                result.partition_s = partitioning_seconds() - before
            first = outs[BACKEND]
            result.background_compile_s = wait_for_background()
            outs[BACKEND] = jax.block_until_ready(calls[BACKEND]())
    except Exception as exc:  # noqa: BLE001 - reported per workload
        result.error = f"{type(exc).__name__}: {exc}"
        result.error_traceback = traceback.format_exc()
        return result
    try:
        if workload.kind != "compile":
            check(workload.name + " (before background compiles)", first, outs[REFERENCE],
                  devs[BACKEND], workload.loosen, workload.close)
        check(workload.name, outs[BACKEND], outs[REFERENCE], devs[BACKEND], workload.loosen,
              workload.close)
    except AssertionError as exc:
        result.mismatch = str(exc).strip()
    del outs
    try:
        if workload.real:  # seconds per call: fewer samples keep the suite's length
            settings = dataclasses.replace(settings, repeats=min(settings.repeats,
                                                                 REAL_REPEATS))
        if workload.kind == "compile":
            result.stats = timing.interleaved_compile(lowerers, settings)
        else:
            result.stats = timing.interleaved(calls, settings)
    except Exception as exc:  # noqa: BLE001
        result.error = f"timing failed: {type(exc).__name__}: {exc}"
        result.error_traceback = traceback.format_exc()
    return result
