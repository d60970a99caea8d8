"""``stablehlo.fft`` (FFT, IFFT, RFFT, IRFFT over the trailing 1 to 3 axes) as real arithmetic.

For a backend without an FFT kernel. The transform is computed on real tensors: a complex
signal is a real tensor with a trailing *component* axis of size 2 (real, imaginary), built
from the operand with ``real``/``imag`` and turned back with ``complex`` at the end, so a
backend (or the complex-onto-pairs expansion) needs no complex kernel beyond those three.

One axis of length ``n`` at a time, each leaving its result axis last (before the component
axis), so transforming the axes in increasing order restores their order:

- ``n <= 16``: a dense DFT, one ``dot_general`` with a constant ``(n, 2, n, 2)`` matrix that
  holds the complex product as a real one;
- ``n`` with a factor ``r <= 16``: mixed radix (Cooley-Tukey, ``n = r * m``): a dense DFT of
  size ``r``, a twiddle multiply, the size-``m`` transform (recursively); O(n log n) for smooth
  ``n``;
- otherwise (a prime factor above 16 and none at most 16): Bluestein's chirp-z algorithm, a
  circular convolution of length ``M >= 2n - 1`` (``M`` 5-smooth) by two mixed-radix
  transforms and a constant spectrum.

RFFT transforms the last axis first (a real signal: the first dense stage takes real input),
keeping ``n // 2 + 1`` outputs; IRFFT transforms the other axes first and the last axis last:
the half spectrum, weighted (1 for the first and, for even ``n``, the middle term; 2 for the
rest) and zero-padded to ``n``, through an inverse transform whose real part is the result
(the imaginary parts of the self-conjugate terms do not contribute, as in XLA). IFFT and IRFFT
scale by ``1 / n`` in the first dense stage. Constants are computed in float64 and rounded to
the signal's precision once.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.errors import InvalidArgument
from pjrtkit.expansions.builder import Builder, real_dtype

# Largest dense DFT (and largest mixed-radix factor).
DENSE_MAX = 16
_KINDS = ("FFT", "IFFT", "RFFT", "IRFFT")


def expand_fft(op, program=None) -> list:
    """The ops computing ``op.results`` of one ``stablehlo.fft``."""
    del program
    kind = str(op.attributes.get("fft_type"))
    lengths = tuple(int(n) for n in op.attributes.get("fft_length", ()))
    operand, result = op.operands[0], op.results[0]
    _check(op, kind, lengths)
    b = Builder(op.location)
    if result.type.size == 0 or operand.type.size == 0:
        return b.finish([b.constant(0, result.type.dtype, result.type.shape)], [result])
    rank = operand.type.rank
    axes = list(range(rank - len(lengths), rank))
    precision = real_dtype(operand.type.dtype)
    signal = _Signal(b, precision, operand)
    inverse = kind in ("IFFT", "IRFFT")
    if kind == "RFFT":
        signal.transform(axes[-1], lengths[-1], inverse=False, keep=lengths[-1] // 2 + 1)
        for axis, n in zip(axes[:-1], lengths[:-1]):
            signal.transform(axis, n, inverse=False)
    elif kind == "IRFFT":
        for axis, n in zip(axes[:-1], lengths[:-1]):
            signal.transform(axis, n, inverse=True)
        signal.to_real_transform(axes[-1], lengths[-1])
    else:
        for axis, n in zip(axes, lengths):
            signal.transform(axis, n, inverse=inverse)
    return b.finish([signal.value(result.type.dtype)], [result])


def _check(op, kind, lengths) -> None:
    operand, result = op.operands[0].type, op.results[0].type
    if kind not in _KINDS:
        raise InvalidArgument(f"stablehlo.fft: fft_type {kind} is not one of {_KINDS}")
    if not 1 <= len(lengths) <= min(3, operand.rank):
        raise InvalidArgument(f"stablehlo.fft: fft_length {lengths} on an operand of rank "
                              f"{operand.rank} (1 to 3 trailing axes)")
    trailing = operand.shape[operand.rank - len(lengths):]
    expected_in = lengths[:-1] + (lengths[-1] // 2 + 1,) if kind == "IRFFT" else lengths
    expected_out = lengths[:-1] + (lengths[-1] // 2 + 1,) if kind == "RFFT" else lengths
    out_trailing = result.shape[result.rank - len(lengths):]
    real_in, real_out = kind == "RFFT", kind == "IRFFT"
    if (trailing != expected_in or out_trailing != expected_out
            or (operand.dtype.kind == "c") == real_in or (result.dtype.kind == "c") == real_out
            or real_dtype(operand.dtype) != real_dtype(result.dtype)):
        raise InvalidArgument(f"stablehlo.fft: {kind} with fft_length {lengths} does not "
                              f"match its types {operand} -> {result}")


class _Signal:
    """The signal being transformed: ``data`` (real, with a trailing component axis of size 2
    when complex) and ``order``, the original axis each data axis holds."""

    def __init__(self, b: Builder, precision, operand):
        self.b = b
        self.dtype = np.dtype(precision)
        self.order = list(range(operand.type.rank))
        if operand.type.dtype.kind == "c":
            parts = [b.reshape(part, (*operand.type.shape, 1))
                     for part in (b.real(operand), b.imag(operand))]
            self.data = b.concatenate(parts, operand.type.rank)
            self.complex = True
        else:
            self.data = operand
            self.complex = False

    # -- the result ------------------------------------------------------------------------
    def value(self, dtype):
        """The signal in original axis order, as ``dtype`` (complex, or real for IRFFT)."""
        b = self.b
        permutation = [self.order.index(axis) for axis in range(len(self.order))]
        if not self.complex:
            return b.transpose(self.data, permutation)
        data = b.transpose(self.data, [*permutation, len(self.order)])
        shape = data.type.shape[:-1]
        re, im = (b.reshape(b.slice_along(data, len(shape), c, c + 1), shape) for c in (0, 1))
        return b.complex(re, im)

    # -- one axis ----------------------------------------------------------------------------
    def transform(self, axis: int, n: int, *, inverse: bool, keep: int | None = None) -> None:
        """The DFT of length ``n`` along original axis ``axis`` (its result moves last),
        keeping the first ``keep`` outputs (RFFT)."""
        position = self.order.index(axis)
        data, _ = _dft(self.b, self.data, self.complex, position, n, inverse,
                       1.0 / n if inverse else 1.0, keep if keep is not None else n, self.dtype)
        self.data, self.complex = data, True
        self.order.pop(position)
        self.order.append(axis)

    def to_real_transform(self, axis: int, n: int) -> None:
        """IRFFT's last step: the real inverse transform of length ``n`` from the
        ``n // 2 + 1`` leading terms of a Hermitian spectrum along ``axis``."""
        b = self.b
        half = n // 2 + 1
        position = self.order.index(axis)
        weights = np.full(half, 2.0)
        weights[0] = 1.0
        if n % 2 == 0:
            weights[-1] = 1.0
        if n <= DENSE_MAX:
            k = np.arange(half)[:, None]
            j = np.arange(n)[None, :]
            matrix = weights[:, None] * np.exp(2j * np.pi * ((k * j) % n) / n) / n
            self.data = _dense(b, self.data, True, position, matrix, self.dtype, real_out=True)
        else:
            data = _scale_along(b, self.data, position, weights.astype(self.dtype))
            data = _pad_along(b, data, position, n - half)
            data, _ = _dft(b, data, True, position, n, True, 1.0 / n, n, self.dtype)
            last = data.type.rank - 1
            self.data = b.reshape(b.slice_along(data, last, 0, 1), data.type.shape[:-1])
        self.complex = False
        self.order.pop(position)
        self.order.append(axis)


