"""PJRT_Error: codes and messages round-trip; exceptions in callbacks become PJRT errors."""
from __future__ import annotations

import logging

import pytest
from abi_support import FAKE, new_args, take_error

from pjrtkit.abi._cffi import ffi
from pjrtkit.abi.errors import ERRORS, new_error
from pjrtkit.abi.fn_unimplemented import UNIMPLEMENTED
from pjrtkit.errors import ErrorCode, NotFound


@pytest.mark.parametrize("code", list(ErrorCode))
def test_code_and_message_round_trip_through_c(table, code):
    before = len(ERRORS)
    message = f"{code.name} happened: ünïcode"
    assert take_error(table, new_error(code, message)) == (code, message)
    assert len(ERRORS) == before, "Error_Destroy must release the error"


def test_error_destroy_accepts_null(table):
    table.PJRT_Error_Destroy(new_args("PJRT_Error_Destroy", error=ffi.NULL))


def test_pjrt_error_keeps_its_code(table):
    FAKE.topology_error = NotFound("no topology called 'v9'")
    try:
        args = new_args("PJRT_TopologyDescription_Create")
        assert take_error(table, table.PJRT_TopologyDescription_Create(args)) == (
            ErrorCode.NOT_FOUND, "no topology called 'v9'")
    finally:
        FAKE.topology_error = None


def test_python_exception_is_internal_naming_function_type_and_text(table, caplog):
    FAKE.topology_error = ZeroDivisionError("boom")
    try:
        with caplog.at_level(logging.WARNING, logger="pjrtkit.abi"):
            for _ in range(3):
                code, message = take_error(table, table.PJRT_TopologyDescription_Create(
                    new_args("PJRT_TopologyDescription_Create")))
                assert code == ErrorCode.INTERNAL
                assert "PJRT_TopologyDescription_Create" in message
                assert "ZeroDivisionError" in message and "boom" in message
    finally:
        FAKE.topology_error = None
    logged = [r for r in caplog.records if "ZeroDivisionError" in r.getMessage()]
    assert len(logged) <= 1, "an unexpected exception is logged at most once"


def test_base_exception_does_not_escape(table):
    FAKE.topology_error = KeyboardInterrupt()
    try:
        code, message = take_error(table, table.PJRT_TopologyDescription_Create(
            new_args("PJRT_TopologyDescription_Create")))
    finally:
        FAKE.topology_error = None
    assert code == ErrorCode.INTERNAL and "KeyboardInterrupt" in message


def test_unimplemented_functions_name_themselves(table):
    assert "PJRT_Client_CreateViewOfDeviceBuffer" in UNIMPLEMENTED
    args = new_args("PJRT_Client_CreateViewOfDeviceBuffer")
    assert take_error(table, table.PJRT_Client_CreateViewOfDeviceBuffer(args)) == (
        ErrorCode.UNIMPLEMENTED, "PJRT_Client_CreateViewOfDeviceBuffer is not implemented by pjrtkit")


def test_unimplemented_slot_routed_function(table):
    args = new_args("PJRT_TopologyDescription_Deserialize")
    code, message = take_error(table, table.PJRT_TopologyDescription_Deserialize(args))
    assert code == ErrorCode.UNIMPLEMENTED and "PJRT_TopologyDescription_Deserialize" in message


def test_functions_whose_error_aborts_jaxlib_never_return_one(table):
    from pjrtkit.abi.errors import NEVER_FAILS
    from pjrtkit.abi.fn_unimplemented import SLOTS

    must = {n for n in SLOTS if n.endswith("_Destroy") or n.startswith("PJRT_Error_")} | {
        "PJRT_LoadedExecutable_GetExecutable", "PJRT_LoadedExecutable_GetDeviceAssignment"}
    assert must <= NEVER_FAILS, sorted(must - NEVER_FAILS)


@pytest.mark.parametrize("name", [n for n in UNIMPLEMENTED if not n.endswith("_Destroy")])
def test_every_unimplemented_slot_answers_unimplemented(table, name):
    assert take_error(table, getattr(table, name)(new_args(name))) == (
        ErrorCode.UNIMPLEMENTED, f"{name} is not implemented by pjrtkit")


@pytest.mark.parametrize("name", [n for n in UNIMPLEMENTED if n.endswith("_Destroy")])
def test_destroy_of_kinds_pjrtkit_never_creates_succeeds(table, name):
    assert getattr(table, name)(new_args(name)) == ffi.NULL


def test_never_failing_function_swallows_and_logs(table, caplog):
    from pjrtkit.abi.handles import BUFFERS, BufferRef

    class ExplodingBuffer:
        def destroy(self):
            raise RuntimeError("destroy exploded")

    handle = BUFFERS.new(BufferRef(ExplodingBuffer(), client=None))
    with caplog.at_level(logging.ERROR, logger="pjrtkit.abi"):
        assert table.PJRT_Buffer_Destroy(new_args("PJRT_Buffer_Destroy", buffer=handle)) == ffi.NULL
    assert any("PJRT_Buffer_Destroy" in r.getMessage() for r in caplog.records)
