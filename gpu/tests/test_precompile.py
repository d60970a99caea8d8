"""kernel_log records the distinct kernels an emulated run launches (generated ones with their
source); precompile maps the interpreter's choices to a GPU's and adds autotune's candidates,
and compiling the records twice into one Triton cache answers the second time from the cache
(a child process: this one interprets Triton)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import ml_dtypes
import pytest
from jax import lax

from pjrtkit_gpu import autotune, kernel_log, precompile

from gpu_support import emulated_driver, run_on_gpu, sample


def program(a, b, x, images, kernel):
    conv = lax.conv_general_dilated(images, kernel, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return a @ b, jnp.sum(x, axis=1), jnp.sort(x, axis=1), conv


def inputs():
    bf16 = ml_dtypes.bfloat16
    return (sample("a", (40, 48), bf16), sample("b", (48, 24), bf16),
            sample("x", (3, 300), "float32"), sample("i", (1, 6, 6, 2), bf16),
            sample("k", (3, 3, 2, 4), bf16))


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """The records of one emulated run of ``program``."""
    emulated_driver()  # first: Triton interprets in this process (the lowering imports it)
    monkeypatch.setenv(kernel_log.VARIABLE, str(tmp_path / "log"))
    monkeypatch.setattr(kernel_log, "_seen", set())
    run_on_gpu(program, *inputs())
    return kernel_log.read(tmp_path / "log"), tmp_path / "log"


def by_name(records, name):
    return [r for r in records if r.get("name") == name]


def test_an_emulated_run_records_each_kernel_once_generated_ones_with_their_source(recorded):
    records, _ = recorded
    names = {r["name"] for r in records}
    assert {"batched_matmul", "row_reduce", "sort_rows", "merge_runs", "convolution"} <= names
    for r in records:
        generated = r["module"].startswith(kernel_log.GENERATED_PREFIX)
        assert ("source" in r) == generated, r["name"]
        assert all(v == "constexpr" or v.startswith(("*", "i64")) for v in r["signature"].values())
    [dot] = by_name(records, "batched_matmul")
    # Triton's specialization: aligned pointers and ints divisible by 16 carry ":16" (40x48 @
    # 48x24: K = 48 does, M = 40 and N = 24 do not)
    sig = dot["signature"]
    assert all(sig[p].endswith(":16") for p in ("a", "b", "c"))
    assert (sig["M"], sig["N"], sig["K"]) == ("i64", "i64", "i64:16")
    assert dot["constexprs"]["WIDEN"] is True  # bfloat16 widened for the interpreter's tl.dot
    assert dot["options"] == autotune.DEFAULTS[autotune.MATMUL].options
    [conv] = by_name(records, "convolution")
    assert conv["constexprs"]["WIDEN"] is True and "if WIDEN:" in conv["source"]
    again = kernel_log.read(recorded[1])
    assert again == records


def test_precompile_takes_what_a_gpu_launches_and_every_autotune_candidate(recorded):
    from pjrtkit_gpu.lowering.sort import MERGE_BLOCK, SORT_TILE

    records, _ = recorded
    gpu = [precompile.for_gpu(r) for r in records if "module" in r]
    for r in gpu:
        assert r["constexprs"].get("WIDEN", False) is False
    [tiles] = [r for r in gpu if r["name"] == "sort_rows"]
    assert tiles["constexprs"] == {"BI": SORT_TILE, "BJ": SORT_TILE}
    assert [r["constexprs"] for r in gpu if r["name"] == "merge_runs"] == [{"B": MERGE_BLOCK}]
    jobs = precompile.jobs_of(records, with_variants=True)
    dots = [j for j in jobs if j["name"] == "batched_matmul"]
    reductions = [j for j in jobs if j["name"] == "row_reduce"]
    assert len(dots) == len(autotune.SPACES[autotune.MATMUL])
    assert len(reductions) == len(autotune.SPACES[autotune.ROW_REDUCE])
    assert {autotune.Config.of(j["options"]["num_warps"], j["options"]["num_stages"],
                               **{k: j["constexprs"][k] for k in ("BM", "BN", "BK")})
            for j in dots} == set(autotune.SPACES[autotune.MATMUL])
    assert len(precompile.jobs_of(records, with_variants=False)) == \
        len([r for r in records if "module" in r])


# Compiles a dozen kernels for sm_90 twice: about a minute.
@pytest.mark.long
def test_compiling_twice_into_one_triton_cache_hits_it_the_second_time(recorded, tmp_path):
    _, folder = recorded
    env = {k: v for k, v in os.environ.items() if k not in ("PJRTKIT_GPU_EMULATE",
                                                             "TRITON_INTERPRET")}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    reports = []
    for n in range(2):
        path = tmp_path / f"report{n}.json"
        run = subprocess.run([sys.executable, "-m", "pjrtkit_gpu.precompile", "--log",
                              str(folder), "--target", "sm_90", "--no-variants", "--json",
                              str(path)], capture_output=True, text=True, env=env, timeout=900)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        reports.append(json.loads(path.read_text()))
    first, second = (r["summary"] for r in reports)
    assert first["failures"] == 0 and first["compiles"] == first["recorded_kernels"] >= 5
    assert first["cache_misses"] == first["compiles"]
    assert second["cache_hits"] == second["compiles"] and second["cache_misses"] == 0
    assert all(r["binary_bytes"] > 1000 for r in reports[1]["rows"])


def test_alignment_hints_become_tritons_divisibility_attributes():
    from pjrtkit_gpu import kernels
    from pjrtkit_gpu.drivers.compiled_kernels import split_hints

    plain, attrs = split_hints(kernels.batched_matmul, {
        "a": "*bf16:16", "b": "*bf16", "c": "*bf16:16", "M": "i64", "N": "i64:16", "K": "i64",
        "BM": "constexpr"})
    assert plain == {"a": "*bf16", "b": "*bf16", "c": "*bf16", "M": "i64", "N": "i64",
                     "K": "i64", "BM": "constexpr"}
    assert attrs == {(0,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]],
                     (4,): [["tt.divisibility", 16]]}
