"""Layer 1 of the conformance suite (the C ABI), measured three ways.

- On pjrtkit's cpu backend every check passes except a written list of known UNSUPPORTED/SKIP.
- On XLA's own CPU PJRT plugin (``xla_cpu_pjrt``, PJRT 0.81) no check FAILs: the checks encode
  XLA's contract, not pjrtkit's quirks. Run in a subprocess so a crash is a test failure.
- The checks can fail: a copy of the cpu backend's PJRT_Api with a few slots replaced by faulty
  C callbacks makes exactly the checks of those faults FAIL; a copy that declares minor 0.81 and
  the 0.81 table size turns exactly the 0.90-only checks into SKIP.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import ErrorCode
from pjrtkit.conformance import abi_checks
from pjrtkit.conformance.abi_driver import AbiDriver
from pjrtkit.conformance.checks import REGISTRY, Outcome, run_check

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pjrtkit_cpu") is None,
                                reason="needs the pjrtkit-cpu plugin (pip install -e plugins/cpu)")

# What the cpu backend does not offer, and why.
CPU_NOT_PASSING = {
    "abi.buffer.unsafe_pointer_on_cpu": Outcome.SKIP,              # Buffer_IsOnCpu is false
}
# Functions XLA's 0.81 plugin predates (SKIP), and capabilities it answers UNIMPLEMENTED.
XLA_NOT_PASSING = {
    "abi.event.create_set_pending": Outcome.SKIP,
    "abi.buffer.error_buffer": Outcome.SKIP,
    "abi.executable.get_compile_options": Outcome.SKIP,
    "abi.device.memory_stats": Outcome.UNSUPPORTED,
    "abi.topology.create": Outcome.UNSUPPORTED,
    "abi.executable.output_memory_kinds": Outcome.UNSUPPORTED,
}
# Checks that need PJRT 0.90 functions and have no 0.81 fallback on the cpu backend.
ONLY_AT_0_90 = {"abi.event.create_set_pending", "abi.buffer.error_buffer",
                "abi.executable.get_compile_options", "abi.event.on_ready_error",
                "abi.event.await_and_error_report_failure"}


def abi_layer():
    return [c for c in REGISTRY.values() if c.layer == "abi"]


def run_all(driver: AbiDriver) -> dict[str, object]:
    try:
        return {c.id: run_check(c, driver) for c in abi_layer()}
    finally:
        driver.close()


@pytest.fixture(scope="module")
def cpu_api():
    """The cpu backend's PJRT_Api (one backend slot for the whole module)."""
    from pjrtkit.abi.api import api_for_slot, register_backend
    from pjrtkit.discovery import load_backend

    _capsule, slot = register_backend(load_backend("cpu"))
    return api_for_slot(slot)


def not_passing(results) -> dict[str, Outcome]:
    return {i: r.outcome for i, r in results.items() if r.outcome != Outcome.PASS}


def describe(results) -> str:
    return "\n".join(f"{i}: {r.outcome.value} {r.detail} (expected {r.expected!r}, "
                     f"actual {r.actual!r})" for i, r in results.items()
                     if r.outcome != Outcome.PASS)


# ---- the registry ----------------------------------------------------------------------------

def test_layer_one_has_enough_checks_each_described():
    checks = abi_layer()
    assert len(checks) >= 60
    for c in checks:
        assert c.id.startswith("abi."), c.id
        assert c.description and c.description != c.id, f"{c.id} has no docstring"
        assert c.mandatory == (c.capability is None), \
            f"{c.id}: optional checks name a capability, mandatory ones do not"


def test_every_function_jax_needs_is_exercised_by_a_mandatory_check():
    import inspect

    sources = "".join(inspect.getsource(c.function.__wrapped__) for c in abi_layer()
                      if c.mandatory)
    driver_source = inspect.getsource(sys.modules[AbiDriver.__module__])
    missing = [fn for fn in abi_checks.JAX_REQUIRED_FUNCTIONS
               if f'"{fn}"' not in sources and f'"{fn}"' not in driver_source]
    assert not missing


