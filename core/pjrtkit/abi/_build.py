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
import sysconfig

import cffi

HERE = pathlib.Path(__file__).resolve().parent
DECLARATIONS = (HERE / "pjrt_declarations.h").read_text()
HANDLE_STRUCTS = (HERE / "pjrtkit_handles.h").read_text()
FAST_PATHS = (HERE / "pjrtkit_fast_paths.h").read_text()
FP_STATE = (HERE / "pjrtkit_fp_state.h").read_text()
# The C execute path: declarations (cdef and C) and code (C only); see pjrtkit_native.h.
NATIVE_DECLARATIONS = (HERE / "pjrtkit_native.h").read_text()
NATIVE_EXECUTE = (HERE / "pjrtkit_native_execute.h").read_text()
PROCESS_STATES = (HERE / "pjrtkit_process_states.h").read_text()
# NumPy's data allocator on the threads that run kernels (pjrtkit/runtime/array_pool.py).
ARRAY_POOL = (HERE / "pjrtkit_array_pool.h").read_text()

API_MAJOR = 0
API_MINOR = 90
# One PJRT_Api table per registered backend; the trampolines are generated per slot, so this is
# a hard limit (api.register_backend raises ResourceExhausted beyond it).
MAX_BACKENDS = 16

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


# PJRT functions answered in C from the facts in the handle struct (pjrtkit_handles.h), with no
# Python round trip: function -> (Args field holding the handle, handle struct, kind,
# ((Args output field, struct fact), ...)). Every fact listed must be known (integer >= 0,
# pointer non-NULL) and the caller's struct must hold every output field; otherwise the Python
# callback answers (and raises the proper error). jaxlib asks several of these on every call.
C_ANSWERS: dict[str, tuple[str, str, str, tuple[tuple[str, str], ...]]] = {
    "PJRT_Executable_NumReplicas": ("executable", "pjrtkit_executable", "EXECUTABLE",
                                    (("num_replicas", "num_replicas"),)),
    "PJRT_Executable_NumPartitions": ("executable", "pjrtkit_executable", "EXECUTABLE",
                                      (("num_partitions", "num_partitions"),)),
    "PJRT_Executable_NumOutputs": ("executable", "pjrtkit_executable", "EXECUTABLE",
                                   (("num_outputs", "num_outputs"),)),
    "PJRT_Buffer_Device": ("buffer", "pjrtkit_buffer", "BUFFER", (("device", "device"),)),
    "PJRT_Buffer_Memory": ("buffer", "pjrtkit_buffer", "BUFFER", (("memory", "memory"),)),
    "PJRT_Buffer_ElementType": ("buffer", "pjrtkit_buffer", "BUFFER",
                                (("type", "element_type"),)),
    "PJRT_Buffer_OnDeviceSizeInBytes": ("buffer", "pjrtkit_buffer", "BUFFER",
                                        (("on_device_size_in_bytes", "on_device_size_in_bytes"),)),
    "PJRT_Memory_Id": ("memory", "pjrtkit_memory", "MEMORY", (("id", "id"),)),
    "PJRT_Memory_Kind_Id": ("memory", "pjrtkit_memory", "MEMORY", (("kind_id", "kind_id"),)),
    "PJRT_Memory_Kind": ("memory", "pjrtkit_memory", "MEMORY",
                         (("kind", "kind"), ("kind_size", "kind_size"))),
    "PJRT_Device_GetDescription": ("device", "pjrtkit_device", "DEVICE",
                                   (("device_description", "description"),)),
    "PJRT_Device_DefaultMemory": ("device", "pjrtkit_device", "DEVICE",
                                  (("memory", "default_memory"),)),
    "PJRT_Device_IsAddressable": ("device", "pjrtkit_device", "DEVICE",
                                  (("is_addressable", "is_addressable"),)),
    "PJRT_Device_LocalHardwareId": ("device", "pjrtkit_device", "DEVICE",
                                    (("local_hardware_id", "local_hardware_id"),)),
    "PJRT_DeviceDescription_Id": ("device_description", "pjrtkit_description", "DESCRIPTION",
                                  (("id", "id"),)),
    "PJRT_DeviceDescription_ProcessIndex": ("device_description", "pjrtkit_description",
                                            "DESCRIPTION", (("process_index", "process_index"),)),
}

