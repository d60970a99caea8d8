"""Every lax op of the dtype sweep (``pjrtkit_tools.dtype_sweep``) on pjrtkit_cpu vs XLA's CPU.

Each case runs on the pjrtkit_cpu device and on XLA's ``cpu`` device in this process, as a
program and inside a ``lax.fori_loop`` (the native-loop path), and must match
(``dtype_sweep.compare``: bit for bit for integers and 8-bit floats, within a few ulps for
wider floats) or fail at compile time with UNIMPLEMENTED naming the op and the dtype. To stay
fast, each op runs over a rotating sample of the dtypes of each kind (every dtype is covered
by some op; ``_sampled_cases``), the conversions over every source and a rotating target;
``python -m pjrtkit_tools.dtype_sweep`` runs all of them.

Known differences are listed in ``KNOWN`` with their measured cause, and run as strict xfails.
"""
import os

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "pjrtkit_cpu,cpu")

from pjrtkit_tools import dtype_sweep as S  # noqa: E402

_KINDS = {"bool": (S.BOOL,), "int": S.INTS, "float": S.FLOATS, "complex": S.COMPLEXES}
_ALWAYS = {np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.complex64), S.BOOL}


_PLANNED_AROUND = {"complex": np.dtype(np.complex64), "float": S.NARROW_FLOATS[1],
                   "int": S.NARROW_INTS[1]}


def _sampled_cases():
    """(case, dtype, mode): each op over one rotating dtype of each kind it takes, as a
    program; every third op also over float32/int32 inside a fori_loop, every sixth over
complex64/float8_e4m3fn/int4 there (types the Numba paths leave out); every dtype converted
    to a rotating target."""
    picks = []
    for i, case in enumerate(S.CASES):
        for kind in sorted(case.kinds):
            dtypes = [d for d in _KINDS[kind] if (case.name, d) not in S.XLA_ABORTS]
            picks.append((case, dtypes[i % len(dtypes)], "jit"))
            if i % 3 == 0 and kind in ("int", "float"):
                wide = np.dtype(np.float32 if kind == "float" else np.int32)
                picks.append((case, wide, "loop"))
            if i % 6 == 0 and kind in _PLANNED_AROUND:
                # no Numba code for these: the loop must stay interpreted and still be right
                picks.append((case, _PLANNED_AROUND[kind], "loop"))
    converts = S.convert_cases()
    for i, source in enumerate(S.ALL_DTYPES):
        targets = [c for c, d in converts if d == source]
        picks.append((targets[(i * 7) % len(targets)], source, "jit"))
    return picks


# (op, dtype name) -> why pjrtkit_cpu differs from XLA's CPU backend there: each one measured
# (unary ops over every value of the type, reductions over random inputs), none guessed. A
# pair that is not here matched XLA when measured; an entry here that starts to match fails
# the test (strict xfail), so the list cannot go stale silently.
_EXCESS = ("XLA evaluates JAX's decomposition in float32 without rounding between ops (excess "
           "precision, denormals flushed); pjrtkit_cpu rounds to the type after every op")
_E8M0_SMALLEST = "2**-127 (a float32 denormal)"
KNOWN = {
    **{("erf", d.name): "jaxlib's CHLO->StableHLO legalization (run by the core's loader) "
                         "rejects erf on float8/float4: INVALID_ARGUMENT instead of a result"
       for d in S.NARROW_FLOATS},
    ("exp2", "float8_e8m0fnu"): f"exp2({_E8M0_SMALLEST}): pjrtkit_cpu NaN, XLA 1.0; {_EXCESS}",
    ("atan", "float8_e8m0fnu"): f"atan({_E8M0_SMALLEST}): pjrtkit_cpu NaN, XLA 2**-127; "
                                f"{_EXCESS}",
    ("tan", "float8_e8m0fnu"): f"tan({_E8M0_SMALLEST}): pjrtkit_cpu NaN, XLA 2**-127; {_EXCESS}",
    ("sinh", "float8_e8m0fnu"): f"sinh({_E8M0_SMALLEST}): pjrtkit_cpu 2**-127, XLA NaN; "
                                f"{_EXCESS}",
    ("erf_inv", "float8_e8m0fnu"): "erf_inv(2**-127) and erf_inv(2**-126): pjrtkit_cpu the "
                                   f"input, XLA NaN; {_EXCESS}",
    ("lgamma", "float8_e8m0fnu"): "lgamma(2**-127): pjrtkit_cpu 64, XLA NaN; lgamma(2): "
                                  f"pjrtkit_cpu 2**-21, XLA NaN; {_EXCESS}",
    ("asinh", "float8_e3m4"): "asinh(+-3.875) and 7 other value pairs: pjrtkit_cpu +-1.5625, "
                              f"XLA +-2.0 (exact: 2.06); {_EXCESS}",
    ("acos", "float4_e2m1fn"): "acos(x) for |x| > 1 (NaN, which float4_e2m1fn cannot hold): "
                               "pjrtkit_cpu +0.0, XLA -0.0",
    **{(op, d.name): "XLA's CPU backend sums and multiplies float8 values in an order and with "
                     "roundings pjrtkit_cpu does not reproduce (float16 accumulation matches "
                     "XLA on 256-element rows, not on every shape); float4 matches"
       for op in ("reduce_sum", "reduce_prod", "cumsum", "cumprod") for d in S.NARROW_FLOATS
       if d.name != "float4_e2m1fn"
       and not (op in ("reduce_sum", "cumsum") and d.name == "float8_e8m0fnu")},
    ("pow", "complex128"): "complex power of large magnitudes: XLA's exp(b log a) and NumPy's "
                           "cpow differ by up to ~80 ulp (1e56)",
    ("pow", "complex64"): "complex power of large magnitudes: XLA's exp(b log a) and NumPy's "
                          "cpow differ by tens of ulps",
    **{(f"convert_to_{t}", "float4_e2m1fn"): "XLA converts float4's largest value, +-6, to the "
                                             "integer type's extreme (as if infinite); "
                                             "pjrtkit_cpu gives +-6"
       for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")},
}


def _id(pick):
    case, dtype, mode = pick
    return f"{case.name}-{dtype.name}-{mode}"


_PICKS = _sampled_cases()


@pytest.mark.parametrize("pick", _PICKS, ids=[_id(p) for p in _PICKS])
def test_matches_xla(pick, request):
    import jax
    jax.config.update("jax_enable_x64", True)
    case, dtype, mode = pick
    why = KNOWN.get((case.name, dtype.name))
    if why:
        request.applymarker(pytest.mark.xfail(reason=why, strict=True))
    outcome, detail = S.run_case(case, dtype, mode, "pjrtkit_cpu")
    if outcome == "unimplemented":
        # Allowed, but only as UNIMPLEMENTED at compile time naming the op and the dtype.
        assert dtype.name in detail, detail
        return
    assert outcome in ("ok", "n/a"), f"{outcome}: {detail}"
