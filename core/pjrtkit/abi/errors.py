"""PJRT_Error objects and the one decorator every callback goes through.

A callback returns NULL on success or a new PJRT_Error that C owns until PJRT_Error_Destroy.
Python exceptions never cross into C: ``pjrt_function`` turns each into a PJRT_Error with the
exception's PJRT code (``PjrtError.code``; anything else is INTERNAL naming the function), in the
spirit of pygit2's ``libgit2_callback``. The error travels to the user through jaxlib, so it is
not logged again here, except unexpected exceptions, whose traceback is logged once per
(function, exception type) because the PJRT message cannot carry it.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable

from pjrtkit import profiling
from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import Args
from pjrtkit.abi.handles import HandleTable, Ref, deref, set_c_answers
from pjrtkit.errors import ErrorCode, PjrtError, host_out_of_memory

log = logging.getLogger("pjrtkit.abi")

NULL = ffi.NULL
_VALID_CODES = frozenset(int(c) for c in ErrorCode)


class ErrorRef(Ref):
    """The object behind a PJRT_Error*: code plus a message C reads until Error_Destroy."""

    __slots__ = ("code", "message", "permanent")
    KIND = lib.PJRTKIT_KIND_ERROR

    def __init__(self, code: int, message: str, *, permanent: bool = False):
        super().__init__(None)
        self.code = code if code in _VALID_CODES else int(ErrorCode.UNKNOWN)
        self.message = message
        self.permanent = permanent


ERRORS: HandleTable[ErrorRef] = HandleTable("error", "PJRT_Error*")

# Returned when even building an error fails (MemoryError...): C must still see a failure, and
# this one needs no allocation. Error_Destroy leaves it alone.
_FALLBACK = ErrorRef(int(ErrorCode.INTERNAL), "pjrtkit could not build a PJRT_Error",
                     permanent=True)
_FALLBACK_C, _FALLBACK_HANDLE = _FALLBACK.make_c()  # alive for the process
_FALLBACK_PTR = ffi.cast("PJRT_Error*", _FALLBACK_C)


def new_error(code: int, message: str) -> Any:
    """A new PJRT_Error* owned by C until PJRT_Error_Destroy."""
    return ERRORS.new(ErrorRef(int(code), message))


def describe(exc: BaseException, function: str) -> tuple[int, str]:
    """(PJRT code, message) for an exception raised while serving ``function``."""
    if isinstance(exc, PjrtError):
        return int(exc.code), str(exc)
    if isinstance(exc, MemoryError):
        return int(ErrorCode.RESOURCE_EXHAUSTED), str(host_out_of_memory(exc, function))
    text = str(exc)
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return int(ErrorCode.INTERNAL), f"{function} failed in pjrtkit: {detail}"


def error_from_exception(exc: BaseException, function: str) -> Any:
    try:
        code, message = describe(exc, function)
        return new_error(code, message)
    except BaseException:  # noqa: BLE001 - nothing may escape into C
        return _FALLBACK_PTR


def read_error(ptr: Any) -> tuple[int, str] | None:
    """(code, message) of a PJRT_Error* made by pjrtkit, or None for NULL (used by tests)."""
    if ptr == NULL:
        return None
    ref = deref(ptr, ErrorRef, "error")
    return ref.code, ref.message


_logged: set[tuple[str, type]] = set()


def note_failure(function: str, exc: BaseException, *, fatal_if_returned: bool) -> None:
    """Log a callback's failure: at debug level for a PjrtError that goes back to the caller,
    else once per (function, exception type) with its traceback."""
    if isinstance(exc, PjrtError) and not fatal_if_returned:
        log.debug("%s -> %s: %s", function, exc.code.name, exc)
        return
    key = (function, type(exc))
    if key in _logged:
        return
    _logged.add(key)
    level = logging.ERROR if fatal_if_returned else logging.WARNING
    log.log(level, "%s raised %s (reported once per function and exception type)",
            function, type(exc).__name__, exc_info=(type(exc), exc, exc.__traceback__))


REGISTERED: dict[str, Callable[..., Any]] = {}
NEVER_FAILS: set[str] = set()  # functions that report failure only to the log (tests check it)

# PJRTKIT_TRACE_ABI=1 logs every C call with its thread: the first tool for a hang, since a hang
# shows no Python frame. Decided once at import so the normal path pays nothing.
_TRACE = os.environ.get("PJRTKIT_TRACE_ABI", "") not in ("", "0")
if _TRACE or profiling.ENABLED:
    set_c_answers(False)  # the trace and the profile must see every call, so all go to Python


def _traced(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    def traced(*c_args):
        thread = threading.current_thread().name
        print(f"[pjrtkit abi] -> {name} ({thread})", file=sys.stderr, flush=True)
        result = callback(*c_args)
        print(f"[pjrtkit abi] <- {name}", file=sys.stderr, flush=True)
        return result
    return traced


def pjrt_function(name: str, *, never_fails: bool = False
                  ) -> Callable[[Callable[..., None]], Callable[..., Any]]:
    """Register ``fn`` as the extern "Python" callback ``pjrtkit_<name>``.

    ``fn`` receives the C arguments (``args``, or ``slot, args`` for slot-routed functions),
    fills the Args outputs and returns None. Raised exceptions become the returned PJRT_Error.

    ``never_fails``: jaxlib aborts the process when this function returns an error (destroy
    functions, LoadedExecutable_GetExecutable/GetDeviceAssignment), so a failure is logged and
    NULL returned; such functions are written so that they cannot fail on valid handles.
    Functions that return void in C (Error_Destroy, Error_Message) are always never_fails.
    """
    def register(fn: Callable[..., None]) -> Callable[..., Any]:
        if name in REGISTERED:
            raise RuntimeError(f"{name} is implemented twice ({REGISTERED[name].__module__} and "
                               f"{fn.__module__})")
        returns_void = ffi.typeof(getattr(lib, f"pjrtkit_{name}")).result is ffi.typeof("void")

        if returns_void or never_fails:
            def callback(*c_args):
                try:
                    fn(*c_args)
                except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
                    note_failure(name, exc, fatal_if_returned=True)
                return None if returns_void else NULL
        else:
            def callback(*c_args):
                try:
                    fn(*c_args)
                    return NULL
                except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
                    note_failure(name, exc, fatal_if_returned=False)
                    return error_from_exception(exc, name)

        if _TRACE:
            callback = _traced(name, callback)
        callback = profiling.wrap_c_function(name, callback)  # PJRTKIT_PROFILE; identity if off
        callback.__name__ = f"pjrtkit_{name}"
        callback.__qualname__ = callback.__name__
        callback.__wrapped__ = fn
        ffi.def_extern(name=f"pjrtkit_{name}")(callback)
        REGISTERED[name] = fn
        if returns_void or never_fails:
            NEVER_FAILS.add(name)
        return fn
    return register


# ---- PJRT_Error_* ----------------------------------------------------------------------------

@pjrt_function("PJRT_Error_Destroy")
def error_destroy(args: Any) -> None:
    # Void in C: a NULL or too small Args (found by the C ABI fuzzer: NULL Args crashed all
    # three Error_* functions) can only be logged.
    ptr = Args(args).req("error")
    if ptr != NULL and ptr != _FALLBACK_PTR:
        ERRORS.release(ptr)


@pjrt_function("PJRT_Error_Message")
def error_message(args: Any) -> None:
    a = Args(args)
    ref = deref(a.req("error"), ErrorRef, "PJRT_Error_Message_Args.error")
    chars, size = ref.cstr("message", ref.message)
    a.set("message", chars)
    a.set("message_size", size)


@pjrt_function("PJRT_Error_GetCode", never_fails=True)
def error_get_code(args: Any) -> None:
    a = Args(args)
    ref = deref(a.req("error"), ErrorRef, "PJRT_Error_GetCode_Args.error")
    a.set("code", ref.code)
