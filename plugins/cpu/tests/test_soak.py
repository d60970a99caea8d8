"""`make soak` in miniature: the phases run, handles come back and every cache the soak watches
is reported within its bound (the RSS slope needs the full run: `make soak`)."""
import json
import os
import subprocess
import sys

import pytest


@pytest.mark.long
def test_a_short_soak_reports_handles_and_bounded_caches(tmp_path):
    report = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "PJRTKIT_CPU_FUSED_KERNEL_LIMIT")}
    out = subprocess.run([sys.executable, "-m", "pjrtkit_tools.soak", "--executes", "300",
                          "--transfers", "300", "--compiles", "20", "--json", str(report)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert report.exists(), out.stderr[-3000:]
    phases = json.loads(report.read_text())
    assert [p["phase"] for p in phases] == ["execute", "transfer", "compile"]
    for phase in phases:
        assert phase["handles_back"], phase
        assert phase["caches_bounded"], phase
        assert {"partition_programs", "fused_kernels", "fused_compiles_pending",
                "fused_compiles_started", "splat_constants"} <= set(phase["caches_largest"])
    # 20 fusion-sized programs differing only in a constant share one kernel (constants are
    # kernel arguments): with no kernel limit, a few kernels in all (3 measured), not 20.
    assert phases[-1]["caches_largest"]["fused_compiles_started"] <= 3, phases[-1]
