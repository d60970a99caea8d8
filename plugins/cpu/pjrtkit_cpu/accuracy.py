"""Accuracy of the transcendental functions on each pjrtkit_cpu path and on XLA's CPU backend.

``python -m pjrtkit_cpu.accuracy [--samples N] [--only exp,log] [--dtypes float32]
[--markdown docs/accuracy.md] [--json P]`` (``make accuracy``) measures every function of
``FUNCTIONS`` per float dtype against a float64 reference, as the error in ulps of the target
dtype at the correctly rounded result (``pjrtkit.testing.ulps``), on each path:

- ``numpy``: the NumPy rule (the reference rule set, what runs with fusion and native loops
  off, and for every dtype the Numba paths do not cover);
- ``fused``: a fused Numba loop (the function on 2**14 elements or more, after an exact
  ``x * 1`` so the group has two ops); only where the op table emits the function vectorized;
- ``native``: the function inside a ``lax.fori_loop`` compiled as a native loop;
- ``xla``: XLA's CPU backend, in the same process.

Inputs: float32 takes ``--samples`` (default 1e6) values per function, half spread over the
bit patterns of its finite domain (every binade equally) and half uniform over the range
where it is mostly used; float16 and bfloat16 take every finite value of the domain (fewer
than 1e6: all there are). Domains stop where XLA's CPU backend flushes results to zero
(denormals), since that is a difference of semantics, not of accuracy. A path that does not
run (no Numba code for that dtype or op: the NumPy rule runs instead) is ``-``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable

import numpy as np

from pjrtkit.semantics import dtypes as D

F32 = D.FLOAT32
DTYPES = (F32, D.BFLOAT16, D.FLOAT16)
PATHS = ("numpy", "fused", "native", "xla")


@dataclasses.dataclass(frozen=True)
class Function:
    """``lax_name`` applied to inputs in ``domain`` (per operand: low, high), with the
    float64 reference ``exact``; ``typical`` is the range half the float32 samples come from."""

    name: str
    lax_name: str
    exact: Callable
    domain: tuple
    typical: tuple

    @property
    def arity(self) -> int:
        return len(self.domain)


def _erfinv(x):
    from scipy import special
    return special.erfinv(x)


def _erf(x):
    from scipy import special
    return special.erf(x)


def _logistic(x):
    from scipy import special
    return special.expit(x)


_BIG = 3.0e38
FUNCTIONS = (
    Function("exp", "exp", np.exp, ((-87.0, 88.7),), ((1.5, 2.5),)),
    Function("log", "log", np.log, ((1.2e-38, _BIG),), ((0.5, 2.0),)),
    Function("log1p", "log1p", np.log1p, ((-0.999, _BIG),), ((-0.5, 1.0),)),
    Function("expm1", "expm1", np.expm1, ((-87.0, 88.7),), ((-1.0, 1.0),)),
    Function("tanh", "tanh", np.tanh, ((-20.0, 20.0),), ((-3.0, 3.0),)),
    Function("logistic", "logistic", _logistic, ((-80.0, 80.0),), ((-6.0, 6.0),)),
    Function("sin", "sin", np.sin, ((-1e4, 1e4),), ((-4.0, 4.0),)),
    Function("cos", "cos", np.cos, ((-1e4, 1e4),), ((-4.0, 4.0),)),
    Function("tan", "tan", np.tan, ((-1e4, 1e4),), ((-1.5, 1.5),)),
    Function("sqrt", "sqrt", np.sqrt, ((0.0, _BIG),), ((0.0, 4.0),)),
    Function("rsqrt", "rsqrt", lambda x: 1 / np.sqrt(x), ((1.2e-38, _BIG),), ((0.1, 4.0),)),
    Function("cbrt", "cbrt", np.cbrt, ((-_BIG, _BIG),), ((-8.0, 8.0),)),
    Function("erf", "erf", _erf, ((-5.0, 5.0),), ((-2.0, 2.0),)),
    Function("erf_inv", "erf_inv", _erfinv, ((-0.9999, 0.9999),), ((-0.9, 0.9),)),
    Function("pow", "pow", np.power, ((1e-3, 1e3), (-10.0, 10.0)), ((0.5, 2.0), (-3.0, 3.0))),
    Function("atan2", "atan2", np.arctan2, ((-1e4, 1e4), (-1e4, 1e4)),
             ((-2.0, 2.0), (-2.0, 2.0))),
)


# -- inputs -------------------------------------------------------------------------------------

def _spread(rng, dtype, low, high, count):
    """``count`` values of ``dtype`` in [low, high], every binade about equally likely."""
    magnitude = max(abs(low), abs(high))
    tiny = smallest_measured(dtype)
    exponents = rng.uniform(np.log2(tiny), np.log2(magnitude), count)
    signs = np.where(rng.random(count) < 0.5, -1.0, 1.0) if low < 0 else 1.0
    # nothing near the denormals (see smallest_measured)
    values = signs * np.maximum(np.exp2(exponents) * rng.uniform(1, 2, count) / 1.5, tiny)
    if low >= 0 and low > tiny:
        values = np.abs(values)
    return np.clip(values, low, high).astype(dtype)


def _every_value(dtype, low, high):
    bits = np.arange(1 << (8 * dtype.itemsize), dtype=np.dtype(f"u{dtype.itemsize}"))
    values = bits.view(dtype).astype(np.float64)
    keep = (np.isfinite(values) & (values >= low) & (values <= high)
            & ((np.abs(values) >= smallest_measured(dtype)) | (values == 0)))
    return values[keep].astype(dtype)


def smallest_measured(dtype) -> float:
    """The smallest magnitude of inputs and results measured: 2**20 times the dtype's
    smallest normal. Below it XLA's CPU backend flushes denormal inputs, intermediates and
    results to zero (its threads run with denormals-are-zero and flush-to-zero), a difference
    of semantics that would swamp the table (millions of ulps), not one of accuracy."""
    return D.float_limits(F32)[1] * 2.0 ** 20  # float16 computes in float32 too


def inputs(function: Function, dtype, samples: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == F32:
        half = samples // 2
        return [np.concatenate([_spread(rng, dtype, lo, hi, half),
                                rng.uniform(tlo, thi, samples - half).astype(dtype)])
                for (lo, hi), (tlo, thi) in zip(function.domain, function.typical)]
    operands = [_every_value(dtype, lo, hi) for lo, hi in function.domain]
    if function.arity == 1:
        return operands
    # pairs: every value of the first operand against a random value of the second
    count = max(len(o) for o in operands)
    return [rng.choice(o, count) for o in operands]


def exact(function: Function, args) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(function.exact(*(np.asarray(a, np.float64) for a in args)),
                          np.float64)


# -- paths --------------------------------------------------------------------------------------

def _lax_function(function: Function):
    from jax import lax
    return getattr(lax, function.lax_name)


def run_xla(function, args):
    import jax
    device = jax.devices("cpu")[0]
    fn = jax.jit(_lax_function(function))
    return np.asarray(fn(*jax.device_put(args, device)))


def _plan_and_run(program, args, stats_key: str):
    """Run a plan until its Numba code is compiled; (result, whether that code ran)."""
    from pjrtkit.lowering.plan import build_plan

    from pjrtkit_cpu.fusion import cache
    from pjrtkit_cpu.fusion.kernel import STATS as FUSED_STATS
    from pjrtkit_cpu.loops.native import STATS as NATIVE_STATS
    from pjrtkit_cpu.lowering import RULES

    stats = FUSED_STATS if stats_key == "fused" else NATIVE_STATS
    plan = build_plan(program, RULES)
    with np.errstate(all="ignore"):
        plan(*args)
        cache.wait_all(timeout=600)
        before = stats[stats_key]
        result = plan(*args)
    return np.asarray(result[0]), stats[stats_key] > before


def run_numpy(function, args):
    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.testing.programs import lower_program

    from pjrtkit_cpu.lowering import RULES

    plan = build_plan(lower_program(_lax_function(function), *args), RULES)
    with np.errstate(all="ignore"):
        return np.asarray(plan(*args)[0])


def run_fused(function, args):
    from jax import lax

    from pjrtkit.testing.programs import lower_program

    from pjrtkit.stablehlo.ir import walk_ops

    from pjrtkit_cpu.fusion import FUSED_OP, fuse_program

    f = _lax_function(function)

    def chained(x, *rest):  # x * 1 is exact: the group has two ops
        return f(lax.mul(x, lax.full_like(x, 1)), *rest)

    program = fuse_program(lower_program(chained, *args))
    fused = {inner.name for op in walk_ops(program) if op.name == FUSED_OP
             for inner in op.regions[0].entry.ops}
    if not fused - _PLUMBING:
        return None  # the function itself stayed out of the fused loop
    result, ran = _plan_and_run(program, args, "fused")
    return result if ran else None


# Ops of the fused loop that are not the function: the exact multiply and its operand.
_PLUMBING = frozenset({"stablehlo.multiply", "stablehlo.constant", "stablehlo.broadcast_in_dim",
                       "stablehlo.return", "func.return"})


def run_native(function, args):
    import jax
    from jax import lax

    from pjrtkit.testing.programs import lower_program

    f = _lax_function(function)

    def looped(*xs):
        def body(i, carry):
            return f(*(lax.select(i >= 0, x, x) for x in xs))
        return lax.fori_loop(0, 2, body, jax.numpy.zeros_like(xs[0]))

    # A native loop holds at most loops.emitter.MAX_ELEMENTS per value: run it chunk by chunk.
    count = len(args[0])
    padded = [np.concatenate([a, np.repeat(a[:1], -count % _CHUNK)]) for a in args]
    program = lower_program(looped, *(a[:_CHUNK] for a in padded))
    results = []
    for start in range(0, len(padded[0]), _CHUNK):
        result, ran = _plan_and_run(program, [a[start:start + _CHUNK] for a in padded],
                                    "native")
        if not ran:
            return None
        results.append(result)
    return np.concatenate(results)[:count]


_CHUNK = 1 << 15


RUNNERS = {"numpy": run_numpy, "fused": run_fused, "native": run_native, "xla": run_xla}


def measure(function: Function, dtype, samples: int, paths=PATHS) -> dict:
    """{path: (max ulp error, mean ulp error) or None where the path does not run}."""
    from pjrtkit.testing.ulps import ulp_error

    args = inputs(function, dtype, samples)
    reference = exact(function, args)
    out = {}
    for path in paths:
        result = RUNNERS[path](function, args)
        if result is None:
            out[path] = None
            continue
        error = ulp_error(result, reference, dtype)
        # See smallest_measured; results beyond the dtype's range (float16 exp(88)) overflow.
        error[(np.abs(reference) < smallest_measured(dtype))
              | (np.abs(reference) > D.float_limits(dtype)[0])] = 0.0
        worst = int(np.argmax(error))
        out[path] = (float(error[worst]), float(np.mean(error)),
                     [float(a[worst]) for a in args])
    return out


# -- the table ----------------------------------------------------------------------------------

def markdown(rows, samples: int, seconds: float) -> str:
    lines = [
        "# Transcendental accuracy: pjrtkit_cpu paths and XLA's CPU backend",
        "",
        "Generated by `make accuracy` (`.venv/bin/python -m pjrtkit_cpu.accuracy --markdown "
        "docs/accuracy.md`); do not edit by hand. Error in ulps of the dtype at the correctly "
        "rounded result, against a float64 reference: the maximum (and mean) over "
        f"{samples:,} float32 inputs per function (half spread over every binade of the "
        "domain, half over the typical range), or every finite float16/bfloat16 value of the "
        "domain; inputs and results smaller than 2**20 times the dtype's smallest normal are "
        "left out, where XLA's CPU backend flushes denormals to zero, and so are results "
        "beyond the dtype's largest finite value. `-`: that path does not run for this dtype "
        "or op (the NumPy rule runs "
        f"instead). Measured in {seconds:.0f} s.",
        "",
        "| function | dtype | domain | NumPy rule | fused loop | native loop | XLA CPU | "
        "worst input (NumPy rule) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = []
        for path in PATHS:
            value = row["paths"][path]
            cells.append("-" if value is None else f"{value[0]:.3f} ({value[1]:.3f})")
        numpy_worst = row["paths"]["numpy"][2]
        domain = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in row["domain"])
        lines.append(f"| {row['function']} | {row['dtype']} | {domain} | " + " | ".join(cells)
                     + f" | {', '.join(f'{v:.9g}' for v in numpy_worst)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_cpu.accuracy",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--only", default="", help="comma-separated function names")
    parser.add_argument("--dtypes", default=",".join(d.name for d in DTYPES))
    parser.add_argument("--markdown", help="write the table to this file")
    parser.add_argument("--json", help="write the measurements to this file")
    options = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    jax.config.update("jax_enable_x64", True)

    names = set(filter(None, options.only.split(",")))
    start = time.time()
    rows = []
    for function in FUNCTIONS:
        if names and function.name not in names:
            continue
        for dtype_name in options.dtypes.split(","):
            dtype = D.by_name(dtype_name)
            paths = measure(function, dtype, options.samples)
            rows.append({"function": function.name, "dtype": dtype.name,
                         "domain": function.domain, "paths": paths})
            print(f"{function.name:9} {dtype.name:9} " + "  ".join(
                f"{p}={'-' if v is None else f'{v[0]:.3f}'}" for p, v in paths.items()),
                flush=True)
    seconds = time.time() - start
    if options.markdown:
        with open(options.markdown, "w") as f:
            f.write(markdown(rows, options.samples, seconds))
    if options.json:
        with open(options.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
