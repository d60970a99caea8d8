"""The PJRT host's key-value store (``PJRT_Client_Create``'s ``kv_get_callback``,
``kv_try_get_callback``, ``kv_put_callback``) as a ``pjrtkit.distributed.store.KeyValueStore``.

jaxlib gives a plugin its distributed runtime's store under ``jax.distributed``, with keys
prefixed ``"<platform>:"``. A failing callback returns a PJRT_Error made by the
``PJRT_CallbackError`` we pass it (``pjrtkit_kv_callback_error``: one of our own errors), whose
code and message we read and free.
"""
from __future__ import annotations

from typing import Any

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import Args
from pjrtkit.abi.errors import ERRORS, new_error, read_error
from pjrtkit.distributed.store import KeyValueStore
from pjrtkit.errors import ErrorCode, PjrtError

NULL = ffi.NULL


@ffi.def_extern(name="pjrtkit_kv_callback_error")
def _kv_callback_error(code: int, message: Any, size: int) -> Any:
    try:
        text = ffi.buffer(message, size)[:].decode(errors="replace") if message != NULL else ""
        return new_error(int(code), text)
    except BaseException:  # noqa: BLE001 - nothing may escape into C
        return new_error(int(ErrorCode.INTERNAL), "pjrtkit: bad key-value callback error")


_CALLBACK_ERROR = ffi.new("PJRT_CallbackError*", lib.pjrtkit_kv_callback_error)


def _raise_if_error(error: Any, what: str) -> None:
    if error == NULL:
        return
    try:
        code, message = read_error(error)
    except Exception:  # noqa: BLE001 - not one of ours: the host broke the contract
        raise PjrtError(f"{what} failed with an error pjrtkit did not make",
                        code=ErrorCode.INTERNAL) from None
    ERRORS.release(error)
    raise PjrtError(f"{what}: {message}", code=ErrorCode(code))


def _c_string(text: str) -> tuple[Any, int]:
    data = text.encode()
    return ffi.new("char[]", data), len(data)


class CallbackStore(KeyValueStore):
    """The three callbacks of one ``PJRT_Client_Create_Args`` (try_get may be absent: older
    hosts; then a try is a get with no wait)."""

    def __init__(self, get: Any, get_arg: Any, put: Any, put_arg: Any,
                 try_get: Any = NULL, try_get_arg: Any = NULL):
        super().__init__()
        self._get_cb, self._get_arg = get, get_arg
        self._put_cb, self._put_arg = put, put_arg
        self._try_get_cb, self._try_get_arg = try_get, try_get_arg

    @classmethod
    def from_create_args(cls, a: Args) -> "CallbackStore | None":
        get, put = a.opt("kv_get_callback", NULL), a.opt("kv_put_callback", NULL)
        if get == NULL or put == NULL:
            return None
        return cls(get, a.opt("kv_get_user_arg", NULL), put, a.opt("kv_put_user_arg", NULL),
                   a.opt("kv_try_get_callback", NULL), a.opt("kv_try_get_user_arg", NULL))

    def _put(self, key: str, value: bytes) -> None:
        args = ffi.new("PJRT_KeyValuePutCallback_Args*")
        ckey, key_size = _c_string(key)
        cvalue = ffi.new("char[]", value or b"\0")
        args.struct_size = ffi.sizeof("PJRT_KeyValuePutCallback_Args")
        args.key, args.key_size = ckey, key_size
        args.value, args.value_size = cvalue, len(value)
        args.callback_error = _CALLBACK_ERROR
        args.user_arg = self._put_arg
        _raise_if_error(self._put_cb(args), f"putting key {key!r} in the key-value store")

    def _take_value(self, args: Any) -> bytes:
        value = ffi.buffer(args.value, args.value_size)[:] if args.value != NULL else b""
        if args.value_deleter_callback != NULL and args.value != NULL:
            args.value_deleter_callback(args.value)
        return value

    def _get(self, key: str, timeout_s: float) -> bytes:
        args = ffi.new("PJRT_KeyValueGetCallback_Args*")
        ckey, key_size = _c_string(key)
        args.struct_size = ffi.sizeof("PJRT_KeyValueGetCallback_Args")
        args.key, args.key_size = ckey, key_size
        args.timeout_in_ms = max(1, min(int(timeout_s * 1000), 2**31 - 1))
        args.callback_error = _CALLBACK_ERROR
        args.user_arg = self._get_arg
        _raise_if_error(self._get_cb(args), f"getting key {key!r} from the key-value store "
                                            f"(waited up to {timeout_s:g} s)")
        return self._take_value(args)

    def _try_get(self, key: str) -> bytes | None:
        if self._try_get_cb == NULL:
            try:
                return self._get(key, 0.001)
            except PjrtError as exc:
                if exc.code in (ErrorCode.DEADLINE_EXCEEDED, ErrorCode.NOT_FOUND):
                    return None
                raise
        args = ffi.new("PJRT_KeyValueTryGetCallback_Args*")
        ckey, key_size = _c_string(key)
        args.struct_size = ffi.sizeof("PJRT_KeyValueTryGetCallback_Args")
        args.key, args.key_size = ckey, key_size
        args.callback_error = _CALLBACK_ERROR
        args.user_arg = self._try_get_arg
        try:
            _raise_if_error(self._try_get_cb(args), f"trying key {key!r} in the key-value store")
        except PjrtError as exc:
            if exc.code == ErrorCode.NOT_FOUND:
                return None
            raise
        return self._take_value(args)
