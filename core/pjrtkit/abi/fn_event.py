"""PJRT_Event_*: runtime Events behind handles that C destroys with PJRT_Event_Destroy."""
from __future__ import annotations

import logging
from typing import Any

from pjrtkit.abi._cffi import ffi
from pjrtkit.abi.args import Args, string
from pjrtkit.abi.errors import error_from_exception, pjrt_function
from pjrtkit.abi.handles import EVENTS, EventRef, deref, new_event
from pjrtkit.errors import ErrorCode, InvalidArgument, PjrtError

log = logging.getLogger("pjrtkit.abi")


def _event(a: Args) -> Any:
    return deref(a.req("event"), EventRef, f"{a.name}.event").obj


@pjrt_function("PJRT_Event_Destroy", never_fails=True)
def event_destroy(args: Any) -> None:
    EVENTS.release(Args(args).req("event"))


@pjrt_function("PJRT_Event_IsReady")
def event_is_ready(args: Any) -> None:
    a = Args(args)
    a.set("is_ready", bool(_event(a).is_ready()))


@pjrt_function("PJRT_Event_Error")
def event_error(args: Any) -> None:
    a = Args(args)
    # wait() returns at once for a ready event; callers are supposed to ask only then.
    error = _event(a).wait()
    if error is not None:
        raise error


@pjrt_function("PJRT_Event_Await")
def event_await(args: Any) -> None:
    a = Args(args)
    error = _event(a).wait()  # the runtime's wait releases the GIL while blocked
    if error is not None:
        raise error


@pjrt_function("PJRT_Event_OnReady")
def event_on_ready(args: Any) -> None:
    a = Args(args)
    event = _event(a)
    callback = a.req("callback")
    user_arg = a.req("user_arg")
    if callback == ffi.NULL:
        raise InvalidArgument("PJRT_Event_OnReady_Args.callback is NULL")

    def fire(error: BaseException | None) -> None:
        # Runs on whichever thread completes the event, with no runtime lock held. The C
        # callback owns the PJRT_Error it receives. cffi drops the GIL for the C call.
        # error_from_exception never raises (it falls back to a static error).
        err = ffi.NULL if error is None else error_from_exception(error, "PJRT_Event_OnReady")
        try:
            callback(err, user_arg)
        except BaseException:  # noqa: BLE001 - never raise into the runtime's completion path
            log.exception("PJRT_Event_OnReady callback raised")

    event.on_ready(fire)


@pjrt_function("PJRT_Event_Create")
def event_create(slot: int, args: Any) -> None:
    a = Args(args)
    a.require_outputs("event")
    from pjrtkit.runtime.event import Event  # runtime is imported lazily: abi must load alone
    a.set("event", new_event(Event()))


@pjrt_function("PJRT_Event_Set")
def event_set(args: Any) -> None:
    a = Args(args)
    event = _event(a)
    code = a.req("error_code")
    if code == 0:
        event.set(None)
    else:
        message = string(a.req("error_message"), a.req("error_message_size"),
                         "PJRT_Event_Set_Args.error_message")
        event.set(PjrtError(message, code=_error_code(code)))


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN
