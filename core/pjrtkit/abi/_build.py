"""cffi build script for ``pjrtkit.abi._pjrt_cffi`` (out-of-line API mode).

Wired through ``setup.py`` (``cffi_modules``). To rebuild in place without pip::

    .venv/bin/python core/pjrtkit/abi/_build.py

Every PJRT function becomes an ``extern "Python"`` callback ``pjrtkit_<FunctionName>``. The few
functions that receive no handle cannot tell which backend's table they were called through, so
C trampolines, one per backend slot, pass the slot number along. ``pjrtkit_fill_api`` assigns
every slot in C, so the compiler type-checks each callback against its function type.
"""
from __future__ import annotations

import pathlib
import re

import cffi

HERE = pathlib.Path(__file__).resolve().parent
DECLARATIONS = (HERE / "pjrt_declarations.h").read_text()

API_MAJOR = 0
API_MINOR = 90
# One PJRT_Api table per registered backend; the trampolines are generated per slot, so this is
# a hard limit (api.register_backend raises ResourceExhausted beyond it).
MAX_BACKENDS = 8

# Functions whose Args carry no handle from which the backend could be recovered.
SLOT_ROUTED = (
    "PJRT_Plugin_Initialize",
    "PJRT_Plugin_Attributes",
    "PJRT_Client_Create",
    "PJRT_TopologyDescription_Create",
    "PJRT_TopologyDescription_Deserialize",
    "PJRT_ExecuteContext_Create",
    "PJRT_Event_Create",
)

# Opaque types that C hands back to a deleter we provide alongside serialized bytes.
SERIALIZED_TYPES = (
    "PJRT_DeviceAssignmentSerialized",
    "PJRT_SerializedExecutable",
    "PJRT_SerializedCompileOptions",
    "PJRT_SerializedTopology",
)


def api_slots(declarations: str = DECLARATIONS) -> list[str]:
    """Function slot names of PJRT_Api, in ABI order."""
    body = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", declarations, re.S).group(1)
    return re.findall(r"^\s*(PJRT_\w+)\* PJRT_\w+;", body, re.M)


def return_types(declarations: str = DECLARATIONS) -> dict[str, str]:
    return dict(
        (name, ret)
        for ret, name in re.findall(r"typedef (void|PJRT_Error\*) (PJRT_\w+)\(", declarations)
    )


def _callback_prototypes(static: bool) -> str:
    rets = return_types()
    storage = "static " if static else ""
    lines = []
    for fn in api_slots():
        params = f"int, {fn}_Args*" if fn in SLOT_ROUTED else f"{fn}_Args*"
        lines.append(f"{storage}{rets[fn]} pjrtkit_{fn}({params});")
    for t in SERIALIZED_TYPES:
        lines.append(f"{storage}void pjrtkit_free_{t}({t}*);")
    lines.append(f"{storage}void pjrtkit_chunk_deleter(void*, void*);")
    return "\n".join(lines)


# jaxlib may call into the plugin while a Python exception is pending on the calling thread
# (a C++ destructor running Buffer_Destroy while an error propagates). A Python callback entered
# in that state fails with SystemError and the pending exception is lost, so every entry point
# parks the error indicator around the callback and puts it back afterwards.
_GUARD_ENTER = ("PyGILState_STATE gil = PyGILState_Ensure(); PyObject *et, *ev, *etb; "
                "PyErr_Fetch(&et, &ev, &etb);")
_GUARD_LEAVE = "PyErr_Restore(et, ev, etb); PyGILState_Release(gil);"


