"""Pallas Triton kernels on pjrtkit_cuda against XLA, in one process (the device check's
``pallas`` stage; its own process because JAX fixes its platforms once).

    python -m pjrtkit_tools.gpu_device_check.pallas_check --reference cuda

Two kernels written for Triton (``pl.pallas_call`` with ``pallas.triton.CompilerParams``): an
elementwise one (``x + exp(y) * 2`` over a grid of two blocks) and a blocked matmul (``jnp.dot``
of 64x128 by 128x64 blocks, float32 accumulation). Each runs compiled on pjrtkit_cuda and on
XLA's ``--reference`` platform (on ``cpu``, XLA has no Triton: ``interpret=True`` there), and
interpreted (``interpret=True``) on pjrtkit_cuda. Prints one JSON line: per kernel what ran,
what raised, and the largest difference from the reference. Exit 0 when every compiled run
on pjrtkit_cuda matched, 1 otherwise (under emulation the compiled run is UNIMPLEMENTED by
design: reported, exit 1).
"""
from __future__ import annotations

import argparse
import json
import sys


def kernels():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plt

    def add_exp(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + jnp.exp(y_ref[...]) * 2

    def elementwise(interpret):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_exp, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                              grid=(2,), in_specs=[spec, spec], out_specs=spec,
                              interpret=interpret,
                              compiler_params=plt.CompilerParams(num_warps=4))

    def dot(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def matmul(interpret):
        return pl.pallas_call(
            dot, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32), grid=(4, 4),
            in_specs=[pl.BlockSpec((64, 128), lambda i, j: (i, 0)),
                      pl.BlockSpec((128, 64), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((64, 64), lambda i, j: (i, j)), interpret=interpret,
            compiler_params=plt.CompilerParams(num_warps=4, num_stages=2))

    rng = np.random.default_rng(0)
    x = np.linspace(-1, 1, 16 * 128, dtype=np.float32).reshape(16, 128)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = (rng.standard_normal((128, 256)) / 16).astype(np.float32)
    return {"elementwise": (elementwise, (x, x[::-1].copy()), 1e-5),
            # Triton's tl.dot on float32 may take TF32 on either side: a TF32-sized tolerance
            "matmul": (matmul, (a, b), 2e-2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pjrtkit_cuda")
    parser.add_argument("--reference", default="cuda")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    jax.config.update("jax_platforms", f"{args.backend},{args.reference}")
    tested, reference = jax.devices(args.backend)[0], jax.devices(args.reference)[0]
    report, ok = {"backend": str(tested), "reference": str(reference)}, True
    for name, (make, inputs, tolerance) in kernels().items():
        row = {}
        want = None
        try:
            compiled_there = args.reference != "cpu"
            want = np.asarray(jax.jit(make(not compiled_there))(
                *jax.device_put(inputs, reference)))
            row["reference"] = "compiled" if compiled_there else "interpret=True"
        except Exception as exc:  # noqa: BLE001 - reported
            row["reference"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        for mode, interpret in (("compiled", False), ("interpret", True)):
            try:
                got = np.asarray(jax.jit(make(interpret))(*jax.device_put(inputs, tested)))
                diff = None if want is None else float(np.max(np.abs(got - want)))
                row[mode] = {"ran": True, "max_abs_diff": diff,
                             "match": diff is not None and diff <= tolerance
                             * max(1.0, float(np.max(np.abs(want))))}
            except Exception as exc:  # noqa: BLE001 - reported
                row[mode] = {"ran": False, "error": f"{type(exc).__name__}: {str(exc)[:600]}"}
        ok = ok and row["compiled"].get("match", False)
        report[name] = row
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
