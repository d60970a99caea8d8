"""Plugin code that JAX reaches through the C API and that may never return, bounded in time.

Starting a backend is bounded by ``discovery`` (``PJRTKIT_BACKEND_START_TIMEOUT_S``). Two later
steps run a plugin's hooks before anything else can happen, and JAX waits on them with no
timeout of its own: creating a client (``PJRT_Client_Create``: ``pjrtkit_client_topology``
with JAX's options, when JAX first asks for the platform's devices) and a compile-only
topology (``PJRT_TopologyDescription_Create``: ``pjrtkit_make_topology``, from
``jax.experimental.topologies.get_topology_desc``). ``call_within`` runs such a step on a
daemon thread and, past the same number of seconds, raises DEADLINE_EXCEEDED naming it; the
thread is left running (Python cannot stop a thread) and its result, if it ever comes, is
dropped. A hook that hangs while holding the GIL in C code cannot be bounded this way.
"""
from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

from pjrtkit.discovery import START_TIMEOUT_VARIABLE, start_timeout_s
from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.fp_state import clean_thread

T = TypeVar("T")


class DeadlineExceeded(PjrtError):
    code = ErrorCode.DEADLINE_EXCEEDED


def call_within(step: Callable[[], T], what: str, timeout_s: float | None = None) -> T:
    """``step()``, run on its own daemon thread (with the caller's context variables); what it
    raises is raised here. Raises ``DeadlineExceeded`` naming ``what`` when it has not returned
    within ``timeout_s`` seconds (default ``start_timeout_s()``)."""
    timeout = start_timeout_s() if timeout_s is None else timeout_s
    outcome: dict[str, object] = {}
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome["value"] = context.run(step)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=clean_thread(run), name=f"pjrtkit-bounded {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise DeadlineExceeded(
            f"{what} did not finish within {timeout:g} s ({START_TIMEOUT_VARIABLE}); its "
            "thread is left running and its result will not be used")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[return-value]
