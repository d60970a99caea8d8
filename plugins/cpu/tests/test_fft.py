"""stablehlo.fft (FFT, IFFT, RFFT, IRFFT over 1 to 3 trailing axes) against XLA's CPU backend.

Every FFT program holds complex tensors: the kernel is compared with XLA through
``run_complex_kernels`` (programs made only of ops that take complex themselves), and end to
end on the pjrtkit_cpu device.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pjrtkit.testing.tolerances import assert_close

COMPLEX = [np.complex64, np.complex128]
REAL = [np.float32, np.float64]


def signal(rng, shape, dtype):
    dtype = np.dtype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def compare(ours, ref, loosen=1.0):
    assert len(ours) == len(ref)
    for i, (x, y) in enumerate(zip(ours, ref)):
        assert_close(x, y, what=f"output {i}", loosen=loosen)


# Tolerance: a length-n FFT sums n terms, so rounding grows like log2(n) ulps; XLA's
# (DUCC) and SciPy's (pocketfft) factorizations differ.
LOOSEN = 10


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(16,), (3, 12), (2, 3, 7)])
def test_fft_and_ifft(run_complex_kernels, rng, dtype, shape):
    x = signal(rng, shape, dtype)
    compare(*run_complex_kernels(lambda x: (jnp.fft.fft(x), jnp.fft.ifft(x)), x), loosen=LOOSEN)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
def test_fft_over_two_and_three_axes(run_complex_kernels, rng, dtype):
    x = signal(rng, (2, 4, 6, 5), dtype)

    def fn(x):
        return jnp.fft.fft2(x), jnp.fft.ifft2(x), jnp.fft.fftn(x, axes=(1, 2, 3))

    compare(*run_complex_kernels(fn, x), loosen=LOOSEN)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(16,), (3, 9), (2, 4, 6)])
def test_rfft_gives_xlas_complex_dtype(run_complex_kernels, rng, dtype, shape):
    x = signal(rng, shape, dtype)
    ours, ref = run_complex_kernels(lambda x: (jnp.fft.rfft(x), jnp.fft.rfftn(x)), x)
    assert ours[0].dtype == np.result_type(dtype, np.complex64)
    compare(ours, ref, loosen=LOOSEN)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("length", [8, 9])
def test_irfft_of_even_and_odd_lengths(run_complex_kernels, rng, dtype, length):
    # The input's imaginary parts at 0 (and n/2) are ignored, as by XLA.
    x = signal(rng, (3, length // 2 + 1), dtype)

    def fn(x):
        # lax.fft: jnp.fft.irfft with n pads its input through a complex constant.
        return (jax.lax.fft(x, jax.lax.FftType.IRFFT, (length,)),
                jax.lax.fft(x, jax.lax.FftType.IRFFT, (3, length)), jnp.fft.irfft2(x))

    ours, ref = run_complex_kernels(fn, x)
    assert ours[0].dtype == np.zeros(0, dtype).real.dtype
    compare(ours, ref, loosen=LOOSEN)


def test_empty_signal(run_complex_kernels):
    x = np.zeros((0, 8), np.complex64)
    compare(*run_complex_kernels(jnp.fft.fft, x))


def test_fft_end_to_end_on_the_device(rng):
    x = signal(rng, (4, 16), np.float32)
    with jax.default_device(jax.devices("pjrtkit_cpu")[0]):
        ours = np.asarray(jax.jit(lambda x: jnp.fft.irfft(jnp.fft.rfft(x)))(x))
    with jax.default_device(jax.devices("cpu")[0]):
        ref = np.asarray(jax.jit(lambda x: jnp.fft.irfft(jnp.fft.rfft(x)))(x))
    assert_close(ours, ref, what="irfft(rfft(x))", loosen=LOOSEN)
