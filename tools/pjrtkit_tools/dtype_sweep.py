"""Every lax op over every dtype, on a backend and on XLA's CPU backend in one process.

``python -m pjrtkit_tools.dtype_sweep [--backend pjrtkit_cpu] [--modes jit,loop] [-k TEXT]
[--json P]`` runs each case (an op, a dtype) jitted on the backend and on XLA's ``cpu`` and
prints every mismatch, every error other than UNIMPLEMENTED, and the UNIMPLEMENTED ones
grouped by message; exit 1 on any mismatch or error. Mode ``jit`` runs the op as a program;
``loop`` runs it inside a ``lax.fori_loop`` (a backend's native loop path); ``big`` on 2**14
elements or more (a backend's fused loops). Cases XLA itself refuses are left out. The
backend's own settings (``PJRTKIT_CPU_FUSION=0``, ...) come from the environment.

Results are compared exactly for integers, bools and floats of 8 bits or fewer (they are
computed in a wider type and rounded once, so both backends must agree bit for bit, NaN
payloads aside), and within ``ULP_LIMITS`` ulps for wider floats and complex parts (the
transcendental approximations differ). ``CASES`` is also what the pytest module
``plugins/cpu/tests/test_dtype_sweep.py`` parametrises over.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import zlib
from collections import Counter
from collections.abc import Callable

import ml_dtypes
import numpy as np

from pjrtkit.semantics import dtypes as D
from pjrtkit.semantics.dtypes import is_complex, is_float, is_int
from pjrtkit.testing.ulps import ulp_error

BOOL = D.BOOL
NARROW_INTS = tuple(sorted(D.NARROW_INTS, key=str))
INTS = NARROW_INTS + tuple(sorted(D.INTS - D.NARROW_INTS, key=lambda d: (d.kind, d.itemsize)))
NARROW_FLOATS = tuple(f.dtype for f in D.TABLE if f.dtype in D.FLOAT8_AND_NARROWER)
FLOATS = NARROW_FLOATS + (D.FLOAT16, D.BFLOAT16, D.FLOAT32, D.FLOAT64)
COMPLEXES = (D.COMPLEX64, D.COMPLEX128)
ALL_DTYPES = (BOOL,) + INTS + FLOATS + COMPLEXES

# Allowed error of wider floats, in ulps of the result dtype, where both backends approximate.
ULP_LIMITS = {np.dtype(np.float16): 1, np.dtype(ml_dtypes.bfloat16): 1,
              np.dtype(np.float32): 4, np.dtype(np.float64): 4,
              np.dtype(np.complex64): 4, np.dtype(np.complex128): 4}
# Ops whose float results both backends approximate differently with larger error (special
# functions evaluated by long JAX-emitted polynomials and recurrences; reduction order).
LOOSE_OPS = {"lgamma": 64, "digamma": 64, "erf_inv": 16, "tan": 8, "reduce_sum": 64,
             "reduce_prod": 64, "cumsum": 64, "cumprod": 64, "dot": 64, "pow": 8,
             "acosh": 8, "asinh": 8, "atanh": 8, "asin": 8, "acos": 8, "atan": 8,
             "cosh": 8, "sinh": 8, "logsumexp": 8}


def kind_of(dtype) -> str:
    dtype = np.dtype(dtype)
    return ("bool" if dtype == BOOL else "int" if is_int(dtype) else
            "float" if is_float(dtype) else "complex")


@dataclasses.dataclass(frozen=True)
class Case:
    """One op: ``make(lax, jnp)`` gives the function of ``arity`` arrays, run for each dtype
    whose kind is in ``kinds`` (bool, int, float, complex)."""

    name: str
    arity: int
    kinds: frozenset
    make: Callable

    def dtypes(self):
        return [d for d in ALL_DTYPES if kind_of(d) in self.kinds]


def _lax_op(name):
    def make(lax, jnp):
        return getattr(lax, name)
    return make


def _case(name, arity, kinds, make):
    return Case(name, arity, frozenset(kinds.split()), make)


F, FC, NUM, ALL = "float", "float complex", "int float complex", "bool int float complex"
INT_BOOL = "bool int"

CASES = [
    *(_case(n, 1, FC, _lax_op(n)) for n in (
        "exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "sin", "cos", "tan",
        "sqrt", "rsqrt", "sinh", "cosh", "asinh", "acosh", "atanh", "asin", "acos", "atan")),
    *(_case(n, 1, F, _lax_op(n)) for n in (
        "cbrt", "floor", "ceil", "is_finite", "erf", "erfc", "erf_inv", "lgamma", "digamma")),
    _case("round_afz", 1, F, lambda lax, jnp: lambda x: lax.round(x, lax.RoundingMethod(0))),
    _case("round_even", 1, F, lambda lax, jnp: lambda x: lax.round(x, lax.RoundingMethod(1))),
    _case("abs", 1, NUM, lambda lax, jnp: lax.abs),
    _case("neg", 1, NUM, lambda lax, jnp: lax.neg),
    _case("sign", 1, NUM, lambda lax, jnp: lax.sign),
    _case("square", 1, NUM, lambda lax, jnp: lax.square),
    _case("integer_pow3", 1, NUM, lambda lax, jnp: lambda x: lax.integer_pow(x, 3)),
    _case("real", 1, "complex", lambda lax, jnp: lax.real),
    _case("imag", 1, "complex", lambda lax, jnp: lax.imag),
    _case("conj", 1, "complex", lambda lax, jnp: lax.conj),
    _case("not", 1, INT_BOOL, lambda lax, jnp: lax.bitwise_not),
    _case("population_count", 1, "int", lambda lax, jnp: lax.population_count),
    _case("clz", 1, "int", lambda lax, jnp: lax.clz),
    *(_case(n, 2, NUM, _lax_op(n)) for n in (
        "add", "sub", "mul", "div")),
    _case("rem", 2, "int float", lambda lax, jnp: lax.rem),
    _case("pow", 2, FC, lambda lax, jnp: lax.pow),
    _case("max", 2, "bool int float", lambda lax, jnp: lax.max),
    _case("min", 2, "bool int float", lambda lax, jnp: lax.min),
    _case("max_complex", 2, "complex", lambda lax, jnp: jnp.maximum),
    _case("atan2", 2, F, lambda lax, jnp: lax.atan2),
    _case("nextafter", 2, F, lambda lax, jnp: lax.nextafter),
    _case("complex", 2, F, lambda lax, jnp: lax.complex),
    *(_case(n, 2, INT_BOOL, _lax_op(n)) for n in (
        "bitwise_and", "bitwise_or", "bitwise_xor")),
    *(_case(n, 2, "int", _lax_op(n)) for n in (
        "shift_left", "shift_right_logical", "shift_right_arithmetic")),
    *(_case(n, 2, ALL, _lax_op(n)) for n in (
        "eq", "ne")),
    *(_case(n, 2, "bool int float", _lax_op(n)) for n in (
        "lt", "le", "gt", "ge")),
    _case("select", 2, ALL, lambda lax, jnp: lambda x, y: lax.select(
        jnp.arange(x.size).reshape(x.shape) % 3 == 0, x, y)),
    _case("clamp", 2, "int float", lambda lax, jnp: lambda x, y: lax.clamp(
        jnp.min(y), x, jnp.max(y))),
    _case("reduce_sum", 1, NUM, lambda lax, jnp: lambda x: lax.reduce_sum(x, (1,))),
    _case("reduce_prod", 1, NUM, lambda lax, jnp: lambda x: lax.reduce_prod(x, (0,))),
    _case("reduce_max", 1, "bool int float", lambda lax, jnp: lambda x: lax.reduce_max(x, (1,))),
    _case("reduce_min", 1, "bool int float", lambda lax, jnp: lambda x: lax.reduce_min(x, (0,))),
    _case("reduce_and", 1, INT_BOOL, lambda lax, jnp: lambda x: lax.reduce_and(x, (1,))),
    _case("reduce_or", 1, INT_BOOL, lambda lax, jnp: lambda x: lax.reduce_or(x, (1,))),
    _case("argmax", 1, "int float", lambda lax, jnp: lambda x: jnp.argmax(x, axis=1)),
    _case("argmin", 1, "int float", lambda lax, jnp: lambda x: jnp.argmin(x, axis=0)),
    _case("cumsum", 1, NUM, lambda lax, jnp: lambda x: lax.cumsum(x, 1)),
    _case("cumprod", 1, NUM, lambda lax, jnp: lambda x: lax.cumprod(x, 0)),
    _case("cummax", 1, "int float", lambda lax, jnp: lambda x: lax.cummax(x, 1)),
    _case("sort", 1, "bool int float", lambda lax, jnp: lambda x: lax.sort(x, dimension=1)),
    _case("sort_complex", 1, "complex", lambda lax, jnp: lambda x: jnp.sort(x, axis=1)),
    _case("dot", 2, NUM, lambda lax, jnp: lambda x, y: lax.dot(x, y.T)),
    _case("transpose", 1, ALL, lambda lax, jnp: lambda x: lax.transpose(x, (1, 0))),
    _case("reverse", 1, ALL, lambda lax, jnp: lambda x: lax.rev(x, (0,))),
    _case("concatenate", 2, ALL, lambda lax, jnp: lambda x, y: lax.concatenate([x, y], 1)),
    _case("pad", 1, ALL, lambda lax, jnp: lambda x: lax.pad(
        x, x[0, 0], ((1, 2, 1), (0, -1, 0)))),
    _case("broadcast", 1, ALL, lambda lax, jnp: lambda x: lax.broadcast_in_dim(
        x[0], (3,) + x.shape[1:], (1,))),
    _case("reshape", 1, ALL, lambda lax, jnp: lambda x: x.reshape(-1)),
    _case("slice", 1, ALL, lambda lax, jnp: lambda x: x[1:, ::2]),
    _case("dynamic_slice", 1, ALL, lambda lax, jnp: lambda x: lax.dynamic_slice(
        x, (jnp.int32(1), jnp.int32(2)), (2, 3))),
    _case("dynamic_update_slice", 2, ALL, lambda lax, jnp: lambda x, y: lax.dynamic_update_slice(
        x, y[:2, :3], (jnp.int32(1), jnp.int32(2)))),
    _case("gather", 1, ALL, lambda lax, jnp: lambda x: x[jnp.array([2, 0, 1, 2]) % x.shape[0]]),
    _case("scatter_add", 2, NUM, lambda lax, jnp: lambda x, y: x.at[
        jnp.array([0, 1, 0]) % x.shape[0]].add(y[:3])),
    _case("scatter_set", 2, ALL, lambda lax, jnp: lambda x, y: x.at[
        jnp.array([0, 1, 0]) % x.shape[0]].set(y[:3])),
    _case("full", 1, ALL, lambda lax, jnp: lambda x: jnp.full(x.shape, x[0, 1], x.dtype)),
    _case("iota", 1, "int float", lambda lax, jnp: lambda x: lax.iota(x.dtype, x.shape[1])),
    _case("reduce_precision", 1, "float", lambda lax, jnp: lambda x: lax.reduce_precision(
        x, exponent_bits=4, mantissa_bits=2)),
]
SUB_BYTE = NARROW_INTS + (np.dtype(ml_dtypes.float4_e2m1fn),)
# Cases that abort XLA's own CPU backend (jaxlib 0.10.2), so there is no reference to compare
# with: "Check failed: bit_offset != nullptr" in ir_array.cc for sub-byte concatenation.
XLA_ABORTS = {("concatenate", d) for d in SUB_BYTE}


def case_named(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


# -- inputs -------------------------------------------------------------------------------------

def inputs(case_name: str, dtype, arity: int, shape=(6, 8)) -> list[np.ndarray]:
    """Inputs that cover the dtype: every value of an 8-bit-or-narrower type where they fit
    (binary ops: every pair on a cycle of shifts), special float values, wide integer ranges,
    and for bit shifts amounts around the width. Seeded from the case name."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(zlib.crc32(f"{case_name}/{dtype.name}".encode()))
    size = int(np.prod(shape))

    def one(i):
        if dtype == BOOL:
            return rng.integers(0, 2, size).astype(bool)
        if is_int(dtype):
            if case_name.startswith("shift") and i == 1:
                width = 8 * dtype.itemsize if dtype not in NARROW_INTS else (
                    2 if dtype.name.endswith("2") else 4)
                return rng.integers(-1, width + 2, size).astype(dtype)
            if dtype in NARROW_INTS or dtype.itemsize == 1:
                info = ml_dtypes.iinfo(dtype)
                values = np.arange(int(info.min), int(info.max) + 1)
                return rng.choice(values, size).astype(dtype)
            info = np.iinfo(dtype)
            big = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
            small = rng.integers(max(info.min, -20), 20, size).astype(dtype)
            return np.where(rng.random(size) < 0.5, big, small)
        if is_complex(dtype):
            part = np.dtype(np.float32 if dtype.itemsize == 8 else np.float64)
            real, imag = _float_values(rng, part, size), _float_values(rng, part, size)
            return (real.astype(dtype) + 1j * imag.astype(dtype)).astype(dtype)
        return _float_values(rng, dtype, size)

    return [one(i).reshape(shape) for i in range(arity)]


