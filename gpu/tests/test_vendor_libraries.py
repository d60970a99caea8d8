"""The vendor libraries' fast path (``pjrtkit_gpu.vendor``) without a GPU: the setting, why
each vendor is unavailable here (emulation, no driver, bindings missing), the dot rule falling
back to the Triton kernels with identical results, ``require`` as a PJRT error, and the
library path of the dot rule run end to end on an implementation of the interface that
computes on the emulated driver's host memory (the BLAS argument translation checked against
XLA's CPU backend). Nothing here has run cuBLAS or hipBLAS themselves: no GPU."""
from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import subprocess
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

from pjrtkit.errors import FailedPrecondition, InvalidArgument
from pjrtkit.expansions import expand
from pjrtkit.lowering.plan import build_plan
from pjrtkit.testing.programs import lower_program, run_on_xla_cpu
from pjrtkit.testing.tolerances import assert_close

from pjrtkit_gpu.vendor.base import VendorLibraries, blas_gemm

from gpu_support import emulated_driver, sample

VARIABLE = "PJRTKIT_GPU_VENDOR_LIBRARIES"
HAS_NVMATH = importlib.util.find_spec("nvmath") is not None
HAS_HIPBLAS = importlib.util.find_spec("rocm.bindings.hipblas") is not None


def _has_nvidia_gpu() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia")


def _has_amd_gpu() -> bool:
    return os.path.exists("/dev/kfd")


def _plan(fn, *args, vendor):
    """``fn``'s plan on the emulated driver, compiled as the plugin of ``vendor`` compiles."""
    driver = emulated_driver()
    from pjrtkit_gpu.fusion import fuse_elementwise
    from pjrtkit_gpu.lowering import PRIMITIVES, registry_for

    program = fuse_elementwise(expand(lower_program(fn, *args), PRIMITIVES))
    return driver, build_plan(program, registry_for(driver, 0, "pjrtkit_cuda", vendor))


def _run(fn, *args, vendor):
    driver, plan = _plan(fn, *args, vendor=vendor)
    outputs = plan(*(driver.from_host(0, np.asarray(a)) for a in args))
    return [driver.to_host(p) for p in outputs]


# -- the setting -------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, mode", [(None, "auto"), ("", "auto"), ("auto", "auto"),
                                       ("off", "off"), ("OFF", "off"), (" require ", "require")])
def test_setting_values(monkeypatch, raw, mode):
    from pjrtkit_gpu import settings

    if raw is None:
        monkeypatch.delenv(VARIABLE, raising=False)
    else:
        monkeypatch.setenv(VARIABLE, raw)
    assert settings.vendor_libraries_mode() == mode


def test_a_bad_setting_names_the_variable_at_compile(monkeypatch):
    from pjrtkit_gpu import settings

    monkeypatch.setenv(VARIABLE, "sometimes")
    with pytest.raises(ValueError, match=f"{VARIABLE}='sometimes' is not one of auto, off"):
        settings.vendor_libraries_mode()
    x = sample("bad", (3, 4), np.float32)
    with pytest.raises(InvalidArgument, match=f"pjrtkit_cuda: {VARIABLE}='sometimes'"):
        _plan(lambda a: a @ a.T, x, vendor="cuda")


# -- availability ------------------------------------------------------------------------------
@pytest.mark.parametrize("vendor", ["cuda", "hip"])
def test_availability_under_emulation_says_why_not(vendor):
    from pjrtkit_gpu.vendor import libraries_for

    available, reason = libraries_for(emulated_driver(), vendor).availability(0)
    assert not available
    installed = HAS_NVMATH if vendor == "cuda" else HAS_HIPBLAS
    if installed:
        driver_name = "CUDA" if vendor == "cuda" else "ROCm"
        assert reason.startswith(f"no {driver_name} driver: the emulated driver "
                                 f"(PJRTKIT_GPU_EMULATE=1)"), reason
    else:
        assert "is not installed" in reason and "[vendor]" in reason, reason


def test_availability_is_decided_once_per_device(monkeypatch):
    from pjrtkit_gpu.vendor.cuda import CudaLibraries

    libraries = CudaLibraries(emulated_driver())
    first = libraries.availability(0)
    # The bindings going away afterwards changes nothing: the answer was kept.
    monkeypatch.setitem(sys.modules, "nvmath", None)
    assert libraries.availability(0) is first


