"""Layer 2, capabilities: what ``pjrtkit_capabilities`` declares is well formed and true.

The suite reads a backend's declared dtypes to tell UNSUPPORTED from FAIL, so a declaration
must hold: a declared dtype compiles, a declared custom-call target compiles, a declared
feature works. Undeclared things are never held against a backend here.
"""
from __future__ import annotations

import re

import numpy as np

from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.conformance.checks import Failed, Skipped, check, expect
from pjrtkit.conformance.hooks_support import (LAYER, client_topology, compile_text,
                                                       first_device)
from pjrtkit.types import (COLLECTIVE_ENGINES, FEATURES, Capabilities,
                           MultiProcessSupport, Topology)

# NumPy dtype name -> MLIR element type, for the dtypes a program can be written for here.
MLIR_TYPES = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
              "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
              "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
              "complex64": "complex<f32>", "complex128": "complex<f64>"}


def _capabilities(backend) -> Capabilities:
    answer = backend.capabilities()
    expect(isinstance(answer, Capabilities), "pjrtkit_capabilities returns Capabilities",
           expected="Capabilities", actual=type(answer).__name__)
    return answer


def _known_dtype(name: str) -> bool:
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


@check("hooks.capabilities.record", layer=LAYER)
def capabilities_record(backend):
    """pjrtkit_capabilities declares NumPy dtype names, dialect-qualified op names, string
    custom-call targets and known feature names, the same on every call"""
    caps = _capabilities(backend)
    for name in caps.dtypes or ():
        expect(isinstance(name, str) and _known_dtype(name), "declared dtypes are NumPy dtype "
               "names", expected="e.g. 'float32'", actual=repr(name))
    for name in caps.ops or ():
        expect(isinstance(name, str) and re.fullmatch(r"[a-z_]+\.[a-z_0-9.]+", name) is not None,
               "declared ops are dialect-qualified op names", expected="e.g. 'stablehlo.add'",
               actual=repr(name))
    for name in caps.custom_call_targets or ():
        expect(isinstance(name, str) and name, "custom-call targets are non-empty strings",
               expected="non-empty str", actual=repr(name))
    unknown = sorted(set(caps.features) - FEATURES)
    expect(not unknown, "declared features are among pjrtkit.types.FEATURES",
           expected=sorted(FEATURES), actual=unknown)
    again = _capabilities(backend)
    expect(again == caps, "pjrtkit_capabilities answers the same on every call", expected=caps,
           actual=again)
    declared = [f"{len(v)} {k}" for k, v in (("dtypes", caps.dtypes), ("ops", caps.ops),
                ("custom-call targets", caps.custom_call_targets)) if v is not None]
    return ", ".join(declared) or "declares nothing"


def _program(mlir_type: str, op: str) -> str:
    t = f"tensor<2x{mlir_type}>"
    return (f"func.func public @main(%a: {t}) -> {t} {{\n"
            f"  %0 = {op} %a, %a : {t}\n  return %0 : {t}\n}}\n")


@check("hooks.capabilities.declared_dtypes_compile", layer=LAYER)
def capabilities_declared_dtypes_compile(backend):
    """every declared dtype compiles (an add, or an and for bool, when that op is declared or
    ops are not declared): a declared dtype answered UNIMPLEMENTED is a false declaration"""
    caps = _capabilities(backend)
    if caps.dtypes is None:
        raise Skipped("the backend declares no dtypes")
    device = first_device(backend)
    tried = []
    for name in sorted(caps.dtypes):
        op = "stablehlo.and" if name == "bool" else "stablehlo.add"
        if name not in MLIR_TYPES or (caps.ops is not None and op not in caps.ops):
            continue
        try:
            compile_text(backend, _program(MLIR_TYPES[name], op), device)
        except PjrtError as exc:
            raise Failed(f"{op} on declared dtype {name} compiles", expected="an executable",
                         actual=f"{exc.code.name}: {exc}"[:300]) from exc
        tried.append(name)
    if not tried:
        raise Skipped("no declared dtype can be written as an add/and program here")
    return ", ".join(tried)


