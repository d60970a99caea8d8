"""Working memory a convolution kernel keeps between calls: its padded input and its patches.

An im2col convolution copies every input element once per window offset; for the 5x5 layer of
a small convnet that is 80 MB per call. Written in cache-sized pieces into one buffer kept by
the kernel, the copy stays in cache for the matmul that reads it and no call pays for fresh
pages (here ~3.5 us to touch each new 4 KiB page).

The buffers never leave the kernel: results are always written to arrays the kernel allocates
for that call, so a value handed to the caller is never also scratch. One executable may run
on several threads at once (inline executions on callers' threads beside the worker), so the
buffers are taken under a lock; a call that finds them taken uses fresh ones instead of
waiting.
"""
from __future__ import annotations

import contextlib
import math
import threading

import numpy as np


# An executable holds its kernels' buffers as long as it lives; beyond this size per kernel
# (a padded input of a big layer) they are allocated per call instead, where the page cost is
# small next to the convolution itself.
KEEP_BYTES = 64 << 20


class Scratch:
    """Reusable buffers of fixed shapes for one kernel.

    ``zeroed`` buffers start as zeros and the kernel promises to write only positions that it
    rewrites on every call (the interior of a padded input), so everything else stays zero.
    """

    __slots__ = ("_lock", "_buffers", "_specs", "_keep")

    def __init__(self, specs: dict[str, tuple[tuple[int, ...], np.dtype, bool]]):
        self._specs = specs  # name -> (shape, dtype, zeroed)
        self._buffers = None
        self._lock = threading.Lock()
        size = sum(math.prod(shape) * np.dtype(dtype).itemsize
                   for shape, dtype, _ in specs.values())
        self._keep = size <= KEEP_BYTES

    def _fresh(self) -> dict[str, np.ndarray]:
        return {name: (np.zeros if zeroed else np.empty)(shape, dtype)
                for name, (shape, dtype, zeroed) in self._specs.items()}

    @contextlib.contextmanager
    def take(self):
        """The kept buffers, or fresh ones while another thread holds them."""
        if not self._keep or not self._lock.acquire(blocking=False):
            yield self._fresh()
            return
        try:
            if self._buffers is None:
                self._buffers = self._fresh()
            yield self._buffers
        finally:
            self._lock.release()
