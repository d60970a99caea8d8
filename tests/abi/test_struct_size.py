"""struct_size: larger structs from newer callers work, too-small ones are INVALID_ARGUMENT."""
from __future__ import annotations

import pytest
from abi_support import FAKE, new_args, ok, take_error

from pjrtkit.abi._cffi import ffi
from pjrtkit.abi.args import Args
from pjrtkit.errors import ErrorCode, InvalidArgument

EXTRA = 64
SENTINEL = 0xA5


def _oversized(name: str):
    """An Args struct as a caller built against a newer header passes it: EXTRA unknown bytes."""
    size = ffi.sizeof(f"{name}_Args") + EXTRA
    raw = ffi.new("unsigned char[]", size)
    ffi.memmove(raw, bytes([SENTINEL]) * size, size)
    args = ffi.cast(f"{name}_Args*", raw)
    ffi.memmove(args, bytes(ffi.sizeof(f"{name}_Args")), ffi.sizeof(f"{name}_Args"))
    args.struct_size = size
    return raw, args


def test_larger_struct_works_and_its_tail_is_untouched(table):
    raw, args = _oversized("PJRT_Plugin_Attributes")
    ok(table, table.PJRT_Plugin_Attributes(args))
    assert args.num_attributes == len(FAKE.attributes)
    base = ffi.sizeof("PJRT_Plugin_Attributes_Args")
    assert bytes(ffi.buffer(raw + base, EXTRA)) == bytes([SENTINEL]) * EXTRA


def test_larger_struct_through_a_handle_function(table):
    raw, args = _oversized("PJRT_Error_GetCode")
    from pjrtkit.abi.errors import new_error

    args.error = new_error(ErrorCode.NOT_FOUND, "x")
    ok(table, table.PJRT_Error_GetCode(args))
    assert args.code == ErrorCode.NOT_FOUND
    table.PJRT_Error_Destroy(new_args("PJRT_Error_Destroy", error=args.error))


def test_too_small_struct_is_invalid_argument_naming_struct_and_field(table):
    args = new_args("PJRT_Plugin_Attributes")
    args.struct_size = ffi.offsetof("PJRT_Plugin_Attributes_Args", "attributes")
    code, message = take_error(table, table.PJRT_Plugin_Attributes(args))
    assert code == ErrorCode.INVALID_ARGUMENT
    assert "PJRT_Plugin_Attributes_Args.attributes" in message
    assert args.attributes == ffi.NULL  # nothing written past what the caller owns


def test_too_small_struct_in_a_slot_routed_create(table):
    calls_before = len(FAKE.topology_calls)
    args = new_args("PJRT_TopologyDescription_Create")
    args.struct_size = ffi.offsetof("PJRT_TopologyDescription_Create_Args", "topology")
    code, message = take_error(table, table.PJRT_TopologyDescription_Create(args))
    assert code == ErrorCode.INVALID_ARGUMENT
    assert "PJRT_TopologyDescription_Create_Args.topology" in message
    assert len(FAKE.topology_calls) == calls_before, "nothing may run before the outputs are known to fit"


@pytest.mark.parametrize("size", [0, 7])
def test_struct_size_below_the_header(table, size):
    args = new_args("PJRT_Plugin_Attributes")
    args.struct_size = size
    code, message = take_error(table, table.PJRT_Plugin_Attributes(args))
    assert code == ErrorCode.INVALID_ARGUMENT
    assert "PJRT_Plugin_Attributes_Args.struct_size" in message


def test_fields_beyond_struct_size_read_as_absent():
    args = new_args("PJRT_Client_Create")
    args.kv_try_get_user_arg = ffi.cast("void*", 1234)
    args.struct_size = ffi.offsetof("PJRT_Client_Create_Args", "kv_try_get_callback")
    view = Args(args)
    assert view.opt("kv_try_get_user_arg", "absent") == "absent"
    assert view.req("client") == ffi.NULL
    with pytest.raises(InvalidArgument, match="PJRT_Client_Create_Args.kv_try_get_user_arg"):
        view.req("kv_try_get_user_arg")
    with pytest.raises(InvalidArgument, match="kv_try_get_callback"):
        view.set("kv_try_get_callback", ffi.NULL)


def test_null_args_pointer_is_invalid_argument(table):
    code, message = take_error(table, table.PJRT_Plugin_Attributes(ffi.NULL))
    assert code == ErrorCode.INVALID_ARGUMENT
    assert "PJRT_Plugin_Attributes_Args" in message
