"""The runtime seam without a GPU: the vendor drivers' no-driver paths give clear errors, the
backends are listed as unavailable with the reason, and JAX is unaffected; the emulated driver's
memory and copies; the driver-touching tests run only where a GPU is present."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pjrtkit.errors import FailedPrecondition

from gpu_support import emulated_driver


def _has_nvidia_gpu() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia")


def _has_amd_gpu() -> bool:
    return os.path.exists("/dev/kfd")


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has an NVIDIA GPU: the no-driver "
                                               "path cannot be taken here")
def test_cuda_driver_without_a_driver_says_why():
    from pjrtkit_gpu.drivers.cuda import CudaDriver

    with pytest.raises(FailedPrecondition) as info:
        CudaDriver()
    text = str(info.value)
    assert "pjrtkit_cuda" in text and "PJRTKIT_GPU_EMULATE=1" in text
    assert "driver" in text or "cuda-python" in text


@pytest.mark.skipif(_has_amd_gpu(), reason="this machine has an AMD GPU: the no-driver path "
                                           "cannot be taken here")
def test_hip_driver_without_rocm_says_why():
    from pjrtkit_gpu.drivers.hip import HipDriver

    with pytest.raises(FailedPrecondition) as info:
        HipDriver()
    text = str(info.value)
    assert "pjrtkit_rocm" in text and "PJRTKIT_GPU_EMULATE=1" in text
    assert "ROCm" in text or "hip-python" in text


@pytest.mark.skipif(_has_nvidia_gpu() or _has_amd_gpu(),
                    reason="this machine has a GPU: the backends are available here")
def test_without_a_driver_the_backends_are_listed_unavailable_and_jax_still_works(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PJRTKIT_GPU_EMULATE"}
    pjrtkit = os.path.join(os.path.dirname(sys.executable), "pjrtkit")
    listing = subprocess.run([pjrtkit, "list", "--json"],
                             capture_output=True, text=True, env=env, timeout=300)
    statuses = {s["name"]: s for s in json.loads(listing.stdout)}
    for name, platform in (("cuda", "pjrtkit_cuda"), ("rocm", "pjrtkit_rocm")):
        assert statuses[name]["status"] == "unavailable", statuses[name]
        assert platform in statuses[name]["reason"]
        assert "PJRTKIT_GPU_EMULATE=1" in statuses[name]["reason"]
    program = ("import jax, jax.numpy as jnp; print(float(jnp.arange(4.0).sum())); "
               "print(sorted({d.platform for d in jax.devices()}))")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "6.0"


@pytest.mark.skipif(not _has_nvidia_gpu(), reason="no NVIDIA GPU on this machine: the CUDA "
                                                  "driver's launches are untested here")
def test_cuda_driver_round_trip_and_launch():
    from pjrtkit_gpu.drivers.cuda import CudaDriver

    driver = CudaDriver()
    x = np.arange(1000, dtype=np.float32)
    assert np.array_equal(driver.to_host(driver.from_host(0, x)), x)


@pytest.mark.skipif(not _has_nvidia_gpu(), reason="no NVIDIA GPU on this machine: pinned "
                                                  "host staging (cuMemHostAlloc) is untested here")
def test_cuda_transfers_larger_than_the_pinned_staging_buffer_round_trip():
    from pjrtkit_gpu.drivers.cuda import CudaDriver, PinnedStaging

    driver = CudaDriver()
    n = (2 * PinnedStaging.STAGING_BYTES + 12345) // 4  # three chunks, the last one partial
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    payload = driver.from_host(0, x)
    assert np.array_equal(driver.to_host(payload), x)
    assert np.array_equal(driver.to_host(driver.duplicate(payload)), x)
    assert driver._staging.buffer(0)  # noqa: SLF001 - the staging buffer really is pinned memory
    from cuda.bindings import driver as cu
    flags = cu.cuMemHostGetFlags(driver._staging.buffer(0))  # noqa: SLF001
    assert flags[0] == cu.CUresult.CUDA_SUCCESS, flags


def test_emulated_driver_memory_and_copies():
    driver = emulated_driver()
    assert driver.interprets and driver.devices()[0].arch == "emulated"
    for array in (np.float32(2.5), np.zeros((0, 3), np.int8), np.arange(7, dtype=np.uint64),
                  np.array([True, False])):
        array = np.asarray(array)
        payload = driver.from_host(0, array)
        copy = driver.duplicate(payload)
        assert copy.memory is not payload.memory
        back = driver.to_host(copy)
        assert back.dtype == array.dtype and back.shape == array.shape
        assert np.array_equal(back, array)


def test_execution_and_transfers_return_only_after_the_stream_is_done():
    """The seam's completion rule: the core completes PJRT events when execute / the transfer
    hooks return, so each must wait for the device's stream (ARCHITECTURE.md, GPU backends).
    Recorded on the emulated driver: every launch of an execution precedes its synchronize."""
    import jax.numpy as jnp

    from pjrtkit.testing.programs import lower_program
    from pjrtkit.types import CompileOptions, DeviceSpec

    from pjrtkit_gpu.backend import GpuBackend
    from pjrtkit_gpu.drivers.emulated import EmulatedDriver

    base = emulated_driver()
    events = []

    class RecordingDriver(EmulatedDriver):
        def __init__(self):
            self.__dict__.update(base.__dict__)

        def launch(self, *args, **kwargs):
            events.append("launch")
            return super().launch(*args, **kwargs)

        def synchronize(self, device_index):
            events.append("synchronize")

    driver = RecordingDriver()
    backend = GpuBackend(vendor="cuda", plugin="cuda", like=None, version="test")
    backend.driver = lambda: driver
    device = DeviceSpec(id=0, kind="emulated")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    payload = backend.pjrtkit_transfer_to_device(array=x, device=device, memory_kind="device")
    assert events == ["synchronize"]
    program = lower_program(lambda a: jnp.tanh(a) @ a.T, x)
    compiled = backend.pjrtkit_compile(program=program, options=CompileOptions(1, 1, None, True),
                                       devices=[device])
    events.clear()
    (result,), = compiled.executable.execute([[payload]], [device])
    assert events and events[-1] == "synchronize" and events.count("synchronize") == 1
    assert "launch" in events
    np.testing.assert_allclose(driver.to_host(result), np.tanh(x) @ x.T, rtol=2e-5)


def test_a_launch_grid_past_what_gpus_take_is_unimplemented_naming_the_kernel():
    from pjrtkit.errors import Unimplemented

    driver = emulated_driver()  # first: it makes Triton interpret
    from pjrtkit_gpu import kernels
    from pjrtkit_gpu.drivers.base import GRID_LIMITS, launch_grid

    assert launch_grid(kernels.iota, (5,)) == (5, 1, 1)
    assert launch_grid(kernels.iota, GRID_LIMITS) == GRID_LIMITS
    out = driver.empty(0, (4,), np.dtype(np.int32))
    for grid in ((1, GRID_LIMITS[1] + 1), (1, 1, GRID_LIMITS[2] + 1), (GRID_LIMITS[0] + 1,)):
        with pytest.raises(Unimplemented, match=r"kernel iota needs a launch grid of"):
            driver.launch(0, kernels.iota, grid, [out, 4], {"BLOCK": 8})