def _float_values(rng, dtype, size):
    if dtype.itemsize == 1:  # every value (and more in a larger array)
        bits = rng.integers(0, 256, size).astype(np.uint8)
        if dtype == np.dtype(ml_dtypes.float4_e2m1fn):
            bits &= 0x0F
        return bits.view(dtype)
    scale = rng.choice([1e-3, 0.1, 1.0, 3.0, 30.0], size)
    values = rng.standard_normal(size) * scale
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, 2.0, 0.75])
    values[:len(special)] = special
    return values.astype(dtype)


# -- running and comparing ----------------------------------------------------------------------

def compare(ours: np.ndarray, ref: np.ndarray, op_name: str) -> str | None:
    """None when ``ours`` matches XLA's ``ref``; else what differs."""
    if ours.dtype != ref.dtype or ours.shape != ref.shape:
        return f"got {ours.dtype}{list(ours.shape)}, XLA {ref.dtype}{list(ref.shape)}"
    dtype = ref.dtype
    if is_complex(dtype):
        return (compare(ours.real.copy(), ref.real.copy(), op_name)
                or compare(ours.imag.copy(), ref.imag.copy(), op_name))
    if not is_float(dtype):
        bad = ours != ref
        if bad.any():
            i = np.argwhere(bad)[0]
            return f"{bad.sum()} of {bad.size} differ, first at {i.tolist()}: " \
                   f"{ours[tuple(i)]!r} vs XLA {ref[tuple(i)]!r}"
        return None
    limit = 0 if dtype.itemsize == 1 else ULP_LIMITS[dtype] * LOOSE_OPS.get(op_name, 1)
    with np.errstate(invalid="ignore"):
        wide_ref = ref.astype(np.float64)
        error = ulp_error(ours, wide_ref, dtype)
        difference = np.abs(ours.astype(np.float64) - wide_ref)
    # Tiny absolute differences near zero (cancellation in a different order) are not errors.
    tiny = difference <= 4 * float(ml_dtypes.finfo(dtype).eps) * (
        1 + np.nanmax(np.abs(np.where(np.isfinite(wide_ref), wide_ref, 0)), initial=0)) \
        if limit else np.zeros(ref.shape, bool)
    bad = (error > limit) & ~tiny
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        return (f"{bad.sum()} of {bad.size} beyond {limit} ulp, max {np.max(error[bad]):.3g} ulp,"
                f" first at {list(i)}: {ours[i]!r} vs XLA {ref[i]!r}")
    return None


