"""Errors that cross the C boundary as PJRT_Error, each with a real PJRT error code.

Hooks and runtime code raise these; the ABI layer turns them into a PJRT_Error whose code is
``exc.code``. Any other exception escaping a hook becomes INTERNAL naming the hook.
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """PJRT_Error_Code values (they follow absl::StatusCode)."""

    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class PjrtError(Exception):
    """Base of every error that maps to a PJRT error code."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str, *, code: ErrorCode | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class InvalidArgument(PjrtError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(PjrtError):
    code = ErrorCode.NOT_FOUND


class FailedPrecondition(PjrtError):
    code = ErrorCode.FAILED_PRECONDITION


class ResourceExhausted(PjrtError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class OutOfRange(PjrtError):
    code = ErrorCode.OUT_OF_RANGE


class Unimplemented(PjrtError):
    code = ErrorCode.UNIMPLEMENTED


class Internal(PjrtError):
    code = ErrorCode.INTERNAL


def host_out_of_memory(exc: MemoryError, doing: str) -> ResourceExhausted:
    """What a host allocation failure (NumPy's MemoryError, which names the size) becomes:
    RESOURCE_EXHAUSTED saying what was being done; the process goes on."""
    detail = str(exc) or "no size given"
    return ResourceExhausted(f"{doing}: the host is out of memory (MemoryError: {detail})")


class BackendLoadFailure(Exception):
    """A backend that was asked for could not be loaded (wraps the stevedore/import error)."""


class PluginContractError(BackendLoadFailure):
    """A backend's hook module breaks the hook contract (a misspelt hook, an undecorated hook
    function, arguments the hook does not have): it is refused when it loads, with what to fix,
    instead of registering and silently never being called."""
