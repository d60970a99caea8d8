"""pl.pallas_call on pjrtkit_cuda / pjrtkit_rocm: JAX lowers it for our platforms through the
plugins' lowering rule (jax_pallas) to the Triton custom call; its Triton IR compiles ahead of
time to cubin (sm_80, sm_90) and hsaco (gfx90a, gfx942) with the real Triton, no GPU needed;
under emulation running it is a clear UNIMPLEMENTED, and interpret=True still runs.

Two child processes: JAX fixes its platforms once, and Triton either interprets (emulation)
or compiles in one process (triton_setup)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pjrtkit.jax_compat import installed_versions, pallas_triton_supported

LOWER_AND_RUN_EMULATED = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

def kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + jnp.exp(y_ref[...]) * 2

def call(interpret):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                          grid=(2,), in_specs=[spec, spec], out_specs=spec, interpret=interpret,
                          compiler_params=plt.CompilerParams(num_warps=4))

x = np.linspace(-1, 1, 16 * 128, dtype=np.float32).reshape(16, 128)
y = x[::-1].copy()
out = {}
for platform in ("pjrtkit_cuda", "pjrtkit_rocm"):
    lowered = jax.jit(call(False)).trace(x, y).lower(lowering_platforms=(platform,))
    with open(f"{sys.argv[1]}/{platform}.mlir", "w") as f:
        f.write(lowered.as_text())
    device = jax.devices(platform)[0]
    try:
        jax.block_until_ready(jax.jit(call(False))(*jax.device_put((x, y), device)))
        out[platform] = "ran"
    except Exception as exc:
        out[platform] = f"{type(exc).__name__}: {exc}"
    got = np.asarray(jax.jit(call(True))(*jax.device_put((x, y), device)))
    np.testing.assert_allclose(got, x + np.exp(y) * 2, rtol=1e-6)
print(json.dumps(out))
"""

COMPILE_AHEAD_OF_TIME = r"""
import json, sys
from pjrtkit.stablehlo.ir import walk_ops
from pjrtkit.stablehlo.loader import load_program
from pjrtkit_gpu.triton_setup import import_triton
from pjrtkit_gpu.triton_ir import PALLAS_TRITON_TARGET, compile_triton_ir, kernel_from_backend_config

triton, _ = import_triton(interpret=False)
rows = []
for platform, targets in (("pjrtkit_cuda", ("sm_80", "sm_90")), ("pjrtkit_rocm", ("gfx90a", "gfx942"))):
    program = load_program(open(f"{sys.argv[1]}/{platform}.mlir").read())
    calls = [op for op in walk_ops(program) if op.name == "stablehlo.custom_call"]
    assert [op.attributes["call_target_name"] for op in calls] == [PALLAS_TRITON_TARGET], calls
    kernel = kernel_from_backend_config(calls[0].attributes["mhlo.backend_config"])
    for target in targets:
        compiled = compile_triton_ir(kernel, target)
        binary = compiled.asm["cubin" if target.startswith("sm") else "hsaco"]
        rows.append({"platform": platform, "target": target, "bytes": len(binary),
                     "name": compiled.metadata.name, "grid": kernel.grid,
                     "num_warps": compiled.metadata.num_warps, "triton": triton.__version__})
print(json.dumps(rows))
"""


# Two child processes, one compiling with Triton for four targets: about 4 minutes.
@pytest.mark.long
@pytest.mark.skipif(not pallas_triton_supported(),
                    reason=f"jax {installed_versions()['jax']}: its Pallas Triton lowering is "
                           "not compiled by the GPU plugins (test_pallas_call_on_a_jax_whose_...)")