# -- the algorithms (each returns data with the transformed axis last before the component) ---

def _dft(b, data, is_complex, position, n, inverse, scale, keep, dtype):
    """(data, True): the DFT of length ``n`` along ``position``, scaled, first ``keep``."""
    if n <= DENSE_MAX:
        return _dense(b, data, is_complex, position, _dft_matrix(n, inverse, scale)[:, :keep],
                      dtype), True
    radix = _radix(n)
    if radix is None:
        out = _bluestein(b, data, is_complex, position, n, inverse, scale, dtype)
    else:
        out = _mixed_radix(b, data, is_complex, position, n, radix, inverse, scale, dtype)
    if keep != n:
        out = b.slice_along(out, out.type.rank - 2, 0, keep)
    return out, True


def _dft_matrix(n: int, inverse: bool, scale: float) -> np.ndarray:
    """W[j, k] = scale * exp(-+2 pi i j k / n), exact indices (j k mod n) before the angle."""
    j = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    sign = 1.0 if inverse else -1.0
    return scale * np.exp(sign * 2j * np.pi * ((j * k) % n) / n)


def _dense(b, data, is_complex, position, matrix, dtype, real_out=False):
    """One dot_general of ``data`` (its axis ``position``, and the component axis when
    complex) with the complex ``matrix`` (rows: input index, columns: output index), the
    complex product spelt out as a real one."""
    mr, mi = matrix.real, matrix.imag
    rank = data.type.rank
    if is_complex:
        if real_out:   # Re((xr + i xi)(mr + i mi)) = xr mr - xi mi
            real = np.stack([mr, -mi], axis=1)                         # (n, 2, k)
        else:
            real = np.stack([np.stack([mr, mi], axis=-1),              # from xr
                             np.stack([-mi, mr], axis=-1)], axis=1)    # from xi: (n, 2, k, 2)
        contract = ((position, rank - 1), (0, 1))
    else:
        if real_out:
            raise AssertionError("a real-to-real DFT is not needed")
        real = np.stack([mr, mi], axis=-1)                             # (n, k, 2)
        contract = ((position,), (0,))
    real = real.astype(dtype)
    return b.dot(data, b.constant(real, dtype, real.shape), contract=contract)


