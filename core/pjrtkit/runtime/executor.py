"""The async executor: one worker thread per client runs programs in submission order.

In-order execution on one thread means a program never starts before the programs that
produce its inputs (they were submitted earlier), so execution itself needs no dependency
tracking; the events tell JAX when results are ready. Work submitted from the worker thread
itself (a host callback that runs JAX on the same client) runs at once instead.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from pjrtkit.kernel_threads import kernel_thread

log = logging.getLogger(__name__)


class Executor:
    def __init__(self, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=kernel_thread(self._run), name=f"pjrtkit-{name}",
                                        daemon=True)
        self._thread.start()

    @property
    def idle(self) -> bool:
        return self._pending == 0

    def submit(self, work: Callable[[], None]) -> None:
        if threading.current_thread() is self._thread:
            # Submitted by a program running on this worker (a host callback calling JAX):
            # queued, it would wait for the program that waits for it. It runs now, nested;
            # the programs queued behind the running one were submitted later anyway.
            work()
            return
        with self._lock:
            self._pending += 1
        self._queue.put(work)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work()
            except BaseException:  # work reports its own errors through events
                log.exception("pjrtkit executor: unexpected error escaped a work item")
            finally:
                with self._lock:
                    self._pending -= 1

    def shutdown(self) -> None:
        self._queue.put(None)
