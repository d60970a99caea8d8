"""Completion events: pending until the work is done, then ready with or without an error."""
from __future__ import annotations

import threading
from collections.abc import Callable

from pjrtkit.errors import PjrtError


class Event:
    """A one-shot completion. ``wait`` blocks on a lock (which releases the GIL), and
    ``on_ready`` callbacks run exactly once, outside any lock of ours, on the thread that
    completes the event (or the caller's, when already complete).

    Events are made for every execution and transfer, so the common cases stay cheap: an event
    born complete takes no lock, and a waiter's lock exists only while someone waits.
    """

    __slots__ = ("_ready", "_error", "_callbacks", "_lock", "_waiters")

    def __init__(self):
        self._ready = False
        self._error: PjrtError | None = None
        self._callbacks: list[Callable] | None = []
        self._lock = threading.Lock()
        self._waiters: list[threading.Lock] = []

    @classmethod
    def completed(cls, error: PjrtError | None = None) -> "Event":
        # The class fills its own fresh instance: no __init__, so no lock or list per event.
        event = cls.__new__(cls)
        event._ready = True  # noqa: SLF001
        event._error = error  # noqa: SLF001
        event._callbacks = None  # noqa: SLF001
        event._lock = _COMPLETED_LOCK  # noqa: SLF001
        event._waiters = []  # noqa: SLF001
        return event

    def set(self, error: PjrtError | None = None) -> None:
        with self._lock:
            if self._callbacks is None:
                return  # already complete: the first outcome wins
            self._error = error
            callbacks, self._callbacks = self._callbacks, None
            self._ready = True
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.release()
        for callback in callbacks:
            callback(error)

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        if not self._ready:
            with self._lock:
                if self._callbacks is not None:
                    self._callbacks.append(callback)
                    return
        callback(self._error)

    def is_ready(self) -> bool:
        return self._ready

    def error(self) -> PjrtError | None:
        return self._error

    def wait(self) -> PjrtError | None:
        if not self._ready:
            waiter = threading.Lock()
            waiter.acquire()
            with self._lock:
                if not self._ready:
                    self._waiters.append(waiter)
                else:
                    waiter.release()
            waiter.acquire()  # released by set(); a blocking acquire releases the GIL
        return self._error


# Never taken: a completed event has no state left to protect.
_COMPLETED_LOCK = threading.Lock()


def when_all(events, callback: Callable[[PjrtError | None], None]) -> None:
    """Call ``callback(first_error_or_None)`` once every event in ``events`` is ready."""
    pending = [e for e in events if not e.is_ready()]
    if not pending:
        errors = [e.error() for e in events if e.error() is not None]
        callback(errors[0] if errors else None)
        return
    lock = threading.Lock()
    state = {"left": len(pending), "error": None}

    def one_done(error):
        with lock:
            if error is not None and state["error"] is None:
                state["error"] = error
            state["left"] -= 1
            last = state["left"] == 0
        if last:
            first = state["error"]
            if first is None:
                done_errors = [e.error() for e in events if e.error() is not None]
                first = done_errors[0] if done_errors else None
            callback(first)

    for event in pending:
        event.on_ready(one_done)
