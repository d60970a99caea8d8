"""DLPack both ways for pjrtkit_cpu arrays (host-resident), compared with XLA's cpu arrays."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

DTYPES = [np.float32, np.float16, np.int32, np.int8, np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_reads_a_pjrtkit_array_as_it_reads_an_xla_cpu_array(devices, dtype):
    host = (np.random.RandomState(0).randn(3, 5) * 10).astype(dtype)
    exported, dlpack_devices = [], []
    for device in devices:
        x = jax.jit(lambda a: a.T)(jax.device_put(host, device))  # a computed, transposed array
        dlpack_devices.append(tuple(int(v) for v in x.__dlpack_device__()))
        exported.append(np.from_dlpack(x))
    assert dlpack_devices[0] == dlpack_devices[1] == (1, 0)  # kDLCPU, device 0
    ours, ref = exported
    assert ours.dtype == ref.dtype and ours.shape == ref.shape == (5, 3)
    np.testing.assert_array_equal(ours, ref)


def test_the_exported_copy_belongs_to_the_consumer(devices):
    device, _ = devices
    x = jax.device_put(np.arange(4, dtype=np.float32), device)
    exported = np.from_dlpack(x)
    exported[0] = 99.0
    np.testing.assert_array_equal(np.asarray(x), np.arange(4))


def test_zero_copy_export_is_refused_with_the_reason(devices):
    device, _ = devices
    x = jax.device_put(np.arange(4, dtype=np.float32), device)
    with pytest.raises(BufferError, match="not addressable from the host"):
        x.__dlpack__(copy=False)
    with pytest.raises(BufferError, match="CPU DLPack device only"):
        x.__dlpack__(dl_device=(2, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_import_onto_a_pjrtkit_device_matches_xla_cpu(devices, dtype):
    device, reference = devices
    host = np.arange(12).reshape(3, 4).astype(dtype)
    ours = jax.dlpack.from_dlpack(host, device=device)
    ref = jax.dlpack.from_dlpack(host, device=reference)
    assert ours.devices() == {device}
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    negated = jax.jit(lambda a: ~a if a.dtype == jnp.bool_ else a * 2)
    np.testing.assert_array_equal(np.asarray(negated(ours)), np.asarray(negated(ref)))


def test_import_of_a_strided_tensor_and_of_a_pjrtkit_array(devices):
    """XLA's cpu refuses a non-compact producer (UNIMPLEMENTED); the copy onto pjrtkit_cpu reads
    any strides. A pjrtkit array is itself a producer."""
    device, reference = devices
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    ours = jax.dlpack.from_dlpack(strided, device=device)
    ref = jax.dlpack.from_dlpack(np.ascontiguousarray(strided), device=reference)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    again = jax.dlpack.from_dlpack(ours, device=device)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(ref))


def test_bfloat16_export_is_refused_by_numpys_exporter(devices):
    """A known gap: XLA's cpu exports bfloat16, NumPy (which exports pjrtkit arrays) cannot."""
    device, _ = devices
    x = jax.device_put(np.ones(3, ml_dtypes.bfloat16), device)
    with pytest.raises(BufferError, match="DLPack only supports"):
        np.from_dlpack(x)


def test_zero_copy_import_is_refused_with_the_reason(devices):
    device, _ = devices
    with pytest.raises(ValueError, match="copy=False cannot be honoured"):
        jnp.from_dlpack(np.arange(3.0), device=device, copy=False)


def test_other_platforms_keep_jaxs_own_dlpack(devices):
    _, reference = devices
    x = jax.device_put(np.arange(3, dtype=np.int32), reference)
    np.testing.assert_array_equal(np.from_dlpack(x), [0, 1, 2])
    y = jnp.from_dlpack(np.arange(3, dtype=np.int32))
    assert y.devices() == {reference}  # JAX's default: the producer's own (cpu) device


def test_with_only_the_pjrtkit_platform_import_lands_on_it(run_python):
    # JAX loads pjrtkit when it starts its backends (here: jax.devices()); a from_dlpack that is
    # the process's very first JAX call runs before the extension exists.
    out = run_python("""
        import jax, jax.numpy as jnp, numpy as np
        jax.devices()
        y = jnp.from_dlpack(np.arange(4, dtype=np.float32))
        z = np.from_dlpack(y * 3)
        print(list(y.devices())[0].platform, z.tolist())
    """, JAX_PLATFORMS="pjrtkit_cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "pjrtkit_cpu [0.0, 3.0, 6.0, 9.0]"