@check("hooks.capabilities.custom_call_targets", layer=LAYER)
def capabilities_custom_call_targets(backend):
    """every declared custom-call target compiles as a call taking and returning one f32[2,3],
    or refuses that signature as INVALID_ARGUMENT (never UNIMPLEMENTED or INTERNAL)"""
    caps = _capabilities(backend)
    if not caps.custom_call_targets:
        raise Skipped("the backend declares no custom-call targets")
    device = first_device(backend)
    for target in sorted(caps.custom_call_targets):
        text = ("func.func public @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
                f"  %0 = stablehlo.custom_call @{target}(%a) : (tensor<2x3xf32>) -> "
                "tensor<2x3xf32>\n  return %0 : tensor<2x3xf32>\n}\n")
        try:
            compile_text(backend, text, device)
        except PjrtError as exc:
            # A target with another signature may refuse this call as INVALID_ARGUMENT: it
            # knows the target. UNIMPLEMENTED (no kernel) or INTERNAL (a bug) is a false claim.
            if exc.code == ErrorCode.INVALID_ARGUMENT:
                continue
            raise Failed(f"a custom_call to declared target {target!r} compiles, or refuses a "
                         f"signature it does not take as INVALID_ARGUMENT",
                         expected="an executable", actual=f"{exc.code.name}: {exc}"[:300]
                         ) from exc
    return ", ".join(sorted(caps.custom_call_targets))


@check("hooks.capabilities.features", layer=LAYER)
def capabilities_features(backend):
    """declared features hold: compile_only_topologies answers pjrtkit_make_topology(''); a
    client with several devices declares multiple_devices"""
    caps = _capabilities(backend)
    if "compile_only_topologies" in caps.features:
        try:
            topology = backend.make_topology(name="", options={})
        except PjrtError as exc:
            expect(False, "a backend declaring compile_only_topologies answers "
                   "pjrtkit_make_topology('')", expected="a Topology",
                   actual=f"{ErrorCode(exc.code).name}: {exc}"[:300])
        else:
            expect(bool(topology.devices), "the default compile-only topology has devices",
                   expected=">= 1 device", actual=0)
    devices = len(client_topology(backend).devices)
    if devices > 1:
        expect("multiple_devices" in caps.features, "a client with several devices declares "
               "the multiple_devices feature", expected="multiple_devices",
               actual=sorted(caps.features))
    return ", ".join(sorted(caps.features)) or "no features declared"


@check("hooks.multi_process.declaration", layer=LAYER)
def multi_process_declaration(backend):
    """pjrtkit_multi_process answers None (one process) or MultiProcessSupport with known
    engines; a per-process backend's client topology for process 1 of 2 keeps process_index 0
    (the core numbers the job's devices)"""
    support = backend.multi_process()
    if support is None:
        return  # a single-process backend: the core refuses jobs for it
    expect(isinstance(support, MultiProcessSupport), "pjrtkit_multi_process returns "
           "MultiProcessSupport or None", expected="MultiProcessSupport",
           actual=type(support).__name__)
    unknown = sorted(set(support.engines) - set(COLLECTIVE_ENGINES))
    expect(not unknown, "its engines are among pjrtkit.types.COLLECTIVE_ENGINES",
           expected=COLLECTIVE_ENGINES, actual=unknown)
    if support.global_topology:
        return  # the job's size is the backend's own (a slice's hosts): nothing general to ask
    topology = backend.client_topology(options={"node_id": 1, "num_nodes": 2})
    expect(isinstance(topology, Topology) and len(topology.devices) > 0,
           "pjrtkit_client_topology answers for a process of a job", expected="Topology",
           actual=type(topology).__name__)
    indices = sorted({d.process_index for d in topology.devices})
    expect(indices == [0], "a per-process topology's devices have process_index 0",
           expected=[0], actual=indices)