def _convert_make(target):
    return lambda lax, jnp: lambda x: lax.convert_element_type(x, target)


def convert_cases() -> list[tuple[Case, np.dtype]]:
    """(case, source dtype) for every conversion between two dtypes of ``ALL_DTYPES``."""
    return [(Case(f"convert_to_{target.name}", 1, frozenset(), _convert_make(target)), source)
            for source in ALL_DTYPES for target in ALL_DTYPES if source != target]


def all_cases(keyword: str = "") -> list[tuple[Case, np.dtype]]:
    """Every (case, dtype) pair, the conversions included, whose id contains ``keyword``."""
    pairs = [(c, d) for c in CASES for d in c.dtypes() if (c.name, d) not in XLA_ABORTS]
    pairs += convert_cases()
    return [(c, d) for c, d in pairs if keyword in f"{c.name}-{d.name}"]


def _in_loop(fn):
    import jax
    from jax import lax

    def looped(*args):
        shapes = jax.eval_shape(fn, *args)
        init = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), shapes)
        # The step depends on the counter, so the loop cannot be folded away.
        return lax.fori_loop(0, 2, lambda i, carry: fn(*(
            lax.select(i >= 0, a, a) for a in args)), init)

    return looped


def _chained(fn):
    from jax import lax

    def chained(x, *rest):  # one more elementwise op, exact for every dtype: x * 1
        return fn(lax.mul(x, lax.full_like(x, 1)), *rest)

    return chained


