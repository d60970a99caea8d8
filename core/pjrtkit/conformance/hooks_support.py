"""What the layer-2 checks share: calling the hooks as the core does and holding the answers
to the contract (topology, transfers, compile, execute through the returned executable).

Its own module so that every ``hooks_checks*`` module imports it and none imports another.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrtkit.errors import ErrorCode, PjrtError
from pjrtkit.conformance.checks import Failed, Unsupported, expect
from pjrtkit.types import CompiledProgram, CompileOptions, DeviceSpec, Topology

LAYER = "hooks"

# The dtypes a PJRT plugin is commonly asked to store; a backend that declares fewer reports
# UNSUPPORTED (if it answers UNIMPLEMENTED) for the rest.
STANDARD_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(d) for d in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128))
DTYPE_NAMES = frozenset(d.name for d in STANDARD_DTYPES) | {"float8_e4m3fn", "float8_e5m2"}

# ---- helpers ----------------------------------------------------------------------------------

def declared_dtypes(backend) -> frozenset[np.dtype] | None:
    """The dtypes the backend declares through ``pjrtkit_capabilities``, or None when it
    declares none (a name NumPy does not know is reported by ``hooks.capabilities.record``)."""
    names = backend.capabilities().dtypes
    if names is None:
        return None
    return frozenset(np.dtype(name) for name in names if name in DTYPE_NAMES)


def client_topology(backend) -> Topology:
    topology = backend.client_topology(options={})
    expect(isinstance(topology, Topology), "pjrtkit_client_topology returns a Topology",
           expected="Topology", actual=type(topology).__name__)
    expect(len(topology.devices) > 0, "the client topology has at least one device",
           expected=">= 1 device", actual=0)
    return topology


def first_device(backend) -> DeviceSpec:
    return client_topology(backend).devices[0]


def sample(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values covering the dtype's range, including special float bit patterns."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, info.max, size=count, dtype=dtype, endpoint=True)
        if count >= 2:
            flat[:2] = (info.min, info.max)
        return flat.reshape(shape)
    if dtype.kind == "c":
        part = np.dtype(f"f{dtype.itemsize // 2}")
        return (sample(part, shape, seed) + 1j * sample(part, shape, seed + 1)).astype(dtype)
    # Random bit patterns: NaNs with payloads, infinities, subnormals, negative zero.
    bits = np.dtype(f"u{dtype.itemsize}")
    flat = rng.integers(0, np.iinfo(bits).max, size=count, dtype=bits, endpoint=True).view(dtype)
    return flat.reshape(shape)


def bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def as_host(backend, payload, device, kind) -> np.ndarray:
    host = backend.transfer_to_host(payload=payload, device=device, memory_kind=kind)
    expect(isinstance(host, np.ndarray), "pjrtkit_transfer_to_host returns a NumPy array",
           expected="numpy.ndarray", actual=type(host).__name__)
    return host


def round_trip(backend, array: np.ndarray, device: DeviceSpec, kind: str) -> np.ndarray:
    original = array.copy()
    payload = backend.transfer_to_device(array=array, device=device, memory_kind=kind)
    host = as_host(backend, payload, device, kind)
    expect(host.dtype == original.dtype and host.shape == original.shape,
           f"a {original.dtype}{list(original.shape)} array stored in '{kind}' reads back with "
           f"the same dtype and shape",
           expected=f"{original.dtype}{list(original.shape)}",
           actual=f"{host.dtype}{list(host.shape)}")
    if bits(host) != bits(original):
        diff = np.flatnonzero(np.frombuffer(bits(host), np.uint8)
                              != np.frombuffer(bits(original), np.uint8))
        raise Failed(f"a {original.dtype}{list(original.shape)} array stored in '{kind}' reads "
                     f"back bit-exactly", expected=original.ravel()[:8].tolist(),
                     actual=f"{host.ravel()[:8].tolist()} (first differing byte {diff[0]})")
    return host


def compile_options(device: DeviceSpec) -> CompileOptions:
    return CompileOptions(num_replicas=1, num_partitions=1, device_assignment=((device.id,),),
                          use_spmd_partitioning=False)


def compile_text(backend, text: str, device: DeviceSpec) -> CompiledProgram:
    from pjrtkit.stablehlo.loader import load_program

    compiled = backend.compile(program=load_program(text), options=compile_options(device),
                               devices=(device,))
    expect(isinstance(compiled, CompiledProgram), "pjrtkit_compile returns a CompiledProgram",
           expected="CompiledProgram", actual=type(compiled).__name__)
    return compiled


def execute(backend, compiled: CompiledProgram, device: DeviceSpec, arrays, n_outputs: int,
             kind: str | None = None) -> list[np.ndarray]:
    """Store ``arrays`` on ``device``, execute, check the output structure, read outputs back."""
    kind = kind or device.default_memory_kind
    # np.array keeps 0-d inputs 0-d (np.ascontiguousarray would make them 1-d).
    payloads = [backend.transfer_to_device(array=np.array(a, order="C", copy=True),
                                           device=device, memory_kind=kind) for a in arrays]
    outputs = list(compiled.executable.execute([payloads], (device,)))
    expect(len(outputs) == 1, "executable.execute returns one output list per device",
           expected=1, actual=len(outputs))
    expect(len(outputs[0]) == n_outputs, "executable.execute returns one payload per output",
           expected=n_outputs, actual=len(outputs[0]))
    return [as_host(backend, p, device, kind) for p in outputs[0]]


def expect_result(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    expected = np.asarray(expected)
    expect(actual.dtype == expected.dtype and actual.shape == expected.shape,
           f"{what}: output has the declared dtype and shape",
           expected=f"{expected.dtype}{list(expected.shape)}",
           actual=f"{actual.dtype}{list(actual.shape)}")
    if expected.dtype.kind == "f":
        ok = np.allclose(actual, expected, rtol=1e-6, atol=0, equal_nan=True)
    else:
        ok = np.array_equal(actual, expected)
    expect(ok, f"{what}: output values", expected=expected.ravel()[:8].tolist(),
           actual=actual.ravel()[:8].tolist())


def is_unimplemented(exc: BaseException) -> bool:
    return isinstance(exc, PjrtError) and exc.code == ErrorCode.UNIMPLEMENTED


def compile_needing(backend, text: str, device: DeviceSpec, *, ops: tuple[str, ...],
                    dtypes: tuple[str, ...]) -> CompiledProgram:
    """Compile a program that needs ``ops`` on ``dtypes``: UNSUPPORTED when the backend's
    ``pjrtkit_capabilities`` leaves any of them out, FAIL when it declares them all yet answers
    UNIMPLEMENTED (a false declaration). A backend that declares nothing is held to neither."""
    caps = backend.capabilities()
    missing = sorted(set(ops) - caps.ops if caps.ops is not None else ())
    missing += sorted(set(dtypes) - caps.dtypes if caps.dtypes is not None else ())
    if missing:
        raise Unsupported(", ".join(missing), "not declared in pjrtkit_capabilities")
    try:
        return compile_text(backend, text, device)
    except PjrtError as exc:
        if is_unimplemented(exc) and caps.ops is not None and caps.dtypes is not None:
            raise Failed(f"a program of declared ops {list(ops)} on declared dtypes "
                         f"{list(dtypes)} compiles", expected="an executable",
                         actual=f"UNIMPLEMENTED: {exc}"[:300]) from exc
        raise
