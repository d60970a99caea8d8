"""The timing method, identical for both backends.

One *sample* of a backend is a loop of ``n`` calls with one ``jax.block_until_ready`` after the
last, divided by ``n``: dispatch and execution overlap exactly as in a real program, and the
wait is paid once. ``n`` is calibrated per backend so that a sample lasts about
``Settings.sample_s`` (a 10x slower backend gets fewer calls per sample, not a 10x longer run).
Samples of the two backends are interleaved (A B, B A, A B, ...) so that drift of the machine
(thermal, other load) hits both alike; the result is the median over ``repeats`` samples.
Python's garbage collector is off during a sample (as in ``timeit``).

Compile timing is one ``lowered.compile()`` per sample (a fresh ``jax.jit(...).lower(...)``
each time, lowering not timed, ``jax.clear_caches()`` before each).
"""
from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Settings:
    repeats: int          # samples per backend (the median is taken over these)
    sample_s: float       # target duration of one sample
    max_calls: int        # upper bound of calls per sample
    warmup: int = 2       # untimed calls after compilation, before calibration
    # Idle gap before each sample, so the other backend's thread pools have stopped spinning.
    # Measured here: OpenBLAS workers (NumPy, behind pjrtkit) keep spinning for ~0.1 s after
    # their last job; XLA's 1024^2 matmul took 5.0 ms alone, 7.5-9 ms 20-50 ms after a
    # pjrtkit sample, 5.0 ms after a 0.1-0.2 s pause.
    pause_s: float = 0.0


QUICK = Settings(repeats=7, sample_s=0.05, max_calls=5000, pause_s=0.15)
FULL = Settings(repeats=21, sample_s=0.2, max_calls=50000, pause_s=0.15)
SMOKE = Settings(repeats=1, sample_s=0.0, max_calls=1, warmup=0)


@dataclasses.dataclass
class Stats:
    median_s: float
    min_s: float
    max_s: float
    iqr_s: float
    samples: list[float]
    calls_per_sample: int

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = +-2.5 %)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {"median_s": self.median_s, "min_s": self.min_s, "max_s": self.max_s,
                "iqr_s": self.iqr_s, "spread": self.spread,
                "calls_per_sample": self.calls_per_sample, "samples_s": self.samples}


def stats(samples: list[float], calls: int) -> Stats:
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return Stats(statistics.median(ordered), ordered[0], ordered[-1], iqr, samples, calls)


def sample(call: Callable[[], Any], n: int) -> float:
    """Seconds per call of ``n`` calls and one block_until_ready at the end."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = perf_counter()
        out = None
        for _ in range(n):
            out = call()
        jax.block_until_ready(out)
        return (perf_counter() - start) / n
    finally:
        if gc_was_enabled:
            gc.enable()


def calibrate(call: Callable[[], Any], settings: Settings) -> int:
    """Calls per sample so that one sample lasts about ``settings.sample_s``."""
    for _ in range(settings.warmup):
        jax.block_until_ready(call())
    if settings.max_calls <= 1:
        return 1
    n = 1
    while True:
        per_call = sample(call, n)
        elapsed = per_call * n
        if elapsed >= settings.sample_s / 4 or n >= settings.max_calls:
            break
        n = min(settings.max_calls, n * 8)
    return max(1, min(settings.max_calls, math.ceil(settings.sample_s / max(per_call, 1e-9))))


def interleaved(calls: dict[str, Callable[[], Any]], settings: Settings) -> dict[str, Stats]:
    """Time every call of ``calls`` (one per backend) with interleaved samples."""
    counts = {name: calibrate(call, settings) for name, call in calls.items()}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for r in range(settings.repeats):
        for name in (order if r % 2 == 0 else order[::-1]):
            if settings.pause_s:
                time.sleep(settings.pause_s)
            samples[name].append(sample(calls[name], counts[name]))
    return {name: stats(samples[name], counts[name]) for name in calls}


def interleaved_compile(lowerers: dict[str, Callable[[], Any]],
                        settings: Settings) -> dict[str, Stats]:
    """Time ``lowerer().compile()`` per backend; ``lowerer`` returns a fresh ``Lowered``."""
    samples: dict[str, list[float]] = {name: [] for name in lowerers}
    order = list(lowerers)
    for r in range(settings.repeats):
        for name in (order if r % 2 == 0 else order[::-1]):
            jax.clear_caches()
            lowered = lowerers[name]()
            gc.collect()
            if settings.pause_s:
                time.sleep(settings.pause_s)
            gc_was_enabled = gc.isenabled()
            gc.disable()
            try:
                start = perf_counter()
                lowered.compile()
                samples[name].append(perf_counter() - start)
            finally:
                if gc_was_enabled:
                    gc.enable()
    return {name: stats(samples[name], 1) for name in lowerers}
