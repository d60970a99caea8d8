"""The compile report compiles the lowering's kernels ahead of time for GPU targets without a
GPU (a child process: this one interprets Triton). The full report is `make gpu-compile-report`;
here one kernel of each kind for one dtype, for one NVIDIA and one AMD target."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_compile_report_builds_cubin_and_hsaco(tmp_path):
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PJRTKIT_GPU_EMULATE",
                                                             "TRITON_INTERPRET")}
    run = subprocess.run(
        [sys.executable, "-m", "pjrtkit_gpu.compile_report", "--targets", "sm_90,gfx942",
         "--only", "batched_matmul,row_reduce,elementwise,sort_rows,merge_runs,sequential_reduce",
         "--dtypes", "bfloat16",
         "--json", str(out)], capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert report["summary"]["failures"] == 0
    assert {r["kernel"] for r in rows} == {"batched_matmul", "row_reduce", "elementwise",
                                          "sort_rows", "merge_runs", "sequential_reduce"}
    assert {r["target"] for r in rows} == {"sm_90", "gfx942"}
    assert all(r["binary_bytes"] > 1000 for r in rows), rows
