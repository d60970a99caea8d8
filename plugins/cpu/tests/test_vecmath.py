"""pjrtkit_cpu.vecmath: float32 transcendentals as vectorizable Numba code.

Each function runs in a Numba loop over float32 inputs spread over every exponent (a stride
through all 2**32 bit patterns: normals, denormals, zeros, infinities, NaNs) plus hand-picked
edges, and is compared (1) with the correctly rounded result (float64 NumPy rounded once) in
ulps, against the bound ``vecmath.MAX_ULP`` states, and (2) with XLA's CPU backend through JAX
with the shared float32 tolerance. A test also shows the ulp check rejects a slightly worse
polynomial, and another that the loops really are vector code.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit, types

from pjrtkit.testing.tolerances import assert_close

from pjrtkit_cpu import vecmath
from pjrtkit_cpu.loopnest import optable

EDGES = np.array([
    0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, 2.0,
    np.finfo(np.float32).max, -np.finfo(np.float32).max, np.finfo(np.float32).tiny,
    np.finfo(np.float32).smallest_subnormal, -np.finfo(np.float32).smallest_subnormal,
    1e-30, -1e-30, 1e-8, -1e-8, 3e-4, -3e-4, 0.34657359, -0.34657359, 0.625, -0.625,
    88.72283, 88.72284, 89.0, -87.33655, -103.2789, -103.97, -104.0, -150.0, 9.0, -9.0, 10.0,
    -0.9999999, -1.0000001, 0.70710677, 1.4142135, 0.29289323, -0.29289323,
    np.float32(1) + np.finfo(np.float32).eps, np.float32(1) - np.finfo(np.float32).epsneg,
], dtype=np.float32)


def _inputs() -> np.ndarray:
    patterns = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32)
    spread = patterns.view(np.float32)
    rng = np.random.default_rng(0)
    moderate = (rng.standard_normal(200_000) * rng.choice([0.01, 1, 10, 60], 200_000)
                ).astype(np.float32)
    return np.concatenate([EDGES, spread, moderate])


X = _inputs()

REFERENCES = {
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "tanh": np.tanh,
}


def _loop(fn):
    @njit(error_model="numpy")
    def run(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    return run


def _apply(fn, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    _loop(fn)(x, out)
    return out


def ulp_errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in float32 ulps of the correctly rounded result; 0 where both are the same
    infinity or both NaN, inf where exactly one is NaN or an infinity is missed."""
    with np.errstate(all="ignore"):
        rounded = exact.astype(np.float32)
        spacing = np.spacing(np.abs(rounded)).astype(np.float64)
        spacing[~np.isfinite(spacing)] = np.inf
        err = np.abs(got.astype(np.float64) - exact) / spacing
    both_nan = np.isnan(got) & np.isnan(exact)
    same_inf = np.isinf(rounded) & (got == rounded)
    err[both_nan | same_inf] = 0.0
    err[np.isnan(got) != np.isnan(exact)] = np.inf
    err[np.isinf(rounded) & (got != rounded) & ~np.isnan(exact)] = np.inf
    return err


def _exact(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # NaN inputs warn when widened
        x = x.astype(np.float64)
    if name == "log":  # denormals read as zero, as XLA's CPU backend does (see vecmath)
        x[np.abs(x) < np.finfo(np.float32).tiny] = 0.0
    with np.errstate(all="ignore"):
        return REFERENCES[name](x)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_error_within_stated_ulps(name):
    fn = getattr(vecmath, f"{name}_f32")
    got = _apply(fn, X)
    err = ulp_errors(got, _exact(name, X))
    worst = int(np.argmax(err))
    assert err[worst] <= vecmath.MAX_ULP[name], (
        f"{name}({X[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp "
        f"(bound {vecmath.MAX_ULP[name]})")


def test_logistic_matches_its_definition():
    # XLA (and the unfused kernel) compute 1 / (1 + exp(-x)); for x < -88.7 exp(-x) overflows
    # and the result is 0 where the exact value is a denormal, so compare with that formula.
    got = _apply(vecmath.logistic_f32, X)
    with np.errstate(all="ignore"):
        e = np.exp(-X.astype(np.float64))
        e[e > np.finfo(np.float32).max] = np.inf
        exact = 1.0 / (1.0 + e)
    assert ulp_errors(got, exact).max() <= vecmath.MAX_ULP["logistic"]


def test_special_values():
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    cases = {
        vecmath.exp_f32: [(inf, inf), (-inf, 0.0), (np.float32(100), inf), (-0.0, 1.0)],
        vecmath.log_f32: [(0.0, -inf), (-0.0, -inf), (inf, inf), (np.float32(-1), nan),
                          (-inf, nan), (np.float32(1e-40), -inf), (np.float32(-1e-40), -inf)],
        vecmath.log1p_f32: [(-1.0, -inf), (inf, inf), (np.float32(-2), nan), (-0.0, -0.0)],
        vecmath.expm1_f32: [(-inf, -1.0), (inf, inf), (-0.0, -0.0)],
        vecmath.tanh_f32: [(inf, 1.0), (-inf, -1.0), (-0.0, -0.0)],
        vecmath.logistic_f32: [(inf, 1.0), (-inf, 0.0)],
    }
    for fn, pairs in cases.items():
        x = np.array([p[0] for p in pairs] + [nan], np.float32)
        want = np.array([p[1] for p in pairs] + [nan], np.float32)
        got = _apply(fn, x)
        assert np.array_equal(got, want, equal_nan=True), (fn, x, got)
        # signed zeros too (a NaN's sign means nothing)
        signs = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[signs]), np.signbit(want[signs])), (fn, x, got)


