"""The fused-kernel caches stay bounded under a stream of distinct programs (issue 13).

Every program below fuses (at least 2**14 elements) and has a new shape, so each needs a new
Numba kernel (a new constant alone does not: constants are kernel arguments, see
test_fusion_constants.py), the case where Numba's never-freed machine code would grow the
process without end. Run in a fresh interpreter, with small bounds, so the counts are this test's alone.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

PROGRAMS = 12
LIMIT = 6
KEPT = 4

SCRIPT = textwrap.dedent(f"""
    import gc, json
    import numpy as np, jax, jax.numpy as jnp
    from pjrtkit_cpu.fusion import cache, groups

    cache.KERNELS_KEPT = {KEPT}
    dev, cpu = jax.devices("pjrtkit_cpu")[0], jax.devices("cpu")[0]
    worst = 0.0
    for i in range({PROGRAMS}):
        x = np.linspace(-2, 2, 128 * (128 + i), dtype=np.float32).reshape(128, 128 + i)
        f = jax.jit(lambda a, k=float(i) + 0.5: jnp.tanh(a) * k + 1)
        f(jax.device_put(x, dev)).block_until_ready()
        cache.wait_all(120)  # the next call runs the compiled kernel, if there is one
        ours = np.asarray(f(jax.device_put(x, dev)))
        ref = np.asarray(f(jax.device_put(x, cpu)))
        worst = max(worst, float(np.max(np.abs(ours - ref))))
        del f
    gc.collect()
    print(json.dumps({{"sizes": cache.cache_sizes(), "worst": worst}}))
""")


def test_distinct_programs_compile_at_most_the_limit_and_keep_at_most_the_table():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.update(JAX_PLATFORMS="pjrtkit_cpu,cpu", PJRTKIT_CPU_FUSED_KERNEL_LIMIT=str(LIMIT),
               PJRTKIT_CPU_FUSION="1")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    sizes = report["sizes"]
    assert sizes["fused_compiles_started"] == LIMIT, sizes
    assert sizes["fused_compiles_pending"] == 0, sizes
    assert sizes["fused_kernels"] <= KEPT and sizes["fused_modules"] <= KEPT, sizes
    # Past the limit the groups run unfused, still with XLA's answers.
    assert report["worst"] <= 1e-5, report
    assert out.stderr.count(f"{LIMIT} fused kernels compiled in this process") == 1, out.stderr


SPLAT_PROGRAM = """
func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<2.5> : tensor<4xf32>
  %0 = stablehlo.multiply %x, %c : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def test_the_splat_cache_forgets_a_constant_when_its_program_dies():
    # It used to keep every constant array it had seen, for the life of the process.
    import gc

    from pjrtkit.stablehlo.ir import walk_ops
    from pjrtkit.stablehlo.loader import load_program
    from pjrtkit_cpu.fusion import groups

    before = groups.splat_cache_entries()
    program = load_program(SPLAT_PROGRAM)
    constant = next(op for op in walk_ops(program) if op.name == "stablehlo.constant")
    assert float(groups.splat_value(constant)) == 2.5
    assert float(groups.splat_value(constant)) == 2.5  # answered from the cache
    assert groups.splat_cache_entries() == before + 1
    del program, constant
    gc.collect()
    assert groups.splat_cache_entries() == before


def test_pruning_the_disk_cache_deletes_the_oldest_old_sources_and_their_cache_files(tmp_path):
    from pjrtkit_cpu.fusion import cache

    pycache = tmp_path / "__pycache__"
    pycache.mkdir()
    now = time.time()
    for i in range(6):
        source = tmp_path / f"k_{i:024x}.py"
        source.write_text("# kernel\n")
        (pycache / f"{source.stem}.kernel-3.py311.nbi").write_text("index")
        (pycache / f"{source.stem}.cpython-311.pyc").write_text("bytecode")
        age = 7200 if i < 4 else 10  # four old sources, two fresh ones
        os.utime(source, (now - age + i, now - age + i))
    (tmp_path / "unrelated.txt").write_text("kept")

    # Keep 3: the three oldest go, but only those older than the minimum age (all three are).
    assert cache.prune_disk(tmp_path, keep=3, min_age_s=3600) == 3
    left = sorted(p.name for p in tmp_path.glob("k_*.py"))
    assert left == [f"k_{i:024x}.py" for i in (3, 4, 5)]
    assert sorted({p.name.split(".")[0] for p in pycache.iterdir()}) == [p[:-3] for p in left]
    assert (tmp_path / "unrelated.txt").exists()
    # Keep 1: only one more is old enough; fresh sources are never deleted.
    assert cache.prune_disk(tmp_path, keep=1, min_age_s=3600) == 1
    assert sorted(p.name for p in tmp_path.glob("k_*.py")) == [f"k_{i:024x}.py" for i in (4, 5)]


