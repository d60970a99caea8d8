"""A short campaign of the program fuzz harness (``make fuzz`` runs the longer one): damaged
artifacts, mutated ops and random constants all end in success or a PjrtError with a code,
never an abort, a hang or another exception; and the harness itself counts an abort."""
from __future__ import annotations

import pytest

from pjrtkit_tools.fuzz_programs import TARGETS, run_campaign

CASES = 30


@pytest.mark.parametrize("target", TARGETS)
def test_short_campaign_has_no_aborts_and_no_bugs(target):
    summary = run_campaign(target, CASES, seed=1)
    assert summary["cases"] == CASES
    assert summary["aborts"] == [] and summary["bugs"] == {}, summary


def test_the_harness_counts_an_abort_and_goes_on(monkeypatch):
    monkeypatch.setenv("PJRTKIT_FUZZ_ABORT_AT", "2")
    summary = run_campaign("ops", 5, seed=1)
    assert summary["aborts"] == [2] and summary["cases"] == 5, summary
    assert summary["outcomes"]["abort"] == 1
