"""``stablehlo.fft``: FFT, IFFT, RFFT and IRFFT over the trailing ``len(fft_length)`` axes.

SciPy's pocketfft keeps single precision (complex64 in, complex64 out; float32 -> complex64
for RFFT), which is what XLA returns; NumPy's would compute in double and need a cast. The
kernel writes the result dtype the program declares.
"""
from __future__ import annotations

import numpy as np

from pjrtkit.semantics.dtypes import COMPLEXES, FLOAT32, FLOAT64

from pjrtkit_cpu.lowering.registry import RULES

_COMPLEX = COMPLEXES
_REAL = frozenset({FLOAT32, FLOAT64})

# fft_type -> (operand dtypes it takes, the scipy.fft function)
_TRANSFORMS = {
    "FFT": (_COMPLEX, "fftn"),
    "IFFT": (_COMPLEX, "ifftn"),
    "RFFT": (_REAL, "rfftn"),
    "IRFFT": (_COMPLEX, "irfftn"),
}


@RULES.register("stablehlo.fft")
def lower_fft(op, ctx):
    fft_type = str(op.attributes.get("fft_type"))
    lengths = tuple(int(n) for n in op.attributes.get("fft_length", ()))
    operand, result = op.operands[0].type, op.results[0].type
    if fft_type not in _TRANSFORMS:
        raise ctx.unimplemented(op, f"fft_type {fft_type}")
    dtypes, name = _TRANSFORMS[fft_type]
    if operand.dtype not in dtypes:
        raise ctx.unimplemented(op, f"{fft_type} of {operand.dtype.name}; it takes "
                                    f"{', '.join(sorted(d.name for d in dtypes))}")
    rank = len(lengths)
    if not 1 <= rank <= 3 or rank > len(operand.shape):
        raise ctx.unimplemented(op, f"fft_length {lengths} on an operand of rank "
                                    f"{len(operand.shape)} (1 to 3 trailing axes)")
    axes = tuple(range(len(operand.shape) - rank, len(operand.shape)))
    import scipy.fft

    transform = getattr(scipy.fft, name)
    # The real transforms need the signal's lengths; the complex ones transform what they get.
    sizes = lengths if fft_type in ("RFFT", "IRFFT") else None
    shape, dtype = result.shape, result.dtype

    def kernel(x):
        if x.size == 0 or 0 in lengths:
            return (np.zeros(shape, dtype),)
        return (np.asarray(transform(x, s=sizes, axes=axes), dtype=dtype),)

    return kernel