def _guarded_entry_points() -> str:
    rets = return_types()
    lines = []
    for fn in api_slots():
        if fn in SLOT_ROUTED:
            continue
        ret = rets[fn]
        if ret == "void":
            lines.append(f"static void pjrtkit_guarded_{fn}({fn}_Args* args) {{ {_GUARD_ENTER} "
                         f"pjrtkit_{fn}(args); {_GUARD_LEAVE} }}")
        else:
            lines.append(f"static {ret} pjrtkit_guarded_{fn}({fn}_Args* args) {{ {_GUARD_ENTER} "
                         f"{ret} result = pjrtkit_{fn}(args); {_GUARD_LEAVE} return result; }}")
    for t in SERIALIZED_TYPES:
        lines.append(f"void pjrtkit_guarded_free_{t}({t}* blob) {{ {_GUARD_ENTER} "
                     f"pjrtkit_free_{t}(blob); {_GUARD_LEAVE} }}")
    lines.append(f"void pjrtkit_guarded_chunk_deleter(void* data, void* arg) {{ {_GUARD_ENTER} "
                 f"pjrtkit_chunk_deleter(data, arg); {_GUARD_LEAVE} }}")
    return "\n".join(lines) + "\n"


def _guarded_deleter_prototypes() -> str:
    lines = [f"void pjrtkit_guarded_free_{t}({t}*);" for t in SERIALIZED_TYPES]
    lines.append("void pjrtkit_guarded_chunk_deleter(void*, void*);")
    return "\n".join(lines) + "\n"


def _fill_api_source() -> str:
    assignments = []
    for fn in api_slots():
        if fn in SLOT_ROUTED:
            assignments.append(f"    api->{fn} = pjrtkit_by_slot_{fn}[slot];")
        else:
            assignments.append(f"    api->{fn} = pjrtkit_guarded_{fn};")
    slot_calls = ", ".join(f"pjrtkit_tramp_##FN##_{i}" for i in range(MAX_BACKENDS))
    trampolines = " \\\n".join(
        f"    static PJRT_Error* pjrtkit_tramp_##FN##_{i}(FN##_Args* args) "
        f"{{ {_GUARD_ENTER} PJRT_Error* result = pjrtkit_##FN({i}, args); {_GUARD_LEAVE} "
        f"return result; }}"
        for i in range(MAX_BACKENDS)
    )
    return _guarded_entry_points() + f"""
#define PJRTKIT_SLOT_TRAMPOLINES(FN) \\
{trampolines} \\
    static FN* const pjrtkit_by_slot_##FN[{MAX_BACKENDS}] = {{ {slot_calls} }};
{chr(10).join(f"PJRTKIT_SLOT_TRAMPOLINES({fn})" for fn in SLOT_ROUTED)}

void pjrtkit_fill_api(PJRT_Api* api, int slot) {{
    memset(api, 0, sizeof(*api));
    if (slot < 0 || slot >= {MAX_BACKENDS}) return;
    api->struct_size = sizeof(PJRT_Api);
    api->extension_start = NULL;
    api->pjrt_api_version.struct_size = sizeof(PJRT_Api_Version);
    api->pjrt_api_version.extension_start = NULL;
    api->pjrt_api_version.major_version = {API_MAJOR};
    api->pjrt_api_version.minor_version = {API_MINOR};
{chr(10).join(assignments)}
}}
"""


CDEF = (
    DECLARATIONS
    + '\nextern "Python" {\n'
    + _callback_prototypes(static=False)
    + "\n}\n"
    + "void pjrtkit_fill_api(PJRT_Api* api, int slot);\n"
    + _guarded_deleter_prototypes()
    + f"#define PJRTKIT_MAX_BACKENDS {MAX_BACKENDS}\n"
    + f"#define PJRTKIT_API_MINOR {API_MINOR}\n"
)

SOURCE = (
    "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n"
    + DECLARATIONS
    + f"\n#define PJRTKIT_MAX_BACKENDS {MAX_BACKENDS}\n#define PJRTKIT_API_MINOR {API_MINOR}\n"
    # cffi defines extern "Python" functions after this prefix; C code here needs them declared.
    + _callback_prototypes(static=True)
    + _fill_api_source()
)

ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source("pjrtkit.abi._pjrt_cffi", SOURCE)

if __name__ == "__main__":
    # Same file name as `pip install -e .` produces (cffi builds a limited-API module there);
    # a differently tagged .so next to it would shadow it at import.
    ffibuilder.compile(tmpdir=str(HERE.parent.parent), target="_pjrt_cffi.abi3.so", verbose=True)