def test_pallas_call_lowers_for_our_platforms_compiles_ahead_of_time_and_is_unimplemented_emulated(
        tmp_path):
    env = dict(os.environ, PJRTKIT_GPU_EMULATE="1",
               JAX_PLATFORMS="pjrtkit_cuda,pjrtkit_rocm,cpu")
    run = subprocess.run([sys.executable, "-c", LOWER_AND_RUN_EMULATED, str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    emulated = json.loads(run.stdout.strip().splitlines()[-1])
    for platform in ("pjrtkit_cuda", "pjrtkit_rocm"):
        message = emulated[platform]
        assert "UNIMPLEMENTED" in message and "Pallas Triton kernel" in message, message
        assert "Triton's interpreter cannot run" in message and "float32" in message, message

    env = {k: v for k, v in os.environ.items() if k not in ("PJRTKIT_GPU_EMULATE",
                                                             "TRITON_INTERPRET", "JAX_PLATFORMS")}
    run = subprocess.run([sys.executable, "-c", COMPILE_AHEAD_OF_TIME, str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    assert [r["target"] for r in rows] == ["sm_80", "sm_90", "gfx90a", "gfx942"]
    for row in rows:
        assert row["bytes"] > 1000 and row["name"] == "kernel", row
        assert row["grid"] == [2, 1, 1] and row["num_warps"] == 4, row


LOWER_ON_A_NEWER_JAX = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl

def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2

def call(interpret):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          interpret=interpret)

x = np.linspace(-1, 1, 8 * 128, dtype=np.float32).reshape(8, 128)
out = {}
for platform in ("pjrtkit_cuda", "pjrtkit_rocm"):
    try:
        jax.jit(call(False)).trace(x).lower(lowering_platforms=(platform,))
        out[platform] = "lowered"
    except Exception as exc:
        out[platform] = f"{type(exc).__name__}: {exc}"
    got = np.asarray(jax.jit(call(True))(jax.device_put(x, jax.devices(platform)[0])))
    np.testing.assert_allclose(got, x * 2)
print(json.dumps(out))
"""


@pytest.mark.skipif(pallas_triton_supported(),
                    reason=f"jax {installed_versions()['jax']}: Pallas Triton kernels compile "
                           "(test_pallas_call_lowers_for_our_platforms_...)")
def test_pallas_call_on_a_jax_whose_triton_lowering_is_not_compiled_says_so():
    """On a jax whose Pallas Triton lowering the plugins do not compile, lowering a kernel for
    pjrtkit_cuda / pjrtkit_rocm fails naming the jax version and what does run; interpret=True
    runs."""
    env = dict(os.environ, PJRTKIT_GPU_EMULATE="1",
               JAX_PLATFORMS="pjrtkit_cuda,pjrtkit_rocm,cpu")
    run = subprocess.run([sys.executable, "-c", LOWER_ON_A_NEWER_JAX], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    version = installed_versions()["jax"]
    for platform in ("pjrtkit_cuda", "pjrtkit_rocm"):
        message = result[platform]
        assert message.startswith("NotImplementedError"), message
        assert f"{platform}: pl.pallas_call" in message and f"jax {version}" in message, message
        assert "interpret=True" in message, message


def _triton_call(backend_config: str) -> str:
    from pjrtkit_gpu.triton_ir import PALLAS_TRITON_TARGET  # after emulated_driver(): Triton

    return ("func.func public @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
            f"  %0 = stablehlo.custom_call @{PALLAS_TRITON_TARGET}(%a) {backend_config}: "
            "(tensor<2x3xf32>) -> tensor<2x3xf32>\n  return %0 : tensor<2x3xf32>\n}\n")


FIELDS = 'name = "k", num_warps = 4 : i32, num_stages = 1 : i32, grid_x = 1 : i32, ' \
         'grid_y = 1 : i32, grid_z = 1 : i32'


@pytest.mark.parametrize("backend_config, says", [
    ("", "without a dictionary backend_config"),
    ('{mhlo.backend_config = {name = "k"}}', "unreadable backend_config (KeyError"),
    # not Triton bytecode: parsed in the isolated parser, never in this process
    ('{mhlo.backend_config = {ir = "ML\\EFR\\00\\FF\\FF\\FF\\FF\\01garbage", ' + FIELDS + '}}',
     "does not parse"),
])
def test_a_malformed_triton_call_is_invalid_argument(backend_config, says):
    from pjrtkit.errors import InvalidArgument
    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.stablehlo.loader import load_program

    from gpu_support import emulated_driver

    driver = emulated_driver()  # first: it makes Triton interpret
    from pjrtkit_gpu.lowering import registry_for

    program = load_program(_triton_call(backend_config))
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        build_plan(program, registry_for(driver, 0, "pjrtkit_cuda"))
