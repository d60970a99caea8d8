"""The benchmark suite runs, checks results against XLA and writes its outputs.

Only correctness and output formats are asserted, never timings (machines are noisy): the
suite runs in ``--smoke`` mode (tiny shapes, one call per sample), in a subprocess from the
repository root, as a developer would run it.
"""
from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYWORDS = ["dispatch", "matmul", "mlp", "conv", "layernorm", "fori", "scan", "random",
            "transformer", "compile", "dp4"]


def run_suite(*args: str, code: str | None = None, timeout: float = 300):
    env = {**__import__("os").environ, "JAX_PLATFORMS": "pjrtkit_cpu"}  # the suite adds cpu itself
    env.pop("PJRTKIT_PROFILE", None)
    cmd = [sys.executable, "-m", "benchmarks", *args] if code is None else [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def read_png(path: Path) -> tuple[int, int, bytes]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
            assert body[8:10] == b"\x08\x02"  # 8-bit RGB
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height = size
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + 3 * width)
    return width, height, raw


# The whole suite in smoke mode, real workloads included, once for the three tests that read it
# (one xdist group: each worker would run it again, side by side). On a cold Numba cache numpyro's
# NUTS alone waits up to the runner's 120 s for its background compiles: one run took 309 s on
# a 2-core AMD EPYC, so the limit (against a hang) is 900 s.
SMOKE = pytest.mark.xdist_group("benchmark_smoke")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = run_suite("--smoke", "--real", "--json", str(out / "r.json"), "--plot",
                     str(out / "r.png"), timeout=900)
    return proc, out


@pytest.mark.long
@SMOKE
def test_smoke_runs_every_workload_and_matches_xla(smoke):
    proc, _ = smoke
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and "ERROR" not in proc.stdout
    for header in ("workload", "pjrtkit", "xla", "ratio", "target", "met?", "geomean"):
        assert header in proc.stdout
    after_geomean = proc.stdout.split("geomean", 2)[-1]
    assert "mlp_train_step_dp4" in after_geomean and "one-time partitioning" in after_geomean


@pytest.mark.long
@SMOKE
def test_json_has_the_agreed_fields(smoke):
    proc, out = smoke
    doc = json.loads((out / "r.json").read_text())
    names = [w["name"] for w in doc["workloads"] if not w["real"]]
    assert len(names) == 11
    for keyword in KEYWORDS:
        assert any(keyword in n for n in names), (keyword, names)
    for w in doc["workloads"]:
        assert {"name", "pjrtkit_s", "xla_s", "ratio"} <= set(w)
        assert w["pjrtkit_s"] > 0 and w["xla_s"] > 0
        assert math.isclose(w["ratio"], w["pjrtkit_s"] / w["xla_s"], rel_tol=1e-9)
        assert w["correct"] is True
        assert isinstance(w["background_compile_s"], float) and w["background_compile_s"] >= 0
    # The geomean is over single-device workloads; the 4-device one has its own line and its
    # one-time partitioning cost.
    ratios = [w["ratio"] for w in doc["workloads"] if w["devices"] == 1 and not w["real"]]
    assert len(ratios) == 10
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    (many,) = [w for w in doc["workloads"] if w["devices"] > 1 and not w["real"]]
    assert many["devices"] == 4 and many["partition_s"] > 0
    assert math.isclose(doc["geomean_ratio"], geomean, rel_tol=1e-9)
    # The real workloads (the bench extra): each timed, with its time to steady state.
    real = {w["name"]: w for w in doc["workloads"] if w["real"]}
    assert {"flax_cnn", "flax_lm", "scan_rnn_large", "nuts_eight_schools", "eager_loop",
            "flax_dp4", "flax_dp8_tpu"} == set(real)
    for w in real.values():
        assert set(w["first_call_s"]) == set(w["first_ten_s"]) == {"pjrtkit_cpu", "cpu"}
        assert all(w["first_ten_s"][b] >= w["first_call_s"][b] > 0 for b in w["first_ten_s"])
    assert real["flax_dp8_tpu"]["platform"] == "pjrtkit_tpu"
    assert real["flax_dp8_tpu"]["devices"] == 8
    assert doc["settings"]["persistent_compilation_cache"] is False
    assert doc["machine"]["cpu_count"] >= 1
    # NumPy is loaded, so its OpenBLAS is named with the kernel it chose; smoke runs keep the
    # machine's environment, so nothing was removed.
    blas = doc["machine"]["blas"]
    assert blas["openblas_kernels"] and all(": " in k for k in blas["openblas_kernels"])
    assert blas["overrides_removed"] == ""


