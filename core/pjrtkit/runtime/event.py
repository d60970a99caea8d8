"""Completion events: pending until the work is done, then ready with or without an error."""
from __future__ import annotations

import threading
from collections.abc import Callable

from pjrtkit.errors import PjrtError


class Event:
    """A one-shot completion. ``wait`` blocks in ``threading.Event.wait`` (which releases the
    GIL), and ``on_ready`` callbacks run exactly once, outside any lock of ours, on the thread
    that completes the event (or the caller's, when already complete)."""

    __slots__ = ("_done", "_error", "_callbacks", "_lock")

    def __init__(self):
        self._done = threading.Event()
        self._error: PjrtError | None = None
        self._callbacks: list[Callable] | None = []
        self._lock = threading.Lock()

    @classmethod
    def completed(cls, error: PjrtError | None = None) -> "Event":
        event = cls()
        event.set(error)
        return event

    def set(self, error: PjrtError | None = None) -> None:
        with self._lock:
            if self._callbacks is None:
                return  # already complete: the first outcome wins
            self._error = error
            callbacks, self._callbacks = self._callbacks, None
            self._done.set()
        for callback in callbacks:
            callback(error)

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        with self._lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        callback(self._error)

    def is_ready(self) -> bool:
        return self._done.is_set()

    def error(self) -> PjrtError | None:
        return self._error

    def wait(self) -> PjrtError | None:
        self._done.wait()
        return self._error


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
