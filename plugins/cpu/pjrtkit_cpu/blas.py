"""How many threads BLAS may use while the cpu backend runs a program.

OpenBLAS's worker threads spin after each multi-threaded call. On a small machine, next to
JAX's own threads, XLA's thread pool and our executor, that spinning starves everyone else:
the MLP example's step went from 12 ms to 140 ms with two BLAS threads instead of one. So a
program runs with single-threaded BLAS, and only contractions big enough to gain from more
cores (``WIDE_FLOPS``) widen it for the duration of that one call, and only onto cores other
processes left idle (``spare_cores``). The user's own setting is restored after every
execution (the outermost one, when executions nest): the library is shared with the user's
NumPy code. Outside executions (plans run directly) nothing is changed.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

from pjrtkit.collectives.lockstep import usable_cores

# A matmul call of at least WIDE_FLOPS may use more BLAS threads (about 60 us of work on one
# core). With the SkylakeX kernels and idle cores two threads measured 1.7-1.9x faster from
# 2 MFLOP up (128x128x64: 12 -> 8 us; 128x784x512: 501 -> 278 us), and switching costs < 1 us;
# MLP step 3.8 -> 2.9 ms and transformer block 11 -> 7.3 ms against the old 1 GFLOP threshold
# (which came from Haswell kernels and from widening onto busy cores). Below ALWAYS_WIDE_FLOPS
# only onto idle cores; above it a call is long enough to win even on a loaded machine
# (2.6 GFLOP under a load of ~5 on 2 cores: median 52 ms on two threads, 74 ms on one).
WIDE_FLOPS = 1e7
ALWAYS_WIDE_FLOPS = 1e9

_lock = threading.Lock()
_controllers = None
_narrowed = 0  # executions currently running with single-threaded BLAS
_parallel = 0  # of those, the ones running kernels on several threads (no widening then)


def _blas():
    global _controllers
    if _controllers is None:
        with _lock:
            if _controllers is None:
                try:
                    from threadpoolctl import ThreadpoolController
                    found = [c for c in ThreadpoolController().lib_controllers
                             if c.user_api == "blas"]
                except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: leave BLAS alone
                    found = []
                _controllers = [(c, c.num_threads) for c in found]
    return _controllers


def _set(counts) -> None:
    for (controller, _), count in zip(_blas(), counts):
        controller.set_num_threads(count)


@contextlib.contextmanager
def single_threaded(parallel: bool = False):
    """BLAS single-threaded for the duration of one execution; then the user's setting.

    ``parallel``: the execution runs kernels on several threads of its own (a lockstep launch
    over several devices). Then no contraction widens while it runs: the thread count is one
    setting for the whole process, and OpenBLAS runs the calls of several threads that each
    use its thread pool one after the other (the 4-device MLP step's two workers ran no faster
    than one), while single-threaded calls run side by side, each on its caller's thread."""
    global _narrowed, _parallel
    controllers = _blas()
    if not controllers:
        yield
        return
    with _lock:
        _narrowed += 1
        _parallel += parallel
        _set([1] * len(controllers))
    try:
        yield
    finally:
        with _lock:
            _narrowed -= 1
            _parallel -= parallel
            if not _narrowed:
                _set([default for _, default in controllers])


@contextlib.contextmanager
def wide(flops: float, call_flops: float | None = None):
    """More BLAS threads, inside an execution, for a contraction of ``flops`` made of BLAS
    calls of at most ``call_flops`` each (default: one call); back to one thread afterwards.

    From ``WIDE_FLOPS`` up it gets as many threads as other processes leave idle
    (``spare_cores``); when each call has at least ``ALWAYS_WIDE_FLOPS``, every thread the
    user allows (threads stall per call, so only long calls win on busy cores)."""
    controllers = _blas()
    if not controllers or not _narrowed or flops < WIDE_FLOPS or _parallel:
        yield  # outside an execution BLAS already has the user's setting
        return
    if (flops if call_flops is None else call_flops) >= ALWAYS_WIDE_FLOPS:
        counts = [default for _, default in controllers]
    else:
        extra = spare_cores()
        counts = [min(default, 1 + extra) for _, default in controllers]
    if all(count <= 1 for count in counts):
        yield
        return
    _set(counts)
    try:
        yield
    finally:
        if _narrowed:
            _set([1] * len(controllers))


# How often the busy time of other processes is sampled, in seconds (/proc/stat counts in
# 10 ms ticks, so shorter windows would be mostly rounding).
SAMPLE_SECONDS = 0.2
_sample = None  # (monotonic time, busy ticks of all cpus, our cpu seconds, spare cores)


def spare_cores() -> int:
    """Cores that other processes left idle over the last ~SAMPLE_SECONDS, beyond the one this
    execution runs on.

    OpenBLAS's threads wait for each other by spinning: a helper thread that another process
    keeps off its core stalls every multi-threaded call (with a load of ~5 on 2 cores the
    convnet's 5x5 layer took a median 124 ms on two threads, 31 ms on one). So contractions
    only widen onto cores that were idle. Our own threads (BLAS helpers spinning, XLA's pool)
    do not count as load.
    Without /proc/stat (not Linux) every core counts as spare.
    """
    global _sample
    now = time.monotonic()
    sample = _sample
    if sample is not None and now - sample[0] < SAMPLE_SECONDS:
        return sample[3]
    busy = _busy_ticks()
    times = os.times()
    ours = times.user + times.system
    if busy is None:
        spare = cores() - 1
    elif sample is None:
        spare = 0  # no interval yet: stay narrow until the next sample
    else:
        elapsed = now - sample[0]
        others = ((busy - sample[1]) / _TICKS - (ours - sample[2])) / elapsed
        spare = max(0, int(cores() - 1 - others + 0.5))
    _sample = (now, busy, ours, spare)
    return spare


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_ticks():
    """Non-idle time of all cpus since boot, in clock ticks; None where unknown."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks) - ticks[3] - ticks[4]


def cores() -> int:
    return usable_cores()
