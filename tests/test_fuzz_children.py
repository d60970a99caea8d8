"""The fuzz harnesses' child-process runner (pjrtkit_tools.fuzz_children) with real child
processes speaking its protocol: a slow start is not a hang, a case that stops answering is, and
a child that dies after answering its cases is an exit failure that the campaign goes past."""
from __future__ import annotations

import sys
import textwrap

import pytest

from pjrtkit_tools import fuzz_children

CHILD = textwrap.dedent("""
    import json, os, sys, time
    start, stop, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if mode == "slow-start":
        time.sleep(3)   # longer than a case may take: starting is not a case
    for i in range(start, stop):
        print(json.dumps({"start": i}), flush=True)
        if mode == "hang" and i == 2:
            time.sleep(3600)
        if mode == "chatty":  # more than a pipe holds, each case
            sys.stderr.write("warning " * 40000)
            sys.stderr.flush()
        print(json.dumps({"index": i, "outcome": "ok"}), flush=True)
    if mode == "dies-at-exit":
        os._exit(7)
    if mode == "dies-at-start":
        os._exit(5)
""")


def campaign(mode: str, cases: int = 6, batch: int = 3) -> fuzz_children.Campaign:
    def command_for(start: int, stop: int) -> list[str]:
        if mode == "dies-at-start":
            return [sys.executable, "-c", CHILD, str(start), str(start), mode]
        return [sys.executable, "-c", CHILD, str(start), str(stop), mode]

    return fuzz_children.run_in_children(command_for, cases, {}, batch)


@pytest.fixture(autouse=True)
def short_case_timeout(monkeypatch):
    monkeypatch.setattr(fuzz_children, "CASE_TIMEOUT_S", 1.0)


def test_a_child_slower_to_start_than_a_case_may_take_is_not_a_hang():
    result = campaign("slow-start")
    assert result.aborts == [] and result.exit_failures == []
    assert result.outcomes == {i: "ok" for i in range(6)}


def test_a_child_writing_much_to_stderr_is_not_a_hang():
    result = campaign("chatty")
    assert result.aborts == [] and result.outcomes == {i: "ok" for i in range(6)}


def test_a_case_that_stops_answering_is_a_hang_and_the_campaign_goes_on():
    result = campaign("hang")
    assert result.aborts == [2] and result.outcomes[2] == "hang"
    assert sorted(result.outcomes) == list(range(6))


def test_a_child_that_dies_after_its_cases_is_an_exit_failure_and_the_campaign_goes_on():
    result = campaign("dies-at-exit")
    assert result.outcomes == {i: "ok" for i in range(6)} and result.aborts == []
    assert len(result.exit_failures) == 2, result.exit_failures
    assert result.exit_failures[0].startswith("cases 0..2: exit status 7")
    summary = fuzz_children.summarize(result, target="t")
    assert summary["exit_failures"] == result.exit_failures and summary["cases"] == 6


def test_a_child_that_dies_before_its_first_case_ends_the_campaign():
    with pytest.raises(RuntimeError, match="before its cases \\(exit status 5\\)"):
        campaign("dies-at-start")