def test_without_nvmath_the_reason_says_what_to_install(monkeypatch):
    from pjrtkit_gpu.vendor.cuda import CudaLibraries

    # A real failing import: None in sys.modules stops it (for the submodules an earlier
    # import left there too).
    for name in {"nvmath", "nvmath.bindings", "nvmath.bindings.cublas",
                 *(m for m in sys.modules if m.startswith("nvmath."))}:
        monkeypatch.setitem(sys.modules, name, None)
    available, reason = CudaLibraries(emulated_driver()).availability(0)
    assert not available
    assert reason.startswith("nvmath-python is not installed") and \
        "pip install 'pjrtkit-cuda[vendor]'" in reason, reason


@pytest.mark.skipif(not HAS_NVMATH, reason="nvmath-python is not installed (pjrtkit-gpu's "
                                           "cuda-libraries extra; make installs it)")
@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU: the no-driver "
                                              "path cannot be taken here")
def test_cublas_handle_without_a_cuda_driver_says_so():
    from pjrtkit_gpu.vendor.base import VendorUnavailable
    from pjrtkit_gpu.vendor.cuda import import_cublas, open_cublas_handle

    with pytest.raises(VendorUnavailable) as info:
        open_cublas_handle(import_cublas(), 0)
    text = str(info.value)
    # nvmath-python's own loader error, not ours: libcuda cannot be loaded here.
    assert text.startswith("no CUDA driver: ") and "libcuda" in text, text


@pytest.mark.skipif(not HAS_HIPBLAS, reason="rocm-bindings-libraries is not installed "
                                            "(pjrtkit-gpu's rocm-libraries extra)")
@pytest.mark.skipif(_has_amd_gpu(), reason="this machine has an AMD GPU: the no-ROCm path "
                                           "cannot be taken here")
def test_hipblas_handle_without_rocm_says_so():
    from pjrtkit_gpu.vendor.base import VendorUnavailable
    from pjrtkit_gpu.vendor.hip import import_hipblas, open_hipblas_handle

    hipblas, _hip = import_hipblas()
    with pytest.raises(VendorUnavailable) as info:
        open_hipblas_handle(hipblas, None)
    text = str(info.value)
    assert text.startswith("no hipBLAS library (ROCm): ") and "libhipblas" in text, text


# -- the dot rule's choice ---------------------------------------------------------------------
def _dot(lhs_contracting, rhs_contracting, lhs_batch=(), rhs_batch=()):
    """``lax.dot_general`` with these dimension numbers as they come (jnp's ``.T`` and einsum
    would transpose first): operands the lowering reads in place, transposed or not."""
    numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))
    return lambda a, b: jax.lax.dot_general(a, b, numbers)


DOTS = {
    "matmul": (_dot((1,), (0,)), (5, 6), (6, 4)),
    "rhs_transposed": (_dot((1,), (1,)), (5, 6), (4, 6)),
    "lhs_transposed": (_dot((0,), (0,)), (6, 5), (6, 4)),
    "batched_both_transposed": (_dot((1,), (2,), (0,), (0,)), (2, 6, 5), (2, 4, 6)),
    "batch_in_the_middle": (_dot((2,), (1,), (1,), (0,)), (5, 3, 6), (3, 6, 4)),
    "batch_last_copied": (_dot((0,), (1,), (2,), (0,)), (6, 5, 3), (3, 6, 4)),
    "vector_matrix": (_dot((0,), (0,)), (6,), (6, 4)),
    "matrix_vector": (_dot((1,), (0,)), (5, 6), (6,)),
    "matrix_vector_transposed": (_dot((0,), (0,)), (6, 5), (6,)),
}


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_without_the_library_the_dot_runs_on_triton_unchanged(monkeypatch, mode):
    """Emulated, the cuda plugin's dot (vendor given) is the Triton path's, bit for bit."""
    monkeypatch.setenv(VARIABLE, mode)
    for name, (fn, lhs, rhs) in DOTS.items():
        a, b = sample(name + "a", lhs, np.float32), sample(name + "b", rhs, np.float32)
        ours = _run(fn, a, b, vendor="cuda")
        triton = _run(fn, a, b, vendor=None)
        assert np.array_equal(ours[0], triton[0]), name


