"""A fused loop Numba refuses falls back quietly and correctly: the unfused kernels give XLA's
answer, and the process prints one warning line per distinct op chain, never a traceback.

The refusal is Numba's own typing error, the one real programs met (``Cannot unify float32 and
array(float32, 1d, C)``): the scenario makes the fused-group driver emit a local that is a
scalar and then an array, in a fresh interpreter (the warning is once per process).
"""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    from pjrtkit_cpu.fusion import cache, codegen

    if BREAK:
        generate = codegen.generate
        def broken(shape, inputs, body, results, input_locals, reductions=None):
            # a local that is a scalar or the whole array: Numba cannot type it
            body = ["bad = in0[0]", "if k < 0:", "    bad = in0",
                    f"{input_locals[0]} = {input_locals[0]} + bad", *body]
            return generate(shape, inputs, body, results, input_locals, reductions)
        codegen.generate = broken

    dev, cpu = jax.devices("pjrtkit_cpu")[0], jax.devices("cpu")[0]
    x = np.linspace(-2, 2, 128 * 160, dtype=np.float32).reshape(128, 160)
    programs = [lambda a: jnp.tanh(a) * 3 + 1, lambda a: jnp.exp(a) - a * a]
    worst = 0.0
    for f in programs:
        g = jax.jit(f)
        for _ in range(3):  # the same chain again: still one warning
            g(jax.device_put(x, dev)).block_until_ready()
            cache.wait_all(300)
        ours, ref = np.asarray(g(jax.device_put(x, dev))), np.asarray(g(jax.device_put(x, cpu)))
        worst = max(worst, float(np.max(np.abs(ours - ref) / (1 + np.abs(ref)))))
    from pjrtkit_cpu.fusion.kernel import STATS
    print("WORST", worst)
    print("FUSED", STATS["fused"])
""")


def _run(broken: bool):
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.update(JAX_PLATFORMS="pjrtkit_cpu,cpu", PJRTKIT_CPU_FUSION="1")
    return subprocess.run([sys.executable, "-c", f"BREAK = {broken}\n" + SCRIPT],
                          capture_output=True, text=True, env=env, timeout=600)


def _report(out) -> dict:
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def test_a_loop_numba_refuses_warns_once_per_chain_without_a_traceback():
    out = _run(broken=True)
    assert out.returncode == 0, out.stderr[-3000:]
    report = _report(out)
    assert float(report["WORST"]) <= 1e-5, report
    assert int(report["FUSED"]) == 0, report  # nothing ran fused: every loop failed
    warnings = [line for line in out.stderr.splitlines() if "pjrtkit_cpu: compiling" in line]
    assert len(warnings) == 2, out.stderr[-3000:]  # two chains, each warned once
    assert all("Cannot unify" in line or "TypingError" in line for line in warnings), warnings
    assert any("tanh, multiply, add" in line for line in warnings), warnings
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_the_same_chains_fuse_and_match_xla():
    out = _run(broken=False)
    assert out.returncode == 0, out.stderr[-3000:]
    report = _report(out)
    assert float(report["WORST"]) <= 1e-5, report
    assert int(report["FUSED"]) > 0, report
    assert "pjrtkit_cpu: compiling" not in out.stderr, out.stderr[-3000:]
