"""The PJRT_Api tables: every slot filled, versions, capsules, per-backend slots."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

from abi_support import FAKE, OTHER, new_args, ok

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.api import register_backend
from pjrtkit.abi.errors import REGISTERED
from pjrtkit.abi.fn_unimplemented import SLOTS


def test_every_slot_is_filled(table):
    slots = [name for name, field in ffi.typeof("PJRT_Api").fields if field.type.kind == "function"]
    assert len(slots) == 128
    empty = [name for name in slots if getattr(table, name) == ffi.NULL]
    assert not empty, f"NULL slots: {empty}"


def test_every_slot_has_a_python_implementation(table):
    # An extern "Python" without def_extern would return NULL (success) to C.
    assert set(SLOTS) <= set(REGISTERED)


def test_version_and_sizes(table):
    assert table.struct_size == ffi.sizeof("PJRT_Api") == 1064
    assert table.extension_start == ffi.NULL
    version = table.pjrt_api_version
    assert (version.struct_size, version.major_version, version.minor_version) == (
        ffi.sizeof("PJRT_Api_Version"), 0, 90)
    assert version.extension_start == ffi.NULL


def test_capsule_points_at_the_table(table):
    capsule, slot = register_backend(FAKE)  # same backend object: same table
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
    assert get_pointer(capsule, b"pjrt_c_api") == int(ffi.cast("uintptr_t", table))


def test_handle_less_functions_reach_their_own_backend(table, other_table):
    assert table.PJRT_Plugin_Attributes != other_table.PJRT_Plugin_Attributes
    for api, backend in ((table, FAKE), (other_table, OTHER)):
        args = new_args("PJRT_Plugin_Attributes")
        ok(api, api.PJRT_Plugin_Attributes(args))
        names = {ffi.unpack(args.attributes[i].name, args.attributes[i].name_size).decode()
                 for i in range(args.num_attributes)}
        assert names == set(backend.attributes)


def named_value(nv):
    """The Python value of one PJRT_NamedValue."""
    if nv.type == lib.PJRT_NamedValue_kInt64:
        return nv.int64_value
    if nv.type == lib.PJRT_NamedValue_kFloat:
        return nv.float_value
    if nv.type == lib.PJRT_NamedValue_kBool:
        return nv.bool_value
    if nv.type == lib.PJRT_NamedValue_kString:
        return ffi.unpack(nv.string_value, nv.value_size).decode()
    assert nv.type == lib.PJRT_NamedValue_kInt64List, nv.type
    return ffi.unpack(nv.int64_array_value, nv.value_size)


def test_plugin_attributes_values(table):
    args = new_args("PJRT_Plugin_Attributes")
    ok(table, table.PJRT_Plugin_Initialize(new_args("PJRT_Plugin_Initialize")))
    ok(table, table.PJRT_Plugin_Attributes(args))
    values = {}
    for i in range(args.num_attributes):
        nv = args.attributes[i]
        name = ffi.unpack(nv.name, nv.name_size).decode()
        values[name] = named_value(nv)
    assert values == FAKE.attributes


def test_more_backends_than_slots_is_resource_exhausted():
    # Slots are per process, so this runs in a fresh interpreter.
    code = textwrap.dedent("""
        from pjrtkit.abi.api import register_backend, MAX_BACKENDS
        from pjrtkit.errors import ResourceExhausted
        class B:
            def __init__(self, i): self.name = f"b{i}"
        slots = [register_backend(B(i))[1] for i in range(MAX_BACKENDS)]
        assert slots == list(range(MAX_BACKENDS)), slots
        try:
            register_backend(B(99))
        except ResourceExhausted as exc:
            assert "b99" in str(exc) and f"at most {MAX_BACKENDS}" in str(exc), exc
            print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "OK", out.stderr


def test_compiled_module_matches_the_header():
    # A stale build (header edited, module not rebuilt) would pass the layout test yet differ here.
    import pathlib
    import re

    header = (pathlib.Path(__file__).resolve().parents[2] / "core" / "pjrtkit" / "abi"
              / "pjrt_declarations.h").read_text()
    body = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", header, re.S).group(1)
    assert list(SLOTS) == re.findall(r"^\s*PJRT_\w+\* (PJRT_\w+);", body, re.M), (
        "rebuild the C module: pip install -e . --no-deps --no-build-isolation")
