"""Whether the cuBLAS path runs on pjrtkit_cuda, in one process (the device check's ``vendor``
stage runs this first, with ``PJRTKIT_GPU_VENDOR_LIBRARIES=require``, before its conformance
checks and matmul benchmarks; its own process because JAX fixes its platforms once).

    PJRTKIT_GPU_VENDOR_LIBRARIES=require python -m pjrtkit_tools.gpu_device_check.vendor_check

What it reports (one JSON line on stdout; exit 0 once the report is printed, whatever it
says: the stage judges it):

- ``nvmath``: nvmath-python's version and whether ``nvmath.bindings.cublas`` imports, with
  the exact error when not; cuBLAS's version (``cublasGetProperty``) when the library loads;
- ``cases``: a few dots jitted on pjrtkit_cuda (``CASES``): float32, bfloat16, float16 with a
  float32 result, float64, a batched dot with a transposed operand, and an int32 dot (never
  the library's: it must still run under ``require``), each compared with NumPy's float64
  product of the same inputs, with the number of gemms the library ran for it (every
  ``CudaLibraries.gemm`` call is counted: a float dot that passed without one did not take
  the library) or the exact error (under emulation: FAILED_PRECONDITION naming the cause);
- ``libcublas``: the libcublas files the process mapped (which copy nvmath-python found).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

# name -> (lhs shape, rhs shape, operand dtype, result dtype or None, einsum spec or None,
# tolerance relative to the largest entry of the exact product, whether the library takes it)
CASES = {
    "float32": ((64, 48), (48, 32), "float32", None, None, 1e-5, True),
    "bfloat16": ((64, 48), (48, 32), "bfloat16", None, None, 1e-2, True),
    "float16_to_float32": ((64, 48), (48, 32), "float16", "float32", None, 1e-5, True),
    "float64": ((64, 48), (48, 32), "float64", None, None, 1e-12, True),
    "batched_transposed_float32": ((3, 48, 64), (3, 48, 32), "float32", None, "bkm,bkn->bmn",
                                   1e-5, True),
    "int32": ((16, 24), (24, 8), "int32", None, None, 0.0, False),
}


def nvmath_facts() -> dict:
    facts: dict = {}
    try:
        import nvmath

        facts["version"] = getattr(nvmath, "__version__", "?")
    except Exception as exc:  # noqa: BLE001 - reported exactly
        facts["import_error"] = f"{type(exc).__name__}: {exc}"
        return facts
    try:
        from nvmath.bindings import cublas  # noqa: F401
        facts["cublas_bindings"] = True
    except Exception as exc:  # noqa: BLE001
        facts["cublas_bindings"] = False
        facts["cublas_import_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def cublas_version() -> str | None:
    try:
        from nvmath.bindings import cublas

        return ".".join(str(cublas.get_property(p)) for p in (0, 1, 2))
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({type(exc).__name__}: {str(exc)[:200]})"


def mapped_libcublas() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f
                           if "libcublas" in line and "/" in line.split()[-1]})
    except OSError:
        return []


# What is known so far: printed with the error if the probe raises before its report.
REPORT: dict = {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pjrtkit_cuda")
    backend = parser.parse_args(argv).backend
    report = REPORT
    report.update(mode=os.environ.get("PJRTKIT_GPU_VENDOR_LIBRARIES", "auto"),
                  emulated=os.environ.get("PJRTKIT_GPU_EMULATE") == "1", nvmath=nvmath_facts())
    import jax

    jax.config.update("jax_platforms", f"{backend},cpu")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    from pjrtkit_gpu.vendor import cuda as vendor_cuda

    calls = [0]
    gemm = vendor_cuda.CudaLibraries.gemm

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return gemm(self, *args, **kwargs)

    vendor_cuda.CudaLibraries.gemm = counted
    device = jax.devices(backend)[0]
    report["device"] = str(device)
    rng = np.random.default_rng(5)
    cases = {}
    for name, (ls, rs, dtype, out, spec, tolerance, library) in CASES.items():
        np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        if dtype == "int32":
            a, b = (rng.integers(-9, 9, s).astype(np_dtype) for s in (ls, rs))
        else:
            a, b = (rng.standard_normal(s).astype(np_dtype) for s in (ls, rs))
        exact = (np.einsum(spec, a.astype(np.float64), b.astype(np.float64)) if spec
                 else a.astype(np.float64) @ b.astype(np.float64))
        if spec:
            def fn(x, y, spec=spec):
                return jnp.einsum(spec, x, y, precision="highest")
        else:
            def fn(x, y, out=out):
                return jnp.matmul(x, y, precision="highest", preferred_element_type=out)
        before = calls[0]
        row: dict = {"library_expected": library}
        try:
            got = np.asarray(jax.jit(fn)(*jax.device_put((a, b), device)))
            scale = float(np.abs(exact).max()) or 1.0
            row["max_rel_diff"] = float(np.abs(got.astype(np.float64) - exact).max()) / scale
            row["match"] = row["max_rel_diff"] <= tolerance
            row["result_dtype"] = str(got.dtype)
        except Exception as exc:  # noqa: BLE001 - reported exactly
            row["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
        row["library_gemms"] = calls[0] - before
        cases[name] = row
    report["cases"] = cases
    report["library_gemms"] = calls[0]
    if calls[0]:
        report["cublas_version"] = cublas_version()
    report["libcublas"] = mapped_libcublas()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 - one JSON line whatever happened
        print(json.dumps({**REPORT, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-3000:]}, default=str))
        sys.exit(1)