# Facts that are pointers (known when non-NULL); every other fact is an int64_t (known when >= 0).
_POINTER_FACTS = frozenset({"device", "memory", "kind", "description", "default_memory"})

# The PJRT_Event_* functions answered in C for pjrtkit_completed_event (work already done with
# no error); any other event goes to Python.
_EVENT_ANSWERS = {
    "PJRT_Event_IsReady": ("is_ready", "args->is_ready = true;"),
    "PJRT_Event_Error": ("event", ""),
    "PJRT_Event_Await": ("event", ""),
    "PJRT_Event_Destroy": ("event", ""),
    # The callback runs on the caller's thread, as for any event that is already complete; no
    # Python and no lock of ours is involved.
    "PJRT_Event_OnReady": ("user_arg", "if (args->callback == NULL) return 0;\n"
                                       "    args->callback(NULL, args->user_arg);"),
}

_C_ANSWER_PRELUDE = """
#define PJRTKIT_FIELD_END(T, f) (offsetof(T, f) + sizeof(((T*)0)->f))
pjrtkit_event pjrtkit_completed_event = { { PJRTKIT_KIND_EVENT, NULL }, 1 };
int pjrtkit_c_answers = 1;
"""


def _c_answer_source() -> str:
    """``static int pjrtkit_answer_<fn>(args)``: 1 when answered in C, 0 to ask Python."""
    out = [_C_ANSWER_PRELUDE]
    for fn, (field, struct, kind, outputs) in C_ANSWERS.items():
        t = f"{fn}_Args"
        sizes = " || ".join(f"args->struct_size < PJRTKIT_FIELD_END({t}, {o})" for o, _ in outputs)
        known = " || ".join(f"h->{f} == NULL" if f in _POINTER_FACTS else f"h->{f} < 0"
                            for _, f in outputs)
        sets = " ".join(f"args->{o} = h->{f};" for o, f in outputs)
        out.append(
            f"static int pjrtkit_answer_{fn}({t}* args) {{\n"
            f"    if (!pjrtkit_c_answers || args == NULL || {sizes}) return 0;\n"
            f"    const {struct}* h = (const {struct}*)args->{field};\n"
            f"    if (h == NULL || h->head.kind != PJRTKIT_KIND_{kind} || {known}) return 0;\n"
            f"    {sets}\n    return 1;\n}}")
    for fn, (last_field, body) in _EVENT_ANSWERS.items():
        t = f"{fn}_Args"
        out.append(
            f"static int pjrtkit_answer_{fn}({t}* args) {{\n"
            f"    if (!pjrtkit_c_answers || args == NULL || "
            f"args->struct_size < PJRTKIT_FIELD_END({t}, {last_field})) return 0;\n"
            f"    if ((const pjrtkit_event*)args->event != &pjrtkit_completed_event) return 0;\n"
            f"    {body}\n    return 1;\n}}")
    return "\n".join(out) + "\n"


# Answered (when possible) by hand-written C in pjrtkit_fast_paths.h and
# pjrtkit_native_execute.h.
_FAST_PATH_ANSWERS = frozenset({"PJRT_Buffer_Destroy", "PJRT_Buffer_IsDeleted",
                                "PJRT_Buffer_ReadyEvent", "PJRT_Error_Destroy",
                                "PJRT_Buffer_Dimensions", "PJRT_Buffer_UnpaddedDimensions",
                                "PJRT_Buffer_DynamicDimensionIndices", "PJRT_Buffer_IsOnCpu",
                                "PJRT_Buffer_ToHostBuffer",
                                "PJRT_Client_BufferFromHostBuffer",
                                "PJRT_Client_UpdateGlobalProcessInfo"})
# Entry points written by hand in pjrtkit_fast_paths.h instead of generated.
_HAND_WRITTEN_ENTRY_POINTS = frozenset({"PJRT_LoadedExecutable_Execute"})