# ---- pjrtkit's cpu backend -------------------------------------------------------------------

def test_cpu_backend_passes_layer_one(cpu_api):
    results = run_all(AbiDriver(cpu_api, label="pjrtkit cpu"))
    assert not_passing(results) == CPU_NOT_PASSING, describe(results)
    assert sum(r.outcome == Outcome.PASS for r in results.values()) >= 60


# ---- XLA's own CPU plugin --------------------------------------------------------------------

def xla_plugin_library() -> pathlib.Path | None:
    spec = importlib.util.find_spec("xla_plugins")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = pathlib.Path(root) / "xla_cpu_pjrt" / "xla_cpu_pjrt.so"
        if path.exists():
            return path
    return None


XLA_RUN = textwrap.dedent("""
    import json, sys
    from pjrtkit.conformance import abi_checks  # noqa: F401 - registers the checks
    from pjrtkit.conformance.abi_driver import AbiDriver
    from pjrtkit.conformance.checks import REGISTRY, run_check
    driver = AbiDriver.from_library(sys.argv[1])
    results = [run_check(c, driver) for c in REGISTRY.values() if c.layer == "abi"]
    driver.close()
    print("RESULTS " + json.dumps([r.as_json() for r in results]))
""")


def test_xla_cpu_plugin_fails_no_check():
    library = xla_plugin_library()
    if library is None:
        pytest.skip("xla-cpu-pjrt is not installed (pip install xla-cpu-pjrt==0.0.1)")
    out = subprocess.run([sys.executable, "-c", XLA_RUN, str(library)], capture_output=True,
                         text=True, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULTS ")]
    assert out.returncode == 0 and lines, out.stderr[-4000:]
    results = json.loads(lines[-1].removeprefix("RESULTS "))
    failed = {r["id"]: (r["detail"], r["expected"], r["actual"]) for r in results
              if r["outcome"] == "FAIL"}
    assert not failed
    outcomes = {r["id"]: Outcome(r["outcome"]) for r in results if r["outcome"] != "PASS"}
    assert outcomes == XLA_NOT_PASSING
    assert sum(r["outcome"] == "PASS" for r in results) >= 100


# ---- the checks can fail ---------------------------------------------------------------------

def copy_table(api):
    table = ffi.new("PJRT_Api*")
    ffi.memmove(table, api, ffi.sizeof("PJRT_Api"))
    return table


def faulty(table, name: str, behaviour):
    """Replace slot ``name`` by a C callback ``behaviour(original, args)``."""
    original = getattr(table, name)
    callback = ffi.callback(f"PJRT_Error*({name}_Args*)",
                            lambda args: behaviour(original, args))
    setattr(table, name, callback)
    return callback


def error(code: ErrorCode, message: str):
    from pjrtkit.abi.errors import new_error

    return new_error(code, message)


def wrong_process_index(original, args):
    result = original(args)
    args.process_index = 3
    return result


def swapped_output_dimensions(original, args):
    result = original(args)
    sizes = ffi.cast("size_t*", args.dim_sizes)
    dims = ffi.new("int64_t[]", [3, 2])
    KEEP.append(dims)
    new_sizes = ffi.new("size_t[]", [2, sizes[1]])
    KEEP.append(new_sizes)
    args.dims = dims
    args.dim_sizes = new_sizes
    return result


def zero_device_size(original, args):
    result = original(args)
    args.on_device_size_in_bytes = 0
    return result


def event_error_always_ok(original, args):
    result = original(args)
    if result != ffi.NULL:
        from pjrtkit.abi.errors import ERRORS
        ERRORS.release(result)
    return ffi.NULL


def scribble_past_known_fields(original, args):
    result = original(args)
    known = ffi.sizeof("PJRT_Plugin_Attributes_Args")
    if args.struct_size > known:
        ffi.cast("unsigned char*", args)[known] = 0
    return result


def unimplemented_for_unknown_format(original, args):
    fmt = ffi.unpack(args.program.format, args.program.format_size)
    if fmt not in (b"mlir", b"hlo"):
        return error(ErrorCode.UNIMPLEMENTED, "format not handled")
    return original(args)


KEEP: list = []
FAULTS = {
    "PJRT_Client_ProcessIndex": (wrong_process_index, {"abi.client.process_index"}),
    "PJRT_Executable_OutputDimensions": (swapped_output_dimensions,
                                         {"abi.executable.output_dimensions"}),
    "PJRT_Buffer_OnDeviceSizeInBytes": (zero_device_size, {"abi.buffer.on_device_size"}),
    "PJRT_Event_Error": (event_error_always_ok, {"abi.event.await_and_error_report_failure"}),
    "PJRT_Plugin_Attributes": (scribble_past_known_fields,
                               {"abi.struct_size.larger_plugin_attributes"}),
    "PJRT_Client_Compile": (unimplemented_for_unknown_format, {"abi.compile.bad_program_format"}),
}


def test_faulty_slots_fail_exactly_their_checks(cpu_api):
    table = copy_table(cpu_api)
    callbacks = [faulty(table, name, behaviour) for name, (behaviour, _) in FAULTS.items()]
    results = run_all(AbiDriver(table, label="faulty copy", keepalive=callbacks))
    expected_fails = set().union(*(ids for _, ids in FAULTS.values()))
    fails = {i for i, r in results.items() if r.outcome == Outcome.FAIL}
    assert fails == expected_fails, describe(results)
    # a FAIL says what was expected and what came back
    dims = results["abi.executable.output_dimensions"]
    assert dims.expected == [[2, 3], []] and dims.actual == [[3, 2], []]


def test_mandatory_function_answering_unimplemented_fails(cpu_api):
    table = copy_table(cpu_api)
    callback = faulty(table, "PJRT_Executable_Name",
                      lambda original, args: error(ErrorCode.UNIMPLEMENTED, "no names here"))
    results = run_all(AbiDriver(table, label="no names", keepalive=[callback]))
    assert {i for i, r in results.items() if r.outcome == Outcome.FAIL} == {
        "abi.executable.name"}
    assert "UNIMPLEMENTED" in results["abi.executable.name"].detail


def test_optional_capability_answering_unimplemented_is_unsupported(cpu_api):
    table = copy_table(cpu_api)
    callback = faulty(table, "PJRT_Executable_GetCostAnalysis",
                      lambda original, args: error(ErrorCode.UNIMPLEMENTED, "no costs"))
    results = run_all(AbiDriver(table, label="no costs", keepalive=[callback]))
    assert not_passing(results) == {**CPU_NOT_PASSING,
                                    "abi.executable.cost_analysis": Outcome.UNSUPPORTED}
    assert results["abi.executable.cost_analysis"].capability == "cost_analysis"


def test_functions_beyond_the_declared_version_are_skipped(cpu_api):
    """A table declaring PJRT 0.81 (and 0.81's size) is never called beyond its end."""
    table = copy_table(cpu_api)
    table.pjrt_api_version.minor_version = 81
    table.struct_size = ffi.offsetof("PJRT_Api", "PJRT_Client_CreateErrorBuffer")
    # Poison every slot past the end: calling one would crash the test process.
    for name, field in ffi.typeof("PJRT_Api").fields:
        if field.offset >= table.struct_size:
            setattr(table, name, ffi.cast(field.type, 0x10))
    driver = AbiDriver(table, label="0.81 copy")
    assert driver.minor == 81
    assert driver.has("PJRT_LoadedExecutable_GetDeviceAssignment")
    assert not driver.has("PJRT_Client_CreateErrorBuffer") and not driver.has("PJRT_Event_Set")
    results = run_all(driver)
    skipped = {i for i, r in results.items() if r.outcome == Outcome.SKIP}
    assert skipped == ONLY_AT_0_90 | {"abi.buffer.unsafe_pointer_on_cpu"}, describe(results)
    assert not any(r.outcome == Outcome.FAIL for r in results.values()), describe(results)