RETRY_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np, jax, jax.numpy as jnp
    from jax import lax
    from pjrtkit_cpu.fusion import cache, kernel
    from pjrtkit_cpu.loops import native

    jax.config.update("jax_enable_x64", True)
    dev, cpu = jax.devices("pjrtkit_cpu")[0], jax.devices("cpu")[0]
    x = np.linspace(-2, 2, 256 * 256, dtype=np.float32).reshape(256, 256)
    w = np.linspace(-1, 1, 256 * 256, dtype=np.float32).reshape(256, 256) / 256
    v = np.linspace(-1, 1, 64, dtype=np.float32)

    def groups(a, w):  # two fused groups around a dot: not a whole-program kernel
        return jnp.exp(jnp.tanh(a) * 1.5 + 1.0) @ w - 2.0

    def loop(a):
        return lax.fori_loop(0, 50, lambda i, c: jnp.sin(c) * 0.9 + 0.05, a)

    def fma64(a, b, c):  # under the fusion threshold: the float64 multiply-add loop
        return a * b + c

    programs = {"groups": (jax.jit(groups), (x, w)), "loop": (jax.jit(loop), (v,)),
                "fma64": (jax.jit(fma64), tuple(np.linspace(0.1, 1.7, 8) + k for k in range(3)))}

    def run(name):
        f, args = programs[name]
        return np.asarray(f(*[jax.device_put(a, dev) for a in args]))

    def counts():
        return {"fused": kernel.STATS["fused"], "native": native.STATS["native"],
                "started": cache.cache_sizes()["fused_compiles_started"]}

    report = {}
    limit, cache.PENDING_LIMIT = cache.PENDING_LIMIT, 0  # every compile finds the queue full
    for name in programs:
        run(name)
    report["full"] = counts()
    report["fma64"] = run("fma64").tolist()
    cache.PENDING_LIMIT = limit  # room again: the next call of each kernel asks again
    for name in programs:
        run(name)
    cache.wait_all(300)
    before = counts()
    ours = {name: run(name) for name in programs}
    after = counts()
    report["added"] = {k: after[k] - before[k] for k in after}
    report["retried"] = before
    report["worst"] = {}
    for name, (f, args) in programs.items():
        ref = np.asarray(f(*[jax.device_put(a, cpu) for a in args]))
        report["worst"][name] = float(np.max(np.abs(ours[name] - ref) / (1 + np.abs(ref))))
    report["fma64_xla"] = np.asarray(programs["fma64"][0](
        *[jax.device_put(a, cpu) for a in programs["fma64"][1]])).tolist()
    print(json.dumps(report))
""")


def test_a_compile_skipped_for_a_full_queue_is_asked_for_again_by_the_next_call():
    # A program whose first call queued more than PENDING_LIMIT kernels (numpyro's NUTS on a
    # fresh kernel cache) ran the skipped groups and loops unfused for the rest of the process.
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.update(JAX_PLATFORMS="pjrtkit_cpu,cpu", PJRTKIT_CPU_FUSION="1")
    out = subprocess.run([sys.executable, "-c", RETRY_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # With the queue full nothing fused or ran natively, and one compile started: the float64
    # multiply-add loop, which its op waits for (it compiles regardless; it used to fail the
    # program with CompileSkipped).
    assert report["full"] == {"fused": 0, "native": 0, "started": 1}, report
    assert report["fma64"] == report["fma64_xla"], report
    # Called again with room, each skipped kernel was compiled and then ran.
    assert report["retried"]["started"] >= 3, report
    assert report["added"]["fused"] >= 2 and report["added"]["native"] >= 1, report
    assert max(report["worst"].values()) <= 1e-5, report