JAX_FUNCTIONS = {
    "exp": jnp.exp, "log": jnp.log, "log1p": jnp.log1p, "expm1": jnp.expm1,
    "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
}


@pytest.mark.parametrize("name", sorted(JAX_FUNCTIONS))
def test_matches_xla_cpu(name):
    cpu = jax.devices("cpu")[0]
    expected = np.asarray(jax.jit(JAX_FUNCTIONS[name])(jax.device_put(X, cpu)))
    got = _apply(getattr(vecmath, f"{name}_f32"), X)
    assert_close(got, expected, what=f"vecmath {name} vs XLA")


def test_the_ulp_check_rejects_a_slightly_worse_polynomial():
    """exp with its degree-5 remainder polynomial cut to degree 4: still a decent exp (a few
    ulps off), which the bound must catch."""
    from pjrtkit_cpu.vecmath import (_E0, _E1, _E2, _E3, _E4, _EXP_CLAMP_HI, _EXP_CLAMP_LO,
                                     _LN2_HI, _LN2_LO, _LOG2E, _ONE, _SHIFTER, _SHIFTER_BITS,
                                     bits_of_f32, f32_of_bits, select)

    @njit(error_model="numpy")
    def worse_exp(x):
        xc = select(x < _EXP_CLAMP_HI, x, _EXP_CLAMP_HI)
        xc = select(xc > _EXP_CLAMP_LO, xc, _EXP_CLAMP_LO)
        k = xc * _LOG2E + _SHIFTER
        n_float = k - _SHIFTER
        r = (xc - n_float * _LN2_HI) - n_float * _LN2_LO
        p = _E0 + r * (_E1 + r * (_E2 + r * (_E3 + r * _E4)))
        y = _ONE + (r + r * r * p)
        n = bits_of_f32(k) - _SHIFTER_BITS
        half = n >> 1
        y = y * f32_of_bits((half + 127) << 23) * f32_of_bits((n - half + 127) << 23)
        return select(x != x, x, y)

    err = ulp_errors(_apply(worse_exp, X), _exact("exp", X))
    assert err.max() > vecmath.MAX_ULP["exp"]


@pytest.mark.parametrize("name", sorted(vecmath.FLOAT32_FUNCTIONS))
def test_loops_calling_them_are_vector_code(name):
    fn = vecmath.FLOAT32_FUNCTIONS[name]
    run = _loop(fn)
    signature = (types.float32[::1], types.float32[::1])
    run.compile(signature)
    asm = run.inspect_asm(signature)
    # packed single-precision arithmetic on vector registers, and no call left in the loop
    assert re.search(r"v(mul|add|fmadd\w*)ps\s+%[yz]mm", asm), f"{name}: no packed float math"


def test_codegen_table_names_these_functions():
    assert {op: fn.py_func.__name__ for op, fn in vecmath.FLOAT32_FUNCTIONS.items()} == \
        optable.FLOAT32_TRANSCENDENTALS



_BIT_FOR_BIT = """
import json, sys
import numpy as np
from numba import njit
from pjrtkit.reference.elementwise_numpy import numpy_kernel
from pjrtkit_cpu import vecmath
X = np.load(sys.argv[1])
report = {}
for op, fn in sorted(vecmath.FLOAT32_FUNCTIONS.items()):
    @njit(error_model="numpy", nogil=True, boundscheck=False, fastmath={"contract"})
    def run(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])
    out = np.empty_like(X)
    run(X, out)
    with np.errstate(all="ignore"):
        rendered = numpy_kernel(op, [np.float32], np.float32)(X)
    same = (rendered.view(np.uint32) == out.view(np.uint32)) | (np.isnan(rendered)
                                                                 & np.isnan(out))
    wrong = np.flatnonzero(~same)[:3]
    report[op] = [int((~same).sum()), X[wrong].tolist(), rendered[wrong].tolist(),
                  out[wrong].tolist()]
print(json.dumps(report))
"""


def test_fused_loops_compute_the_semantics_float32_functions_bit_for_bit(tmp_path):
    """The NumPy renderer and the elementwise VM compute these ops as the semantics' shared
    expressions (pjrtkit.semantics.float32_functions); fused loops call vecmath, compiled with
    fastmath "contract" (module.NJIT), so LLVM fuses the multiply-adds of the inlined code
    where the host has FMA. They must be the same bits, or a program's results change when its
    fused loop lands. In a fresh process: Numba reuses a callee's code across callers compiled
    with other fastmath flags (this module's plain loops), so only loops compiled as the fused
    loops are may run there."""
    import json
    import subprocess
    import sys

    np.save(tmp_path / "x.npy", X)
    done = subprocess.run([sys.executable, "-c", _BIT_FOR_BIT, str(tmp_path / "x.npy")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) == set(vecmath.FLOAT32_FUNCTIONS)
    wrong = {op: r for op, r in report.items() if r[0]}
    assert not wrong, f"ops whose rendered bits differ from the fused loop's ([count, at, " \
                      f"rendered, fused loop]): {wrong}"