MODES = ("jit", "loop", "big")


def program(case: Case, mode: str) -> Callable:
    import jax
    from jax import lax
    from jax import numpy as jnp

    fn = case.make(lax, jnp)
    if mode == "loop":
        fn = _in_loop(fn)
    elif mode == "big":
        fn = _chained(fn)
    return jax.jit(fn)


def run_case(case: Case, dtype, mode: str, backend: str) -> tuple[str, str]:
    """(outcome, detail): outcome is ok, mismatch, error, unimplemented or n/a (XLA refuses
    the case too)."""
    import jax

    shape = (128, 128) if mode == "big" else (6, 8)
    args = inputs(case.name, dtype, case.arity, shape)
    fn = program(case, mode)
    try:
        cpu = jax.devices("cpu")[0]
        ref = [np.asarray(r) for r in jax.tree.leaves(fn(*jax.device_put(args, cpu)))]
    except Exception as error:  # noqa: BLE001 - XLA refusing the case leaves it out
        return "n/a", str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    try:
        device = jax.devices(backend)[0]
        ours = [np.asarray(r) for r in jax.tree.leaves(fn(*jax.device_put(args, device)))]
    except Exception as error:  # noqa: BLE001 - every failure is reported
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        return ("unimplemented" if text.startswith("UNIMPLEMENTED") else "error"), text[:300]
    for i, (a, b) in enumerate(zip(ours, ref)):
        problem = compare(a, b, case.name)
        if problem:
            return "mismatch", f"output {i}: {problem}"
    return "ok", ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_tools.dtype_sweep",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="pjrtkit_cpu")
    parser.add_argument("--modes", default="jit", help="comma-separated: " + ",".join(MODES))
    parser.add_argument("-k", default="", help="only cases whose op-dtype id contains this")
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="name each case on stderr before running it")
    options = parser.parse_args(argv)

    import jax
    jax.config.update("jax_enable_x64", True)

    records = []
    for mode in options.modes.split(","):
        for case, dtype in all_cases(options.k):
            if options.verbose:
                print(f"... {mode} {case.name} {dtype.name}", file=sys.stderr, flush=True)
            outcome, detail = run_case(case, dtype, mode, options.backend)
            records.append({"mode": mode, "op": case.name, "dtype": dtype.name,
                            "outcome": outcome, "detail": detail})
            if outcome in ("mismatch", "error"):
                print(f"{outcome.upper():9} {mode:4} {case.name:24} {dtype.name:20} {detail}",
                      flush=True)
    counts = Counter(r["outcome"] for r in records)
    causes = Counter(r["detail"] for r in records if r["outcome"] == "unimplemented")
    for cause, n in causes.most_common(40):
        print(f"{n:5}  {cause[:160]}")
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    if options.json:
        with open(options.json, "w") as f:
            json.dump(records, f, indent=1)
    return 1 if counts["mismatch"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
