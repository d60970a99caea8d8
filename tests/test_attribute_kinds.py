"""Every attribute kind the loader reads decodes to what the program holds, and none of them
can abort the process: all cases run in child processes, so an abort is a failing case here
(issue 13: a complex constant used to kill the process inside jaxlib's bindings)."""
from __future__ import annotations

import pytest

from pjrtkit_tools.attribute_kinds import CASES, run_cases


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    return run_cases(list(CASES))


@pytest.mark.parametrize("case", list(CASES))
def test_attribute_kind_loads_in_a_child_process(outcomes, case):
    assert outcomes[case] == "ok"


def test_a_case_that_aborts_is_reported_and_the_rest_still_run(monkeypatch):
    """The harness itself: a case that kills its process is a failure of that case only."""
    names = ["string", "abort-now", "bool-attr"]
    monkeypatch.setenv("PJRTKIT_ATTRIBUTE_KINDS_ABORT", "abort-now")
    results = run_cases(names)
    assert results["string"] == "ok" and results["bool-attr"] == "ok"
    assert results["abort-now"].startswith("aborted (exit status")