def _answered_in_c() -> frozenset[str]:
    return frozenset(C_ANSWERS) | frozenset(_EVENT_ANSWERS) | _FAST_PATH_ANSWERS


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
    # The PJRT_CallbackError a plugin hands the host's key-value callbacks (abi/kv_store.py).
    lines.append(f"{storage}PJRT_Error* pjrtkit_kv_callback_error(PJRT_Error_Code, const char*, "
                 f"size_t);")
    # The fast paths' own callbacks (pjrtkit_fast_paths.h).
    lines.append(f"{storage}void pjrtkit_drain_destroyed(PJRT_Buffer**, size_t);")
    lines.append(f"{storage}PJRT_Error* pjrtkit_execute_inline(void*, void**, size_t, "
                 f"PJRT_Buffer**, PJRT_Event**, PJRT_Buffer**, size_t, int*);")
    lines.append(f"{storage}int pjrtkit_prepare_native(void*, PJRT_Buffer* const*, size_t);")
    lines.append(f"{storage}int pjrtkit_adopt_buffers(PJRT_Buffer* const*, size_t);")
    return "\n".join(lines)


# jaxlib may call into the plugin while a Python exception is pending on the calling thread
# (a C++ destructor running Buffer_Destroy while an error propagates). A Python callback entered
# in that state fails with SystemError and the pending exception is lost, so every entry point
# parks the error indicator around the callback and puts it back afterwards.
# Every entry also finishes the buffer destroys queued in C meanwhile (pjrtkit_fast_paths.h).
# Once the interpreter is finalizing (after atexit, while it clears module globals) Python code
# of pjrtkit can no longer run: its modules' globals are None, and a callback entered then fails
# (the "Exception ignored from cffi callback ... drain_destroyed" line at exit, when jaxlib
# frees arrays held by a module torn down after pjrtkit's). So destroys and deleters then return
# without entering Python (the process is ending; the OS takes the memory back), and no entry
# finishes the queued destroys.
# Every entry into Python: C's default floating-point state for the call (pjrtkit_fp_state.h),
# the GIL, the caller's pending Python exception kept aside, queued destroys finished.
_GUARD_ENTER = ("pjrtkit_fp_scope fp; pjrtkit_fp_enter(&fp); "
                "PyGILState_STATE gil = PyGILState_Ensure(); PyObject *et, *ev, *etb; "
                "PyErr_Fetch(&et, &ev, &etb); "
                "if (!PJRTKIT_PY_FINALIZING()) pjrtkit_drain_if_needed();")
_GUARD_LEAVE = "PyErr_Restore(et, ev, etb); PyGILState_Release(gil); pjrtkit_fp_leave(&fp);"
# Declared here because cffi compiles against the limited API, which has neither; both are
# exported by every CPython (Py_IsFinalizing public from 3.13, _Py_IsFinalizing before) and
# read an atomic flag, so they need no GIL.
_FINALIZING_MACRO = """
#if PY_VERSION_HEX >= 0x030D0000
extern int Py_IsFinalizing(void);
#define PJRTKIT_PY_FINALIZING() Py_IsFinalizing()
#else
extern int _Py_IsFinalizing(void);
#define PJRTKIT_PY_FINALIZING() _Py_IsFinalizing()
#endif
"""


def skipped_when_finalizing(fn: str) -> bool:
    """Functions that do nothing once the interpreter is finalizing: releasing things."""
    return fn.endswith("_Destroy")


def _skip_if_finalizing(fn: str, ret: str) -> str:
    if not skipped_when_finalizing(fn):
        return ""
    return "if (PJRTKIT_PY_FINALIZING()) return" + (";" if ret == "void" else " NULL;") + " "


