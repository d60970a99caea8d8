"""The GPU device check's pieces that run without a GPU: the conformance suite split into
parallel shards gives one report with the checks in suite order; the emulated check's bench
and Pallas stages write what the device tool brings back (at most eight files, two folders
deep) and record the kernels they launched."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_sharded_conformance_merges_into_one_report_in_suite_order(tmp_path):
    from pjrtkit_tools.gpu_device_check.conformance_shards import all_check_ids, run_sharded

    ids = [i for i in all_check_ids(["hooks"]) if i.startswith("hooks.")][:7]
    logged = []
    result = run_sharded("cpu", 3, 600, tmp_path / "c.json", tmp_path / "c.md", logged.append,
                         check_ids=ids, workers=2)
    report = json.loads((tmp_path / "c.json").read_text())
    assert [c["id"] for c in report["checks"]] == ids
    assert result["shards"] == 3 and result["workers"] == 2
    assert result["not_run"] == [] and result["failed"] == []
    assert result["summary"]["total"] == len(ids) == report["summary"]["total"]
    assert report["target"]["backend"] == "cpu"
    assert "# PJRT plugin conformance report" in (tmp_path / "c.md").read_text()
    assert len(logged) == 3 and all("conformance shard" in text for text in logged)


def test_a_shard_past_the_deadline_leaves_its_checks_listed_as_not_run(tmp_path):
    from pjrtkit_tools.gpu_device_check.conformance_shards import all_check_ids, run_sharded

    ids = all_check_ids(["hooks"])[:4]
    result = run_sharded("cpu", 2, 0, tmp_path / "c.json", tmp_path / "c.md", lambda t: None,
                         check_ids=ids)
    assert sorted(result["not_run"]) == sorted(ids)
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["total"] == 0


# Two stages emulated (the GPU benchmark suite at smoke sizes, two Pallas kernels): ~2 minutes.
@pytest.mark.long
def test_emulated_stages_write_what_the_device_tool_brings_back(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    run = subprocess.run(
        [sys.executable, "-m", "pjrtkit_tools.gpu_device_check", "--emulate", "--stages",
         "bench,pallas", "--out", str(out), "--work", str(work), "--budget-s", "900",
         "--baseline", str(tmp_path / "none.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=1200)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["baseline.json", "bench.json", "checks.json", "kernels.json", "log.txt",
                     "summary.md"], (files, run.stdout[-3000:], run.stderr[-3000:])
    assert all(p.is_file() and p.stat().st_size < 16 << 20 for p in out.iterdir())
    checks = json.loads((out / "checks.json").read_text())
    # every workload runs and matches XLA's cpu: float8 through the core's narrow-type
    # expansion, the CNN step's select_and_scatter through its expansion (issue 22)
    bench = {w["name"]: w for w in checks["bench"]["workloads"]}
    assert checks["bench"]["reference"] == "cpu" and checks["bench"]["mode"] == "smoke"
    assert bench["matmul_f8"]["correct"] and bench["matmul_f8"]["target"] is None
    assert bench["matmul_f32"]["correct"] and bench["matmul_f32"]["target"] == 1.5
    assert all(w["correct"] and not w["error"] for w in bench.values()), bench
    assert run.returncode == 0 and checks["bench"]["status"] == "ok"
    pallas = checks["pallas"]
    assert pallas["status"] == "ok", pallas
    for name in ("elementwise", "matmul"):
        assert pallas["kernels"][name]["interpret"]["match"] is True
        assert "UNIMPLEMENTED" in pallas["kernels"][name]["compiled"]["error"]
    kernels = json.loads((out / "kernels.json").read_text())
    assert kernels["mode"] == "emulated" and kernels["distinct_kernels"] > 10
    assert {"batched_matmul", "elementwise", "row_reduce"} <= set(kernels["by_name"])
    assert list((work / "kernel-log").glob("kernels-*.jsonl"))
    summary = (out / "summary.md").read_text()
    assert "| bench | ok |" in summary and "## Pallas Triton kernels" in summary


def test_the_device_tool_command_fits_its_limit_and_is_the_one_the_readme_shows():
    from pjrtkit_tools.gpu_device_check import carry

    command = carry.RUN_COMMAND.format(folder=".gpu-check")
    assert len(command) <= 2000  # the device tool's limit on a command line
    assert command in (ROOT / "README.md").read_text()
    assert "make gpu-device-check GPU_EMULATE=0" in command and "--target /tmp/site" in command


# ---- the vendor stage (the cuBLAS path, PJRTKIT_GPU_VENDOR_LIBRARIES=require) --------------

def test_the_stages_keep_their_order_and_the_gpu_budget_holds_every_cap():
    from pjrtkit_tools.gpu_device_check import __main__ as check, carry

    assert check.STAGES[-1] == "vendor"  # last: it cannot take the other stages' time
    assert check.parse_args(["--out", "o"]).stages == list(check.STAGES)
    assert check.parse_args(["--out", "o", "--emulate"]).stages == list(check.STAGES[1:])
    assert check.parse_args(["--out", "o", "--stages", "vendor,device"]).stages == \
        ["device", "vendor"]
    assert set(check.GPU_CAPS) == set(check.EMULATED_CAPS) == set(check.STAGES)
    assert sum(check.GPU_CAPS.values()) == check.DEFAULT_BUDGET[False]
    assert carry.RUN_TIMEOUT_S >= check.DEFAULT_BUDGET[False] + 60  # pip and start-up
    assert f"timeout_s {carry.RUN_TIMEOUT_S}" in (ROOT / "README.md").read_text()


def test_only_the_vendor_stage_runs_with_the_library(tmp_path):
    from pjrtkit_tools.gpu_device_check import stages

    run = stages.Run(out=tmp_path / "out", work=tmp_path / "work", emulate=True,
                     carry=tmp_path / "carry", baseline=tmp_path / "none.json", started=0.0,
                     budget_s=1.0, shards=1)
    run.out.mkdir()
    run.prepare()
    assert run.env[stages.VENDOR_VARIABLE] == "off"


def test_the_vendor_checks_are_the_conformance_checks_holding_dots():
    from pjrtkit_tools.gpu_device_check.conformance_shards import all_check_ids
    from pjrtkit_tools.gpu_device_check.stages import VENDOR_CHECKS, read_json, vendor_check_ids

    ids = all_check_ids()
    chosen = vendor_check_ids(ids)
    assert chosen == [i for i in ids if i in set(chosen)]  # suite order
    for prefix in VENDOR_CHECKS:  # each prefix still names checks
        assert any(i.startswith(prefix) for i in chosen), prefix
    assert {"jax.dot.matmul[float32-3x4]", "jax.dot.matmul[int32-3x4]",
            "jax.fft.fft[complex64-4x8]", "jax.linalg.qr[float32-6x4]",
            "jax.program.mixed_precision_bf16[float32-train_step]"} <= set(chosen)
    assert not any(i.startswith(("abi.", "hooks.", "jax.elementwise.")) for i in chosen)
    assert 100 <= len(chosen) <= 140, len(chosen)  # the GPU share: about 60 s with the bench
    # the emulated run found which of them cuBLAS takes (require refused them): all chosen
    vendor = read_json(ROOT / "docs/gpu-device-check-baseline.json").get("vendor") or {}
    library = vendor.get("conformance", {}).get("library_checks")
    if library is not None:
        assert library and set(library) <= set(chosen)


def test_the_vendor_workloads_are_the_gpu_suites_matmuls():
    from benchmarks.gpu_workloads import GPU_WORKLOADS

    from pjrtkit_tools.gpu_device_check.stages import VENDOR_WORKLOADS

    assert list(VENDOR_WORKLOADS) == [w.name for w in GPU_WORKLOADS
                                      if w.name.startswith("matmul")]


REFUSAL = ("JaxRuntimeError: FAILED_PRECONDITION: pjrtkit_cuda: PJRTKIT_GPU_VENDOR_LIBRARIES="
           "require, but cuBLAS cannot run this dot_general (float32, batch 1, 3x4 @ 4x5) on "
           "device 0: no CUDA driver: the emulated driver (PJRTKIT_GPU_EMULATE=1) keeps device "
           "memory on the host, where cuBLAS cannot run")


def test_emulated_require_must_refuse_with_the_cause_and_change_nothing_else():
    from pjrtkit_tools.gpu_device_check.stages import compare_vendor_outcomes

    triton = {"a": "PASS", "b": "PASS", "c": "UNSUPPORTED", "d": "PASS"}
    checks = [{"id": "a", "outcome": "FAIL", "actual": REFUSAL},
              {"id": "b", "outcome": "PASS"}, {"id": "c", "outcome": "UNSUPPORTED"}]
    result = compare_vendor_outcomes(checks, triton, emulate=True)
    assert result["library_checks"] == ["a"] and result["problems"] == []
    assert result["refusal_causes"] == ["no CUDA driver: the emulated driver "
                                        "(PJRTKIT_GPU_EMULATE=1) keeps device memory on the "
                                        "host, where cuBLAS cannot run"]
    # a FAIL that is not require's refusal, or no refusal at all, is a problem
    other = [{"id": "a", "outcome": "FAIL", "actual": "AssertionError: wrong"},
             {"id": "b", "outcome": "PASS"}]
    result = compare_vendor_outcomes(other, triton, emulate=True)
    assert result["library_checks"] == [] and len(result["problems"]) == 2
    assert "a: PASS on the Triton path, FAIL under require" in result["problems"]


def test_on_a_gpu_what_passes_on_the_triton_path_must_pass_through_cublas():
    from pjrtkit_tools.gpu_device_check.stages import compare_vendor_outcomes

    triton = {"a": "PASS", "b": "PASS", "c": "FAIL", "d": "PASS"}
    checks = [{"id": "a", "outcome": "PASS"},
              {"id": "b", "outcome": "FAIL", "actual": "mismatch: max abs diff 3.0"},
              {"id": "c", "outcome": "PASS"},
              {"id": "d", "outcome": "FAIL", "actual": REFUSAL.replace(
                  "no CUDA driver: the emulated driver (PJRTKIT_GPU_EMULATE=1) keeps device "
                  "memory on the host, where cuBLAS cannot run", "cublasCreate failed: X")}]
    result = compare_vendor_outcomes(checks, triton, emulate=False, expected=["a", "b", "e"])
    assert result["passed_triton_not_library"] == ["b", "d"]
    assert result["refused"] == ["d"] and result["refusal_causes"] == ["cublasCreate failed: X"]
    assert result["library_checks_expected"] == 3 and result["library_checks_passed"] == 1
    assert result["library_checks_not_passed"] == ["b"]
    assert set(result["differs"]) == {"b", "c", "d"} and len(result["problems"]) == 2
    assert "mismatch: max abs diff 3.0" in result["problems"][0]


def _probe(**cases):
    return {"nvmath": {"version": "1.0.0", "cublas_bindings": True}, "cases": cases}


def test_the_probe_must_show_gemms_through_cublas_on_a_gpu_and_refusals_emulated():
    from pjrtkit_tools.gpu_device_check.stages import probe_problems

    ran = {"library_expected": True, "match": True, "max_rel_diff": 1e-7, "library_gemms": 1}
    integer = {"library_expected": False, "match": True, "max_rel_diff": 0.0,
               "library_gemms": 0}
    assert probe_problems(_probe(float32=ran, int32=integer), emulate=False) == []
    assert probe_problems(_probe(float32=dict(ran, library_gemms=0)), emulate=False) == [
        "float32: ran, but not through cuBLAS (no gemm counted)"]
    assert probe_problems(_probe(int32=dict(integer, library_gemms=1)), emulate=False) == [
        "int32: went through cuBLAS, which does not take it"]
    assert probe_problems(_probe(float32=dict(ran, match=False)), emulate=False)
    assert probe_problems(_probe(float32=ran), emulate=True)  # emulated, it must be refused
    refused = {"library_expected": True, "error": REFUSAL, "library_gemms": 0}
    assert probe_problems(_probe(float32=refused, int32=integer), emulate=True) == []
    # the exact error of a broken nvmath-python is the stage's reason
    broken = {"nvmath": {"version": "1.0.0", "cublas_bindings": False,
                         "cublas_import_error": "ImportError: libcublas.so.12: cannot open"},
              "cases": {"float32": dict(refused, error="FAILED_PRECONDITION: ...")}}
    problems = probe_problems(broken, emulate=False)
    assert problems[0] == "nvmath-python: ImportError: libcublas.so.12: cannot open"
    assert probe_problems({"error": "stopped at the stage's time limit"}, emulate=False) == [
        "stopped at the stage's time limit"]


def test_the_summary_shows_the_vendor_stage():
    from pjrtkit_tools.gpu_device_check import summary

    class FakeRun:
        emulate, started, budget_s = False, 0.0, 360
        results = {"vendor": {
            "status": "failed", "why": "x", "problems": ["b: PASS on the Triton path, FAIL"],
            "probe": _probe(float32={"library_expected": True, "error": "a | b\nc",
                                     "library_gemms": 0}),
            "conformance": {"summary": {"pass": 1, "fail": 1}, "selected": 2, "seconds": 3.0,
                            "triton_outcomes_from": "this run",
                            "differs": {"b": {"triton": "PASS", "library": "FAIL",
                                              "actual": "mismatch"}}},
            "bench": {"status": "ok", "reference": "cuda", "workloads": [
                {"name": "matmul_bf16", "pjrtkit_s": 2e-4, "xla_s": 1.8e-4, "ratio": 1.11,
                 "triton_ratio": 1.58, "correct": True, "error": None}]}}}

    text = summary.markdown(FakeRun())
    assert "## Vendor libraries" in text and "| float32 | no | - | 0 | a \\| b c |" in text
    assert "| matmul_bf16 | 200.0 us | 180.0 us | 1.11x | 1.58x | ok |" in text
    assert "- b: Triton path PASS, cuBLAS path FAIL: mismatch" in text


# The vendor stage alone, emulated (its probe and the 118 checks under require): ~40 s.
@pytest.mark.long
def test_emulated_vendor_stage_refuses_every_dot_cublas_takes(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    run = subprocess.run(
        [sys.executable, "-m", "pjrtkit_tools.gpu_device_check", "--emulate", "--stages",
         "vendor", "--out", str(out), "--work", str(work), "--budget-s", "600"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    vendor = json.loads((out / "checks.json").read_text())["vendor"]
    assert run.returncode == 0 and vendor["status"] == "ok", (vendor, run.stdout[-3000:])
    assert vendor["bench"]["status"] == "not run"
    conformance = vendor["conformance"]
    assert conformance["differs"] == {} and conformance["not_run"] == []
    assert len(conformance["library_checks"]) == conformance["summary"]["fail"] > 50
    assert conformance["refusal_causes"][0].startswith(("no CUDA driver", "nvmath-python"))
    assert vendor["probe"]["cases"]["int32"]["match"] is True
    assert "## Vendor libraries" in (out / "summary.md").read_text()