@pytest.mark.long
@SMOKE
def test_plot_is_a_valid_png(smoke):
    _, out = smoke
    width, height, raw = read_png(out / "r.png")
    assert width >= 400 and height >= 200
    # Not blank: bars are drawn in more than one colour.
    assert len(set(raw[i:i + 3] for i in range(1, len(raw) - 3, 997))) > 2


def test_quick_timing_path_with_only_and_repeats(tmp_path):
    proc = run_suite("--quick", "--only", "dispatch", "--repeats", "2",
                     "--json", str(tmp_path / "q.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "q.json").read_text())
    (w,) = doc["workloads"]
    assert w["name"] == "dispatch" and len(w["pjrtkit"]["samples_s"]) == 2
    assert w["pjrtkit"]["calls_per_sample"] > 1


def test_a_mismatch_is_reported_and_fails_the_run(tmp_path):
    # A workload that computes something else on pjrtkit_cpu than on XLA's cpu (pjrtkit_cpu is
    # like cpu, so only a branch named after it differs).
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from jax import lax
        import benchmarks.workloads as w
        def make(size):
            fn = lambda x: lax.platform_dependent(x, cpu=lambda x: x, pjrtkit_cpu=lambda x: x + 1,
                                                  default=lambda x: x + 1)
            return fn, (np.zeros(3, np.float32),)
        w.WORKLOADS[:] = [w.Workload("broken_dispatch", "differs on purpose", 2.0, make)]
        from benchmarks.__main__ import main
        sys.exit(main(sys.argv[1:]))
    """)
    proc = run_suite("--smoke", "--json", str(tmp_path / "m.json"), code=code)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISMATCH in broken_dispatch" in proc.stdout
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["workloads"][0]["correct"] is False and doc["workloads"][0]["mismatch"]


def test_unknown_workload_is_a_usage_error():
    proc = run_suite("--smoke", "--only", "no_such_workload")
    assert proc.returncode == 2
    assert "unknown workload" in proc.stderr


def test_plot_renders_without_data_rows(tmp_path):
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import plot
    finally:
        sys.path.remove(str(ROOT))
    path = tmp_path / "p.png"
    plot.write(str(path), [("a", 0.5, 1.0), ("b", None, 2.0), ("c", 1234.0, 10.0)], "t")
    read_png(path)


def test_blas_overrides_are_removed_only_for_timed_runs_and_only_once():
    from benchmarks import blas_env

    machine = {"PATH": "/bin", "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512"}
    env = blas_env.rerun_env(machine, keep=False, smoke=False)
    assert env is not None and "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert env["PATH"] == "/bin"
    assert env[blas_env.REMOVED_MARKER] == "OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512"
    # The re-run itself, --keep-blas-env, --smoke (tests, CI) and a machine without overrides
    # all run as they are.
    assert blas_env.rerun_env(env, keep=False, smoke=False) is None
    assert blas_env.rerun_env({**machine, blas_env.REMOVED_MARKER: "x"}, keep=False,
                              smoke=False) is None
    assert blas_env.rerun_env(machine, keep=True, smoke=False) is None
    assert blas_env.rerun_env(machine, keep=False, smoke=True) is None
    assert blas_env.rerun_env({"PATH": "/bin"}, keep=False, smoke=False) is None