def _guarded_entry_points() -> str:
    rets = return_types()
    lines = []
    for fn in api_slots():
        if fn in SLOT_ROUTED or fn in _HAND_WRITTEN_ENTRY_POINTS:
            continue
        ret = rets[fn]
        skip = _skip_if_finalizing(fn, ret)
        if fn in _answered_in_c():
            # Answered before the GIL is taken; only the fallback enters Python.
            if ret == "void":
                lines.append(f"static void pjrtkit_guarded_{fn}({fn}_Args* args) {{ "
                             f"if (pjrtkit_answer_{fn}(args)) return; {skip}{_GUARD_ENTER} "
                             f"pjrtkit_{fn}(args); {_GUARD_LEAVE} }}")
                continue
            lines.append(f"static {ret} pjrtkit_guarded_{fn}({fn}_Args* args) {{ "
                         f"if (pjrtkit_answer_{fn}(args)) return NULL; {skip}{_GUARD_ENTER} "
                         f"{ret} result = pjrtkit_{fn}(args); {_GUARD_LEAVE} return result; }}")
        elif ret == "void":
            lines.append(f"static void pjrtkit_guarded_{fn}({fn}_Args* args) {{ {skip}"
                         f"{_GUARD_ENTER} pjrtkit_{fn}(args); {_GUARD_LEAVE} }}")
        else:
            lines.append(f"static {ret} pjrtkit_guarded_{fn}({fn}_Args* args) {{ {skip}"
                         f"{_GUARD_ENTER} {ret} result = pjrtkit_{fn}(args); {_GUARD_LEAVE} "
                         f"return result; }}")
    skip = "if (PJRTKIT_PY_FINALIZING()) return; "
    for t in SERIALIZED_TYPES:
        lines.append(f"void pjrtkit_guarded_free_{t}({t}* blob) {{ {skip}{_GUARD_ENTER} "
                     f"pjrtkit_free_{t}(blob); {_GUARD_LEAVE} }}")
    lines.append(f"void pjrtkit_guarded_chunk_deleter(void* data, void* arg) {{ {skip}"
                 f"{_GUARD_ENTER} pjrtkit_chunk_deleter(data, arg); {_GUARD_LEAVE} }}")
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
    + HANDLE_STRUCTS
    + NATIVE_DECLARATIONS
    + '\nextern "Python" {\n'
    + _callback_prototypes(static=False)
    + "\n}\n"
    + "void pjrtkit_fill_api(PJRT_Api* api, int slot);\n"
    + "int pjrtkit_process_state(int task, int* state, int* error_code);\n"
    + "void* pjrtkit_array_pool_handler(void);\n"
    + "void pjrtkit_array_pool_set_limit(int64_t limit_bytes);\n"
    + "void pjrtkit_array_pool_release(void);\n"
    + "void pjrtkit_array_pool_read(int64_t* counts);\n"
    + _guarded_deleter_prototypes()
    + f"#define PJRTKIT_MAX_BACKENDS {MAX_BACKENDS}\n"
    + f"#define PJRTKIT_API_MINOR {API_MINOR}\n"
)

SOURCE = (
    "#include <pthread.h>\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n"
    "#include <stdlib.h>\n#include <string.h>\n"
    + DECLARATIONS
    + HANDLE_STRUCTS
    + NATIVE_DECLARATIONS
    + f"\n#define PJRTKIT_MAX_BACKENDS {MAX_BACKENDS}\n#define PJRTKIT_API_MINOR {API_MINOR}\n"
    + _FINALIZING_MACRO
    + FP_STATE
    # cffi defines extern "Python" functions after this prefix; C code here needs them declared.
    + _callback_prototypes(static=True)
    + _c_answer_source()
    + NATIVE_EXECUTE
    + FAST_PATHS
    + PROCESS_STATES
    + ARRAY_POOL
    + _fill_api_source()
)

ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
# Tagged per Python version (not one limited-API .abi3.so): the virtual environments of the
# pinned JAX sets (make JAX=...) share this source tree, and installing one must not overwrite
# the module a process of another has loaded.
ffibuilder.set_source("pjrtkit.abi._pjrt_cffi", SOURCE, py_limited_api=False)

if __name__ == "__main__":
    # Same file name as `pip install -e .` produces; a differently tagged .so next to it would
    # shadow it at import.
    ffibuilder.compile(tmpdir=str(HERE.parent.parent),
                       target="_pjrt_cffi" + sysconfig.get_config_var("EXT_SUFFIX"), verbose=True)
