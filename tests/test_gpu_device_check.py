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