def test_require_fails_the_compile_naming_the_cause(monkeypatch):
    monkeypatch.setenv(VARIABLE, "require")
    a, b = sample("ra", (5, 6), np.float32), sample("rb", (6, 4), np.float32)
    with pytest.raises(FailedPrecondition) as info:
        _plan(lambda x, y: x @ y, a, b, vendor="cuda")
    text = str(info.value)
    assert text.startswith(f"pjrtkit_cuda: {VARIABLE}=require, but cuBLAS cannot run this "
                           f"dot_general (float32, batch 1, 5x6 @ 6x4) on device 0: "), text
    assert ("no CUDA driver: the emulated driver" if HAS_NVMATH
            else "nvmath-python is not installed") in text, text
    # A dot the library would not run (integers) is the Triton path's under require too.
    i, j = sample("ri", (3, 4), np.int32), sample("rj", (4, 2), np.int32)
    assert np.array_equal(_run(lambda x, y: x @ y, i, j, vendor="cuda")[0], i @ j)


def test_off_and_emulated_auto_never_touch_the_library(monkeypatch):
    from pjrtkit_gpu import vendor

    created = []
    monkeypatch.setenv(VARIABLE, "off")
    monkeypatch.setattr(vendor, "_LIBRARIES", _Recording(created))
    a, b = sample("oa", (5, 6), np.float32), sample("ob", (6, 4), np.float32)
    _run(lambda x, y: x @ y, a, b, vendor="cuda")
    assert created == []
    monkeypatch.setenv(VARIABLE, "auto")  # auto on the emulated driver: not asked either
    _run(lambda x, y: x @ y, a, b, vendor="cuda")
    assert created == []
    monkeypatch.setenv(VARIABLE, "require")  # require: the library is asked (and says why not)
    with pytest.raises(FailedPrecondition):
        _run(lambda x, y: x @ y, a, b, vendor="cuda")
    assert [key[1] for key in created] == ["cuda"]


class _Recording(dict):
    """The libraries cache, recording which ones are made."""

    def __init__(self, made):
        super().__init__()
        self._made = made

    def __setitem__(self, key, value):
        self._made.append(key)
        super().__setitem__(key, value)


# -- the library path, end to end, on host memory ----------------------------------------------
def _host_array(pointer: int, count: int, dtype) -> np.ndarray:
    """``count`` elements at ``pointer`` (emulated device memory is host memory)."""
    dtype = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(pointer),
                         dtype=dtype)


def _stored(buffer_at, base, ld, rows, columns, transposed):
    """op(X) of a column-major X (``rows`` x ``columns`` after op), as a BLAS reads it."""
    stored = (columns, rows) if transposed else (rows, columns)
    index = base + np.arange(stored[0])[:, None] + np.arange(stored[1])[None, :] * ld
    matrix = buffer_at(int(index.max()) + 1)[index]
    return matrix.T if transposed else matrix


