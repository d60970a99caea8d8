"""examples/tpu_transformer.py trains on a virtual v5e-8 and matches XLA's CPU backend with 8
devices within its TPU tolerance, printing the per-chip memory report; the roofline command
prints its estimate for the same step. Both run as child processes, as a user runs them."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_children import child_env

from pjrtkit_tpu.generations import generation
from pjrtkit_tpu.roofline import estimate

pytestmark = pytest.mark.long  # trains the example on 8 virtual devices and on XLA

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "tpu_transformer.py"


def _run(args, timeout=600):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_transformer_trains_on_a_virtual_v5e_8_like_xla_cpu():
    result = _run([str(EXAMPLE), "--steps", "3"])
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    out = result.stdout
    assert "data-parallel over 8 devices: TPU v5 lite (pjrtkit_tpu) vs XLA cpu" in out
    assert len(re.findall(r"^\s+\d+ +\S+ +\S+ +\S+e[-+]\d+$", out, re.M)) == 3, out
    assert len(re.findall(r"^  pjrtkit_tpu:\d \(TPU v5 lite\) .* 15\.75Gi$", out, re.M)) == 8, out
    assert "one training step per device: arguments" in out
    assert re.search(r"^on v5e-8 \(TPU v5 lite\) this step is (memory|compute)-bound, "
                     r"estimated \S+ ms$", out, re.M), out
    assert re.search(r"^PASS: 3 steps, max relative difference \S+ <= 0.002$", out, re.M), out


def test_roofline_command_on_the_example_step():
    result = _run(["-m", "pjrtkit_tpu.roofline", f"{EXAMPLE}:roofline_step", "--json"])
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("{")]
    report = json.loads(line)
    assert report["generation"] == "v5e" and report["devices"] == 8
    assert report["flops"] > 1e7 and report["bytes_accessed"] > 1e6
    assert report["bound"] == "memory-bound"  # intensity below v5e's 240 flops/byte
    assert report["seconds"] == max(report["compute_seconds"], report["memory_seconds"])


def test_roofline_arithmetic():
    v5e = generation("v5e")
    # v5e: 197 TFLOP/s and 819 GB/s per chip, one device per chip: ridge at ~240 flops/byte.
    compute = estimate({"flops": 197e12, "bytes accessed": 819e9 / 10}, v5e, 8)
    assert compute.bound == "compute-bound" and abs(compute.seconds - 1.0) < 1e-12
    memory = estimate({"flops": 1e9, "bytes accessed": 819e9}, v5e, 8)
    assert memory.bound == "memory-bound" and abs(memory.seconds - 1.0) < 1e-12
    # Two devices per chip (7x) share the chip's peaks.
    tpu7x = generation("7x")
    assert estimate({"flops": 2307e12}, tpu7x, 8).compute_seconds == 2.0
