"""Every kind of attribute the loader reads, as real programs, each checked in a child process.

``CASES`` maps a name to a function that returns ``(program bytes or MLIR text, check)``;
``check(program)`` raises AssertionError when the loaded IR does not hold what the program
holds. ``run_cases(names)`` runs cases in a child process and reports per case, so a case that
aborts the process (what jaxlib's bindings did on a complex constant) is a failure of that case,
not of the test run. Used by ``tests/test_attribute_kinds.py`` and the program fuzz harness.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import ml_dtypes
import numpy as np

from pjrtkit.stablehlo.ir import Program, walk_ops


def _constants(program: Program) -> list[np.ndarray]:
    return [op.attributes["value"] for op in walk_ops(program) if op.name == "stablehlo.constant"]


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert isinstance(a, np.ndarray), f"decoded {type(a).__name__}, expected an array"
    assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{a.dtype}{a.shape} != {b.dtype}{b.shape}"
    assert a.tobytes() == b.tobytes(), f"{a.ravel()[:8]} != {b.ravel()[:8]}"


def _constant_case(array: np.ndarray) -> Callable[[], tuple]:
    """A jitted JAX program returning ``array`` (closed over, so it becomes a constant)."""

    def make():
        from pjrtkit.testing.programs import portable_artifact

        code = portable_artifact(lambda: array)

        def check(program: Program) -> None:
            found = [c for c in _constants(program) if c.shape == array.shape]
            shapes = [c.shape for c in _constants(program)]
            assert found, f"no constant of shape {array.shape}: {shapes}"
            _same(found[0], array)

        return code, check

    return make


def _pattern(dtype, n: int) -> np.ndarray:
    """Distinct values (with negatives, NaN and infinity where the type has them)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 0)
    if dtype.kind == "c":
        values = np.arange(n) * (1.5 - 2j) - 3
        if n > 2:
            values[1] = complex(np.nan, np.inf)
        return values.astype(dtype)
    info = ml_dtypes.finfo(dtype) if dtype.kind == "f" or dtype.name.startswith(
        ("bfloat", "float")) else ml_dtypes.iinfo(dtype)
    if isinstance(info, ml_dtypes.iinfo):
        span = min(int(info.max) - int(info.min) + 1, 1 << 16)
        return np.array([(i * 7) % span + int(info.min) for i in range(n)], dtype=object
                        ).astype(dtype)
    values = (np.arange(n, dtype=np.float64) - n / 2) / 4
    return values.astype(dtype)


_DTYPES = {
    "bool": np.bool_, "int2": ml_dtypes.int2, "int4": ml_dtypes.int4, "uint2": ml_dtypes.uint2,
    "uint4": ml_dtypes.uint4, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "uint8": np.uint8, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
    "float64": np.float64, "complex64": np.complex64, "complex128": np.complex128,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz, "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
}

CASES: dict[str, Callable[[], tuple]] = {}
for _name, _dtype in _DTYPES.items():
    # small: printed as a list; large (over 100 elements): printed as hex; splat: one value
    CASES[f"dense-{_name}-list"] = _constant_case(_pattern(_dtype, 6).reshape(2, 3))
    CASES[f"dense-{_name}-hex"] = _constant_case(_pattern(_dtype, 300).reshape(20, 15))
    CASES[f"splat-{_name}"] = _constant_case(np.full((25, 25), _pattern(_dtype, 3)[-1]))
CASES["complex-splat-of-issue-13"] = _constant_case(np.full((25, 25), 0.5 + 0j, np.complex64))
CASES["scalar-complex128"] = _constant_case(np.array(1.5 - 0.25j, np.complex128))
CASES["empty-float32"] = _constant_case(np.zeros((0, 3), np.float32))


def _text_case(body: str, check: Callable[[dict], None]) -> Callable[[], tuple]:
    """MLIR text whose single op (a ``stablehlo.constant``) carries extra attributes."""
    text = ("func.func @main() -> tensor<2xf32> {\n"
            f"  %0 = stablehlo.constant {{{body}}} dense<[1.0, 2.0]> : tensor<2xf32>\n"
            "  return %0 : tensor<2xf32>\n}")

    def make():
        def run_check(program: Program) -> None:
            (op,) = [o for o in walk_ops(program) if o.name == "stablehlo.constant"]
            check(op.attributes)

        return text, run_check

    return make


def _expect(key: str, expected) -> Callable[[dict], None]:
    def check(attributes: dict) -> None:
        value = attributes[key]
        if isinstance(expected, np.ndarray):
            _same(value, expected)
        else:
            assert value == expected, f"{key}: {value!r} != {expected!r}"
    return check