class HostBlas(VendorLibraries):
    """A ``VendorLibraries`` whose gemm follows the BLAS contract (column-major strided
    batched, op N/T, leading dimensions, batch strides) in NumPy on the emulated driver's
    host memory: the dot rule's library path and ``blas_gemm``'s translation run for real,
    only the arithmetic is not a vendor's."""

    vendor = "host"
    blas_name = "NumPy BLAS (test)"
    calls: list = []

    def _open(self, device_index):
        pass

    def gemm(self, device_index, spec, a, b, c):
        call = blas_gemm(spec)
        self.calls.append(spec)
        wide = np.float64 if spec.dtype == np.float64 else np.float32
        out = _host_array(c, call.batch * call.m * call.n, spec.out_dtype)
        for z in range(call.batch):
            first = _stored(lambda n: _host_array(b, n, spec.dtype), z * call.stride_first,
                            call.ld_first, call.m, call.k, call.transpose_first)
            second = _stored(lambda n: _host_array(a, n, spec.dtype), z * call.stride_second,
                             call.ld_second, call.k, call.n, call.transpose_second)
            index = (z * call.stride_c + np.arange(call.m)[:, None]
                     + np.arange(call.n)[None, :] * call.ldc)
            out[index] = (first.astype(wide) @ second.astype(wide)).astype(spec.out_dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_the_library_path_computes_every_layout(monkeypatch, dtype):
    from pjrtkit_gpu import vendor

    monkeypatch.setitem(vendor.IMPLEMENTATIONS, "host", HostBlas)
    monkeypatch.setattr(HostBlas, "calls", [])
    monkeypatch.setenv(VARIABLE, "require")
    with jax.enable_x64(dtype == np.float64):
        for name, (fn, lhs, rhs) in DOTS.items():
            a, b = sample(name + "a", lhs, dtype), sample(name + "b", rhs, dtype)
            ours = _run(fn, a, b, vendor="host")
            reference = run_on_xla_cpu(fn, (a, b))
            assert ours[0].dtype == reference[0].dtype, name
            assert_close(ours[0], reference[0], what=f"{name} {np.dtype(dtype).name}")
    # Every dot went through the library (none fell back to the Triton kernels), operands
    # read in place transposed included.
    calls = HostBlas.calls
    assert len(calls) == len(DOTS)
    assert any(c.a_transposed for c in calls) and any(c.b_transposed for c in calls)
    assert any(c.batch > 1 for c in calls)


# -- through JAX: the emulated plugins ---------------------------------------------------------
SCRIPT = r"""
import json, os, sys
import jax, jax.numpy as jnp, numpy as np

VARIABLE = "PJRTKIT_GPU_VENDOR_LIBRARIES"
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 5, 6)).astype(np.float32)
w = rng.standard_normal((2, 4, 6)).astype(np.float32)

def program():  # a new function each time, so JAX compiles it again under the new setting
    return jax.jit(lambda a, b: jnp.einsum("bij,bkj->bik", a, b))

with jax.default_device(jax.devices("cpu")[0]):
    expected = np.asarray(program()(x, w))

def attempt(fn):
    try:
        fn()
        return None
    except Exception as exc:
        return str(exc)

out = {}
for platform, module in (("pjrtkit_cuda", "nvmath"), ("pjrtkit_rocm", "rocm.bindings.hipblas")):
    device = jax.devices(platform)[0]
    args = jax.device_put((x, w), device)
    result = {}
    os.environ[VARIABLE] = "off"
    off = np.asarray(program()(*args))
    result["imported_when_off"] = module in sys.modules
    os.environ[VARIABLE] = "auto"
    auto = np.asarray(program()(*args))
    result["identical"] = bool(np.array_equal(off, auto))
    result["max_error"] = float(np.max(np.abs(auto - expected)))
    os.environ[VARIABLE] = "require"
    result["require"] = attempt(lambda: program()(*args))
    ints = jax.device_put((np.ones((3, 4), np.int32), np.ones((4, 2), np.int32)), device)
    result["require_ints"] = np.asarray(jax.jit(lambda a, b: a @ b)(*ints)).tolist()
    os.environ[VARIABLE] = "sometimes"
    result["bad"] = attempt(lambda: program()(*args))
    os.environ[VARIABLE] = "auto"
    result["after"] = float(np.max(np.abs(np.asarray(program()(*args)) - expected)))
    out[platform] = result
print(json.dumps(out))
"""


def test_the_emulated_plugins_fall_back_and_require_is_a_pjrt_error():
    env = dict(os.environ, PJRTKIT_GPU_EMULATE="1",
               JAX_PLATFORMS="pjrtkit_cuda,pjrtkit_rocm,cpu")
    env.pop(VARIABLE, None)
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for platform, blas, installed, driver in (("pjrtkit_cuda", "cuBLAS", HAS_NVMATH, "CUDA"),
                                              ("pjrtkit_rocm", "hipBLAS", HAS_HIPBLAS, "ROCm")):
        facts = result[platform]
        assert not facts["imported_when_off"], platform
        assert facts["identical"] and facts["max_error"] < 1e-4, (platform, facts)
        assert facts["require"].startswith(
            f"FAILED_PRECONDITION: {platform}: {VARIABLE}=require, but {blas} cannot run this "
            f"dot_general (float32, batch 2, 5x6 @ 6x4) on device 0: "), facts["require"]
        assert (f"no {driver} driver: the emulated driver" if installed
                else "is not installed") in facts["require"], facts["require"]
        assert facts["require_ints"] == [[4, 4]] * 3
        assert facts["bad"].startswith(f"INVALID_ARGUMENT: {platform}: {VARIABLE}='sometimes' "
                                       f"is not one of auto, off, require"), facts["bad"]
        assert facts["after"] < 1e-4
