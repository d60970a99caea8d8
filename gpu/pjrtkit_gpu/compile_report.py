"""The compile report: every kernel the GPU lowering can emit, for each dtype it supports, at a
representative shape, compiled ahead of time by Triton for every target (sm_80, sm_90, sm_100,
gfx90a, gfx942, gfx1100), with the binary's size. No GPU needed. Exit status 1 if any compile
fails.

    python -m pjrtkit_gpu.compile_report [--targets sm_90,gfx942] [--only strided_copy,...]
        [--dtypes float32,...] [--jobs N] [--json P] [--markdown P]

Kernels (the lowering's, made the way its rules make them):
- ``strided_copy`` (transpose, broadcast, slice, reverse, pad, concatenate) per storage type;
- ``iota`` per numeric dtype; ``batched_matmul`` per dot_general dtype pair it takes;
- ``elementwise``: per dtype, one generated kernel holding the expression of every elementwise
  op the table has for that dtype (each op's code as a fused chain would contain it), and per
  source dtype one holding its conversions to every dtype;
- ``row_reduce`` per (reduction body, dtype);
- ``sort_rows`` and ``merge_runs`` (the merge sort's tile and merge kernels) per dtype with
  jnp.sort's comparator (NaN last, total order) and once with argsort's two operands;
  ``sequential_reduce`` per dtype with argmax's (value, index) body; ``reduce_window`` per
  dtype with a two-operand body (its region inlined); ``ordered_scatter`` per dtype with
  ``.at[].mul``'s combiner: the regions come from the real JAX programs.
It runs in a process of its own: Triton compiles here, it does not interpret (triton_setup).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

TARGET_NAMES = ("sm_80", "sm_90", "sm_100", "gfx90a", "gfx942", "gfx1100")
SHAPE = (64, 64)


def _value(dtype, shape=SHAPE):
    from pjrtkit.stablehlo.ir import TensorType, fresh_value

    return fresh_value(TensorType(tuple(shape), dtype))


def _elementwise_ops(dtype):
    """Ops of every table entry on ``dtype`` (those it lacks are left out), with inputs."""
    from pjrtkit.stablehlo.ir import Op

    from pjrtkit.semantics import ops as semantics_ops

    from pjrtkit_gpu import dtypes as D
    from pjrtkit_gpu.elementwise_table import OPS, NoKernel, statements

    x, y, z = _value(dtype), _value(dtype), _value(dtype)
    p = _value(D.BOOL)
    ops, names = [], []
    for name in sorted(OPS):
        if name == "stablehlo.convert":
            continue
        operands = {"stablehlo.select": (p, x, y), "stablehlo.clamp": (x, y, z)}.get(name)
        if operands is None:
            operands = (x, y, z)[:semantics_ops.traits(name).arity]
        result_dtype = D.BOOL if name in ("stablehlo.compare", "stablehlo.is_finite") else dtype
        attributes = {"stablehlo.compare": {"comparison_direction": "LT"},
                      "stablehlo.reduce_precision": {"exponent_bits": 5, "mantissa_bits": 10},
                      }.get(name, {})
        op = Op(name, operands, (_value(result_dtype),), attributes)
        try:
            statements(op, ["a"] * len(operands), "r")
        except NoKernel:
            continue
        ops.append(op)
        names.append(name.split(".")[-1])
    return [p, x, y, z], ops, names


def _convert_ops(dtype):
    from pjrtkit.stablehlo.ir import Op

    from pjrtkit_gpu import dtypes as D

    x = _value(dtype)
    return [x], [Op("stablehlo.convert", (x,), (_value(target),), {})
                 for target in D.SUPPORTED if target != dtype], \
        [f"to {t.name}" for t in D.SUPPORTED if t != dtype]


def kernel_cases(only=None):
    """(kernel name, dtype text, shape text, the jit function, signature, constexprs, what)."""
    from pjrtkit_gpu import autotune, codegen, dtypes as D, kernels
    from pjrtkit_gpu.lowering.elementwise import chain_source
    from pjrtkit_gpu.lowering.reduce import (COLUMNS_PER_STEP, ROWS_PER_PROGRAM, REDUCTION_BODIES,
                                             reduction_kernel)

    cases = []
    index = {f"s{i}": "i64" for i in range(6)} | {f"a{i}": "i64" for i in range(6)} | \
        {f"b{i}": "i64" for i in range(6)}
    for storage in dict.fromkeys(D.storage_type(d) for d in D.SUPPORTED):
        cases.append(("strided_copy", storage, "64x64 (any rank <= 6)", kernels.strided_copy,
                      {"src": f"*{storage}", "dst": f"*{storage}", "n": "i64", **index,
                       "src_base": "i64", "dst_base": "i64", "BLOCK": "constexpr"},
                      {"BLOCK": kernels.ELEMENTWISE_BLOCK}, "transpose/broadcast/slice/pad"))
    for d in D.SUPPORTED:
        if d == D.BOOL:
            continue
        cases.append(("iota", d.name, "64x64", kernels.iota,
                      {"out": f"*{D.storage_type(d)}", "n": "i64", "stride": "i64",
                       "size": "i64", "IS_FLOAT": "constexpr", "BLOCK": "constexpr"},
                      {"IS_FLOAT": D.is_float(d), "BLOCK": kernels.ELEMENTWISE_BLOCK}, "iota"))
    matmuls = [(d, d, True) for d in (D.FLOAT16, D.BFLOAT16, D.FLOAT32)]
    matmuls += [(D.BFLOAT16, D.FLOAT32, True), (D.FLOAT16, D.FLOAT32, True)]
    matmuls += [(d, d, False) for d in (D.FLOAT64, *D.INTEGERS)]
    for a, c, use_dot in matmuls:
        bm, bn, bk = ((autotune.DEFAULTS[autotune.MATMUL].constexprs[t] for t in ("BM", "BN", "BK"))
                      if use_dot else kernels.MATMUL_TILES_BROADCAST)
        cases.append(("batched_matmul", f"{a.name}->{c.name}", "1x128x128x128",
                      kernels.batched_matmul,
                      {"a": f"*{D.storage_type(a)}", "b": f"*{D.storage_type(a)}",
                       "c": f"*{D.storage_type(c)}", "M": "i64", "N": "i64", "K": "i64",
                       "a_batch": "i64", "a_major": "i64", "b_batch": "i64", "b_major": "i64",
                       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
                       "USE_DOT": "constexpr", "IEEE": "constexpr", "WIDEN": "constexpr",
                       "A_T": "constexpr", "B_T": "constexpr"},
                      {"BM": bm, "BN": bn, "BK": bk, "USE_DOT": use_dot,
                       "IEEE": a == D.FLOAT32, "WIDEN": False, "A_T": False, "B_T": False},
                      "dot_general"))
    for d in D.SUPPORTED:
        for make, label in ((_elementwise_ops, "elementwise"), (_convert_ops, "convert")):
            inputs, ops, names = make(d)
            if not ops:
                continue
            used = {v.id for op in ops for v in op.operands}
            inputs = [v for v in inputs if v.id in used]
            outputs = [op.results[0] for op in ops]
            source = chain_source(ops, inputs, outputs)
            kernel = codegen.load_kernel(source, "elementwise")
            signature = {f"in{i}": f"*{D.storage_type(v.type.dtype)}" for i, v in enumerate(inputs)}
            signature |= {f"out{i}": f"*{D.storage_type(v.type.dtype)}"
                          for i, v in enumerate(outputs)}
            signature |= {"n": "i64", "BLOCK": "constexpr"}
            cases.append((label, d.name, "64x64", kernel, signature,
                          {"BLOCK": kernels.ELEMENTWISE_BLOCK}, ", ".join(names)))
    for body in REDUCTION_BODIES:
        for d in D.SUPPORTED:
            if D.is_float(d) and body in ("stablehlo.and", "stablehlo.or", "stablehlo.xor"):
                continue
            kernel = reduction_kernel(body, d)
            storage = D.storage_type(d)
            cases.append(("row_reduce", d.name, "64x64 -> 64", kernel,
                          {"x": f"*{storage}", "init": f"*{storage}", "out": f"*{storage}",
                           "M": "i64", "K": "i64", "BM": "constexpr", "BK": "constexpr",
                           "TRANSPOSED": "constexpr"},
                          {"BM": ROWS_PER_PROGRAM, "BK": COLUMNS_PER_STEP, "TRANSPOSED": False},
                          f"reduce({body.split('.')[-1]})"))
    if not only or only & {"sort_rows", "merge_runs", "sequential_reduce", "reduce_window",
                           "ordered_scatter"}:
        cases += _region_cases()
    if only:
        cases = [c for c in cases if c[0] in only]
    return cases


def _ops_of(fn, x, name):
    """The ``name`` ops of the real JAX program ``fn(x)``, fused as the plugins compile it,
    with the values their regions read from outside."""
    import jax

    from pjrtkit.stablehlo.ir import free_values, walk_ops
    from pjrtkit.testing.programs import lower_program

    from pjrtkit_gpu.fusion import fuse_elementwise

    with jax.enable_x64(True):
        program = fuse_elementwise(lower_program(fn, x))
    return [(op, free_values(op)) for op in walk_ops(program) if op.name == name]


def _region_cases():
    """Kernels with an inlined region, made from the regions JAX really emits: ``sort_rows``
    for jnp.sort per dtype and for argsort, ``sequential_reduce`` for argmax per dtype."""
    import jax.numpy as jnp
    import numpy as np

    from pjrtkit_gpu import dtypes as D
    from pjrtkit_gpu.lowering.reduce import SEQUENTIAL_ROWS_PER_PROGRAM, sequential_reduction_kernel
    from pjrtkit_gpu.lowering.sort import MERGE_BLOCK, SORT_TILE, sort_kernels

    def pointers(prefix, values):
        return {f"{prefix}{k}": f"*{D.storage_type(v.type.dtype)}" for k, v in enumerate(values)}

    cases = []
    programs = [(d.name, "jnp.sort", jnp.sort, d) for d in D.SUPPORTED]
    programs.append(("float32, int64", "jnp.argsort", jnp.argsort, D.FLOAT32))
    for label, what, fn, d in programs:
        for op, captures in _ops_of(fn, np.zeros(SHAPE, d), "stablehlo.sort"):
            tiles, merges = sort_kernels(op.regions[0], [v.type.dtype for v in op.operands],
                                         captures)
            operands = {**pointers("in", op.operands), **pointers("out", op.results),
                        **pointers("cap", captures), "L": "i64", "NB": "i64"}
            cases.append(("sort_rows", label, "64x64 along 64", tiles,
                          {**operands, "BI": "constexpr", "BJ": "constexpr"},
                          {"BI": SORT_TILE, "BJ": SORT_TILE}, what))
            cases.append(("merge_runs", label, "64x64 along 64", merges,
                          {**operands, "W": "i64", "STEPS": "i64", "B": "constexpr"},
                          {"B": MERGE_BLOCK}, what))
    for d in D.SUPPORTED:
        if d == D.BOOL:
            continue
        for op, captures in _ops_of(lambda x: jnp.argmax(x, axis=-1), np.zeros(SHAPE, d),
                                    "stablehlo.reduce"):
            n = len(op.operands) // 2
            kernel = sequential_reduction_kernel(
                op.regions[0], [v.type.dtype for v in op.operands[:n]], captures)
            signature = {**pointers("x", op.operands[:n]), **pointers("init", op.operands[n:]),
                         **pointers("out", op.results), **pointers("cap", captures),
                         "M": "i64", "K": "i64", "BM": "constexpr"}
            cases.append(("sequential_reduce", f"{d.name}, int64", "64x64 -> 64", kernel,
                          signature, {"BM": SEQUENTIAL_ROWS_PER_PROGRAM}, "jnp.argmax"))
    cases += _window_and_scatter_cases(pointers)
    return cases


def _pair_window(x):
    import jax

    return jax.lax.reduce_window((x, x), (x[0, 0], x[0, 0]),
                                 lambda p, q: (jax.numpy.maximum(p[0], q[0]),
                                               jax.numpy.minimum(p[1], q[1])),
                                 (3, 3), (1, 1), "SAME")


def _window_and_scatter_cases(pointers):
    """``reduce_window`` with its region inlined (a two-operand max/min fold, per dtype) and
    ``ordered_scatter`` (``.at[].mul``, a combiner without an atomic, per dtype), from the
    real JAX programs."""
    import numpy as np

    from pjrtkit_gpu import dtypes as D
    from pjrtkit_gpu.lowering.indexing import ordered_scatter_kernel
    from pjrtkit_gpu.lowering.windowed import region_window_kernel

    cases = []
    indices = np.array([[1], [3], [1]], np.int32)
    for d in D.SUPPORTED:
        for op, captures in _ops_of(_pair_window, np.zeros(SHAPE, d), "stablehlo.reduce_window"):
            signature = {**pointers("in", op.operands), **pointers("out", op.results),
                         **pointers("cap", captures), "n": "i64", "BLOCK": "constexpr"}
            cases.append(("reduce_window", d.name, "64x64, 3x3 SAME", region_window_kernel(
                op, None, captures), signature, {"BLOCK": 1024}, "(max, min) pair fold"))
        if d == D.BOOL:
            continue

        def scatter_mul(x):
            return x.at[indices[:, 0]].mul(x[:3])

        for op, captures in _ops_of(scatter_mul, np.zeros(SHAPE, d), "stablehlo.scatter"):
            kernel, _, _ = ordered_scatter_kernel(op, None, captures)
            operand, idx, upd = op.operands
            signature = {"idx": f"*{D.storage_type(idx.type.dtype)}",
                         "upd0": f"*{D.storage_type(upd.type.dtype)}",
                         "out0": f"*{D.storage_type(operand.type.dtype)}",
                         **pointers("cap", captures), "n": "i64", "BLOCK": "constexpr"}
            cases.append(("ordered_scatter", d.name, "64x64, 3 rows", kernel, signature,
                          {"BLOCK": 64}, ".at[].mul"))
    return cases


_CASES: list = []


def _prepare(only) -> None:
    from pjrtkit_gpu.triton_setup import import_triton

    import_triton(interpret=False)
    _CASES[:] = kernel_cases(only)


def _compile(task):
    """One (case index, target): the report's row."""
    from pjrtkit_gpu.drivers.compiled_kernels import compile_kernel
    from pjrtkit_gpu.targets import BINARY, TARGETS

    index, target = task
    name, dtype, shape, kernel, signature, constexprs, what = _CASES[index]
    t0 = time.monotonic()
    try:
        compiled = compile_kernel(kernel, signature, constexprs, target)
        size, error = len(compiled.asm[BINARY[TARGETS[target][0]]]), None
    except Exception as exc:  # noqa: BLE001 - every failure is reported, then exit 1
        size, error = None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return {"kernel": name, "dtype": dtype, "shape": shape, "target": target,
            "binary_bytes": size, "seconds": round(time.monotonic() - t0, 2), "ops": what,
            "error": error}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_gpu.compile_report",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(TARGET_NAMES))
    parser.add_argument("--only", default="", help="kernel names, comma-separated")
    parser.add_argument("--dtypes", default="", help="only these dtypes (comma-separated; a "
                        "kernel's dtype text must contain one)")
    parser.add_argument("--jobs", type=int, default=1, help="compiles in parallel processes")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)

    from pjrtkit_gpu.targets import TARGETS

    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(TARGETS)}")
    only = {k for k in args.only.split(",") if k}
    wanted_dtypes = [d for d in args.dtypes.split(",") if d]
    started = time.monotonic()
    _prepare(only)
    tasks = [(i, t) for i, case in enumerate(_CASES) for t in targets
             if not wanted_dtypes or any(d in case[1] for d in wanted_dtypes)]
    if args.jobs > 1:
        import concurrent.futures
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # a fresh Triton import per worker
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context,
                                                    initializer=_prepare,
                                                    initargs=(only,)) as pool:
            results = pool.map(_compile, tasks)
            rows = _printed(results)
    else:
        rows = _printed(map(_compile, tasks))
    failures = sum(r["error"] is not None for r in rows)
    summary = {"kernels": len({(r["kernel"], r["dtype"]) for r in rows}), "targets": targets,
               "compiles": len(rows),
               "failures": failures, "seconds": round(time.monotonic() - started, 1)}
    print(f"{summary['compiles']} compiles ({summary['kernels']} kernels x {len(targets)} "
          f"targets), {failures} failed, {summary['seconds']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(_markdown(rows, targets, summary))
    return 1 if failures else 0


def _printed(results) -> list[dict]:
    rows = []
    for r in results:
        status = f"{r['binary_bytes']} bytes" if r["error"] is None else f"FAILED {r['error']}"
        print(f"{r['kernel']:<15} {r['dtype']:<22} {r['target']:<8} {status}", flush=True)
        rows.append(r)
    return rows


def _markdown(rows, targets, summary) -> str:
    lines = ["# GPU kernels compiled ahead of time (binary bytes per target)", "",
             f"Generated by `python -m pjrtkit_gpu.compile_report`: {summary['compiles']} "
             f"compiles, {summary['failures']} failed.", "",
             "| kernel | dtype | shape | " + " | ".join(targets) + " | ops |",
             "|---|---|---|" + "---|" * len(targets) + "---|"]
    grouped: dict[tuple, dict] = {}
    for r in rows:
        key = (r["kernel"], r["dtype"], r["shape"], r["ops"])
        grouped.setdefault(key, {})[r["target"]] = (
            str(r["binary_bytes"]) if r["error"] is None else "FAILED")
    for (kernel, dtype, shape, ops), sizes in grouped.items():
        lines.append(f"| {kernel} | {dtype} | {shape} | "
                     + " | ".join(sizes.get(t, "") for t in targets) + f" | {ops[:80]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