def _expect_nested(key: str, path: tuple, expected: np.ndarray) -> Callable[[dict], None]:
    def check(attributes: dict) -> None:
        value = attributes[key]
        for step in path:
            value = value[step]
        _same(value, expected)
    return check


CASES.update({
    "string": _text_case('s = "a \\"quoted\\" string"', _expect("s", 'a "quoted" string')),
    # a binary payload (Pallas's Triton custom call carries MLIR bytecode in a string)
    "string-not-utf8": _text_case('d = {ir = "ML\\EFR\\00\\01", name = "k"}',
                                  _expect("d", {"ir": b"ML\xefR\x00\x01", "name": "k"})),
    "bool-attr": _text_case("b = true", _expect("b", True)),
    "integer-attr": _text_case("i = -7 : i64", _expect("i", -7)),
    "float-attr": _text_case("f = 2.5 : f32", _expect("f", 2.5)),
    "dense-i64-array": _text_case("a = array<i64: 1, -2, 3>", _expect("a", (1, -2, 3))),
    "dense-bool-array": _text_case("a = array<i1: true, false>", _expect("a", (True, False))),
    "unit-attr": _text_case("u", _expect("u", True)),
    "symbol-attr": _text_case("s = @main", _expect("s", "main")),
    "nested-dict": _text_case('d = {x = {y = 3 : i32}, z = "w"}',
                              _expect("d", {"x": {"y": 3}, "z": "w"})),
    "complex-in-array": _text_case(
        "a = [1 : i32, dense<(1.0,2.0)> : tensor<2xcomplex<f32>>, \"s\"]",
        _expect_nested("a", (1,), np.full(2, 1 + 2j, np.complex64))),
    "complex-in-dict": _text_case(
        "d = {c = dense<[(1.0,-2.0), (0x7FF8000000000000,3.0)]> : tensor<2xcomplex<f64>>}",
        _expect_nested("d", ("c",), np.array([1 - 2j, complex(np.nan, 3.0)], np.complex128))),
    "complex-in-array-in-dict": _text_case(
        "d = {a = [dense<(0.5,0.0)> : tensor<complex<f32>>]}",
        _expect_nested("d", ("a", 0), np.array(0.5 + 0j, np.complex64))),
    "bf16-in-array": _text_case(
        "a = [dense<[1.5, -2.0]> : tensor<2xbf16>]",
        _expect_nested("a", (0,), np.array([1.5, -2.0], ml_dtypes.bfloat16))),
    "int4-splat-attr": _text_case(
        "a = dense<-3> : tensor<3xi4>", _expect("a", np.full(3, -3, ml_dtypes.int4))),
})


def run_case(name: str) -> None:
    """Load case ``name`` and check it (in this process). The case named by the variable
    PJRTKIT_ATTRIBUTE_KINDS_ABORT aborts the process instead (the harness's own test)."""
    from pjrtkit.stablehlo.loader import load_program

    if name == os.environ.get("PJRTKIT_ATTRIBUTE_KINDS_ABORT"):
        os.abort()

    code, check = CASES[name]()
    check(load_program(code))


def run_cases(names: list[str], timeout: float = 600) -> dict[str, str]:
    """Run cases in child processes: ``{name: "ok" | failure text}``. A child that dies is
    restarted after the case it died on, which is reported as "aborted (exit status N)"."""
    results: dict[str, str] = {}
    pending = list(names)
    while pending:
        # 64-bit cases need JAX's x64 mode to stay 64-bit in the program
        env = {**os.environ, "JAX_ENABLE_X64": "1"}
        child = subprocess.run([sys.executable, "-m", "pjrtkit_tools.attribute_kinds",
                                *pending], capture_output=True,
                               text=True, timeout=timeout, env=env)
        started = None
        for line in child.stdout.splitlines():
            record = json.loads(line)
            if record["event"] == "start":
                started = record["name"]
            else:
                results[record["name"]] = record["outcome"]
                started = None
        if started is not None or child.returncode != 0:
            culprit = started or next((n for n in pending if n not in results), None)
            if culprit is None:
                break
            tail = child.stderr.strip().splitlines()[-3:]
            results[culprit] = f"aborted (exit status {child.returncode}): {' | '.join(tail)}"
        pending = [n for n in pending if n not in results]
    return results


def _main(names: list[str]) -> None:
    for name in names:
        print(json.dumps({"event": "start", "name": name}), flush=True)
        try:
            run_case(name)
            outcome = "ok"
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the parent
            outcome = f"{type(exc).__name__}: {exc}"[:2000]
        print(json.dumps({"event": "done", "name": name, "outcome": outcome}), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
