"""The vendor drivers' memory pool (pjrtkit_gpu.drivers.memory_pool): freed memory is kept per
device and rounded size and handed to the next allocation of that size, up to the limit;
past it, and on release_all, it goes back to the runtime's free (here a function recording
what it is given, standing in for cuMemFree)."""
from __future__ import annotations

from pjrtkit_gpu.drivers.memory_pool import GRANULE, MemoryPool, rounded


def test_sizes_round_up_to_the_granule():
    assert rounded(0) == rounded(1) == GRANULE
    assert rounded(GRANULE) == GRANULE and rounded(GRANULE + 1) == 2 * GRANULE


def test_freed_memory_is_reused_by_size_and_device_and_the_limit_holds():
    released = []
    pool = MemoryPool(lambda device, pointer: released.append((device, pointer)),
                      limit_bytes=3 * GRANULE)
    pool.give(0, GRANULE, 100)
    pool.give(0, 2 * GRANULE, 200)
    assert pool.kept_bytes(0) == 3 * GRANULE and not released
    pool.give(0, GRANULE, 300)            # past the limit: released at once
    assert released == [(0, 300)]
    assert pool.take(1, GRANULE) is None  # another device keeps nothing
    assert pool.take(0, 4 * GRANULE) is None
    assert pool.take(0, GRANULE) == 100 and pool.take(0, GRANULE) is None
    assert pool.kept_bytes(0) == 2 * GRANULE
    pool.give(1, GRANULE, 400)
    pool.release_all(0)
    assert released == [(0, 300), (0, 200)] and pool.kept_bytes(0) == 0
    assert pool.take(1, GRANULE) == 400
