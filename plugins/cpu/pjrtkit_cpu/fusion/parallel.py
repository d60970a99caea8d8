"""Large fused loops split over idle cores, as XLA's CPU backend splits its loops.

Every fused loop (``codegen.generate``) and row program (``rows.kernel_source``) takes the range
of its outer loop as its last two arguments, ``lo`` and ``hi``: elements for a flat loop, rows
for a loop over rows. Each element or row is computed by the same code whichever range it falls
in, so a split changes no result. ``run`` calls the kernel once over the whole range, or, for a
loop of at least ``MIN_ELEMENTS_PER_PART`` elements per part, over contiguous parts: the
calling thread takes the first and the helper threads the rest (kernels are compiled
``nogil``, so the parts run side by side).

Parts go only to cores that other processes left idle (``blas.spare_cores``) and never while an
execution runs kernels on several threads of its own already (a lockstep launch over several
devices, ``blas.single_threaded(parallel=True)``). Measured on this project's 2-core machines:
the layernorm workload (4096 x 1024 float32, one row program) took 4.2 ms on one thread where
XLA's CPU took 2.4-4.1 ms. ``PJRTKIT_CPU_PARALLEL_LOOPS=0`` keeps every loop on one thread.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading

from pjrtkit.collectives.lockstep import usable_cores

from pjrtkit_cpu import blas

ENABLED = os.environ.get("PJRTKIT_CPU_PARALLEL_LOOPS", "1") not in ("", "0")
# Below this many elements per part a helper thread's hand-over (tens of microseconds) costs
# more than it saves.
MIN_ELEMENTS_PER_PART = 1 << 17

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _helpers() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max(1, usable_cores() - 1), thread_name_prefix="pjrtkit-cpu-loop")
        return _pool


def parts(units: int, elements: int) -> int:
    """How many parts a loop of ``units`` outer iterations over ``elements`` elements runs
    in now."""
    if not ENABLED or units < 2 or elements < 2 * MIN_ELEMENTS_PER_PART or blas.parallel_now():
        return 1
    return max(1, min(units, elements // MIN_ELEMENTS_PER_PART, 1 + blas.spare_cores()))


def run(kernel, arguments: list, units: int, elements: int) -> None:
    """``kernel(*arguments, lo, hi)`` over ``0 <= lo < hi <= units``, in parts when that pays
    (see the module docstring); returns once every part is done, raising a part's error."""
    count = parts(units, elements)
    if count == 1:
        kernel(*arguments, 0, units)
        return
    bounds = [units * p // count for p in range(count + 1)]
    pool = _helpers()
    futures = [pool.submit(kernel, *arguments, bounds[p], bounds[p + 1])
               for p in range(1, count)]
    try:
        kernel(*arguments, bounds[0], bounds[1])
    finally:
        for future in futures:
            future.result()
