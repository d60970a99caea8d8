"""HBM: pjrtkit_tpu's per-device sizes and fits / does-not-fit verdicts against libtpu 0.0.42.1's
compile-only compile on a v5e-8 (programs at about 85% and 115% of 15.75 GiB; arguments and
outputs within 10% of libtpu's memory_analysis(), temporaries side by side); the live client's
limit, memory_stats() and RESOURCE_EXHAUSTED before executing. Children: hbm_cases.py,
live_hbm_cases.py."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hbm_cases import PADDING_CASES, V5E_HBM
from tpu_children import HERE, report_of, require_libtpu, start

from pjrtkit_tpu.hbm import padded_bytes

# One xdist worker runs this module (make test passes `--dist loadgroup`): its module fixture
# starts child interpreters, and each worker given some of its tests would start them all again.
pytestmark = pytest.mark.xdist_group("test_tpu_hbm")

LABELS = [f"{kind} {fraction}" for fraction in ("0.85", "1.15")
          for kind in ("elementwise f32", "matmul f32", "padded bf16")]


@pytest.fixture(scope="module")
def reports():
    require_libtpu()
    script = str(HERE / "hbm_cases.py")
    theirs = start([script, "tpu"], JAX_PLATFORMS="cpu")
    ours = start([script, "pjrtkit_tpu"], JAX_PLATFORMS="pjrtkit_tpu,cpu")
    return report_of(theirs), report_of(ours)


@pytest.mark.parametrize("label", LABELS)
def test_fits_verdict_agrees_with_libtpu(reports, label):
    theirs, ours = reports
    assert ours["programs"][label]["fits"] == theirs["programs"][label]["fits"], (
        theirs["programs"][label], ours["programs"][label])
    assert theirs["programs"][label]["fits"] == label.endswith("0.85")


@pytest.mark.parametrize("label", [label for label in LABELS if label.endswith("0.85")])
def test_argument_and_output_sizes_are_within_ten_percent_of_libtpu(reports, label):
    theirs, ours = (r["programs"][label] for r in reports)
    for key in ("arguments", "outputs"):
        assert abs(ours[key] - theirs[key]) <= 0.1 * theirs[key], (key, theirs, ours)
    # Temporaries are an estimate; these programs fuse completely on both.
    assert (ours["temporaries"], theirs["temporaries"]) == (0, 0)


@pytest.mark.parametrize("label", [label for label in LABELS if label.endswith("0.85")])
def test_cost_analysis_is_near_libtpus(reports, label):
    """Bytes accessed (counted after fusion, padded) within 25% of libtpu's; flops within 1%
    where a contraction dominates. Elementwise flops are counted per op (x * 2 + 1: two per
    element), libtpu's differently (one for f32, two for bf16), so within a factor of 2."""
    theirs, ours = (r["programs"][label]["cost"] for r in reports)
    close = 0.01 if label.startswith("matmul") else 1.0
    assert abs(ours["flops"] - theirs["flops"]) <= close * theirs["flops"], (theirs, ours)
    assert abs(ours["bytes accessed"] - theirs["bytes accessed"]) \
        <= 0.25 * theirs["bytes accessed"], (theirs, ours)


@pytest.mark.parametrize("label", [label for label in LABELS if label.endswith("1.15")])
def test_a_program_that_does_not_fit_names_the_sizes(reports, label):
    theirs, ours = (r["programs"][label] for r in reports)
    assert "exceeds available HBM (15.75G)" in theirs["error"]
    error = ours["error"]
    assert error.startswith("RESOURCE_EXHAUSTED: pjrtkit_tpu: program"), error
    for part in ("per device: arguments", "outputs", "temporaries (estimated)",
                 f"exceeds available HBM ({V5E_HBM} bytes"):
        assert part in error, error


def test_padding_matches_memory_analysis(reports):
    theirs, _ = reports
    ours = [padded_bytes(np.dtype(getattr(ml_dtypes, d, None) or d), s) for d, s in PADDING_CASES]
    assert ours == theirs["padding"]


def test_live_limit_memory_stats_and_refusal_before_executing():
    live = report_of(start([str(HERE / "live_hbm_cases.py")]))
    assert live["kinds"] == ["TPU v5 lite"] and live["count"] == 8
    stats = live["after_4mib"]
    assert stats["bytes_limit"] == V5E_HBM
    assert stats["bytes_in_use"] >= 4 << 20 and stats["peak_bytes_in_use"] >= 4 << 20
    zeros = live["too_big_zeros"]  # 17 GiB of zeros: a program whose output cannot fit
    assert zeros.startswith("RESOURCE_EXHAUSTED: pjrtkit_tpu: program"), zeros
    assert "outputs 18253611008 bytes (17.0 GiB)" in zeros, zeros
    program = live["too_big_program"]
    assert program.startswith("RESOURCE_EXHAUSTED: pjrtkit_tpu: program"), program
    assert "exceeds available HBM" in program and "outputs 20971520000 bytes" in program, program
    assert live["ran"] == 0  # refused at compile: its callback never ran
    assert live["next_call"] == 2 * 1024 * 1024
    assert live["after"]["peak_bytes_in_use"] < V5E_HBM


def test_the_user_limit_lowers_hbm_for_transfers_and_programs():
    live = report_of(start([str(HERE / "live_hbm_cases.py")], PJRTKIT_TPU_MEMORY_LIMIT="64M"))
    assert live["after_4mib"]["bytes_limit"] == 64 << 20
    transfer = live["past_limit_transfer"]
    assert transfer.startswith("RESOURCE_EXHAUSTED") and "float32[8388608]" in transfer, transfer
    program = live["past_limit_program"]  # 48 MiB in + 96 MiB out > 64 MiB: refused at compile
    assert program.startswith("RESOURCE_EXHAUSTED: pjrtkit_tpu: program"), program
    assert "exceeds available HBM (67108864 bytes" in program, program
    assert live["next_call"] == 2 * 1024 * 1024