def _radix(n: int) -> int | None:
    """The largest factor of ``n`` in [2, DENSE_MAX], or None."""
    for r in range(DENSE_MAX, 1, -1):
        if n % r == 0:
            return r
    return None


def _complex_multiply(b, data, constant, dims):
    """``data`` (complex, component axis last) times the complex ``constant`` whose axes are
    data axes ``dims``: x * (cr + i ci) = x cr + swap(x) (-ci, ci)."""
    shape = data.type.shape
    last = len(shape) - 1
    cr = np.stack([constant.real, constant.real], axis=-1).astype(data.type.dtype)
    ci = np.stack([-constant.imag, constant.imag], axis=-1).astype(data.type.dtype)
    scale = b.broadcast(b.constant(cr, cr.dtype, cr.shape), shape, (*dims, last))
    cross = b.broadcast(b.constant(ci, ci.dtype, ci.shape), shape, (*dims, last))
    swapped = b.concatenate([b.slice_along(data, last, 1, 2), b.slice_along(data, last, 0, 1)],
                            last)
    return b.add(b.multiply(data, scale), b.multiply(swapped, cross))


def _as_complex(b, data):
    """A real signal as a complex one (zero imaginary part)."""
    shape = (*data.type.shape, 1)
    return b.concatenate([b.reshape(data, shape), b.constant(0, data.type.dtype, shape)],
                         len(shape) - 1)


def _mixed_radix(b, data, is_complex, position, n, radix, inverse, scale, dtype):
    """n = r * m: x[m j1 + j2] -> X[k1 + r k2] = sum_j2 w_n^(j2 k1) w_m^(j2 k2)
    (sum_j1 x w_r^(j1 k1))."""
    m = n // radix
    shape = data.type.shape
    split = b.reshape(data, (*shape[:position], radix, m, *shape[position + 1:]))
    # Size-r DFTs over j1: k1 goes last (before the component axis); j2 stays at `position`.
    stage = _dense(b, split, is_complex, position, _dft_matrix(radix, inverse, scale), dtype)
    last = stage.type.rank - 2
    sign = 1.0 if inverse else -1.0
    j2 = np.arange(m)[:, None]
    k1 = np.arange(radix)[None, :]
    twiddles = np.exp(sign * 2j * np.pi * ((j2 * k1) % n) / n)
    stage = _complex_multiply(b, stage, twiddles, (position, last))
    # Size-m transforms over j2: k2 goes last, after k1.
    stage, _ = _dft(b, stage, True, position, m, inverse, 1.0, m, dtype)
    rank = stage.type.rank
    order = [*range(rank - 3), rank - 2, rank - 3, rank - 1]          # (k1, k2) -> (k2, k1)
    out = b.transpose(stage, order)
    return b.reshape(out, (*out.type.shape[:-3], n, 2))


def _smooth_at_least(n: int) -> int:
    """The smallest 5-smooth number >= n (transforms of it are all mixed radix)."""
    candidate = n
    while True:
        rest = candidate
        for p in (2, 3, 5):
            while rest % p == 0:
                rest //= p
        if rest == 1:
            return candidate
        candidate += 1


def _bluestein(b, data, is_complex, position, n, inverse, scale, dtype):
    """X_k = c_k sum_j (x_j c_j) conj(c_(k-j)), c_m = exp(-+ i pi m^2 / n): a circular
    convolution of length M >= 2n - 1 through two transforms of length M."""
    if not is_complex:
        data = _as_complex(b, data)
    size = _smooth_at_least(2 * n - 1)
    sign = 1.0 if inverse else -1.0
    m = np.arange(n)
    chirp = np.exp(sign * 1j * np.pi * ((m * m) % (2 * n)) / n)
    filter_ = np.zeros(size, complex)
    filter_[:n] = np.conj(chirp)
    filter_[size - n + 1:] = np.conj(chirp[1:][::-1])
    spectrum = np.fft.fft(filter_)
    weighted = _complex_multiply(b, data, chirp, (position,))
    padded = _pad_along(b, weighted, position, size - n)
    transformed, _ = _dft(b, padded, True, position, size, False, 1.0, size, dtype)
    last = transformed.type.rank - 2
    product = _complex_multiply(b, transformed, spectrum, (last,))
    convolved, _ = _dft(b, product, True, last, size, True, 1.0 / size, n, dtype)
    return _complex_multiply(b, convolved, scale * chirp, (convolved.type.rank - 2,))


def _pad_along(b, data, position, count):
    """``data`` with ``count`` zeros appended along ``position``."""
    if count == 0:
        return data
    shape = list(data.type.shape)
    shape[position] = count
    return b.concatenate([data, b.constant(0, data.type.dtype, shape)], position)


def _scale_along(b, data, position, weights):
    """``data`` times real ``weights`` along ``position`` (both components)."""
    weights = b.constant(weights, weights.dtype, weights.shape)
    return b.multiply(data, b.broadcast(weights, data.type.shape, (position,)))



EXPANSIONS = {"stablehlo.fft": expand_fft}
