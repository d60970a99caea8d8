"""The outcomes of one pytest run, read from the record ``pytest_plugin`` wrote.

pytest reports each test up to three times (setup, call, teardown). One test has one outcome:
``failed`` when its call failed, ``error`` when its setup or teardown failed, ``skipped`` (with the
reason) when it was skipped, ``xfailed`` when JAX marked it as an expected failure, else
``passed``. A test an xdist worker was running when the worker died is ``failed`` with xdist's
"crashed while running" message.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

PASSED, FAILED, ERROR, SKIPPED, XFAILED = "passed", "failed", "error", "skipped", "xfailed"


@dataclasses.dataclass
class TestOutcome:
    __test__ = False  # a record, not a pytest test class

    status: str
    message: str = ""


@dataclasses.dataclass
class RunOutcomes:
    """Everything one pytest run reported."""

    tests: dict[str, TestOutcome] = dataclasses.field(default_factory=dict)
    dead_workers: list[str] = dataclasses.field(default_factory=list)
    collect_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    finished: bool = False  # pytest reached the end of the session
    collected: int | None = None  # tests collected (the largest count a worker reported)

    def passed(self) -> set[str]:
        return {nodeid for nodeid, outcome in self.tests.items() if outcome.status == PASSED}

    def count(self, status: str) -> int:
        return sum(1 for outcome in self.tests.values() if outcome.status == status)


def _merge(previous: TestOutcome | None, record: dict) -> TestOutcome:
    """Fold one phase's report into the test's outcome so far (a failure is never undone)."""
    outcome, when = record["outcome"], record.get("when")
    message = record.get("message", "")
    if previous is UNFINISHED:
        previous = None
    if previous is not None and previous.status in (FAILED, ERROR):
        return previous
    if outcome == "failed":
        return TestOutcome(FAILED if when in ("call", "???") else ERROR, message)
    if outcome == "skipped":
        return TestOutcome(XFAILED if record.get("xfail") else SKIPPED, message)
    if previous is not None and previous.status in (SKIPPED, XFAILED):
        return previous
    if when == "call":
        return TestOutcome(PASSED)
    return previous or UNFINISHED  # setup (or teardown) passed: the call decides


# What a test whose setup passed is until its call reports: the outcome of a run killed mid-test.
UNFINISHED = TestOutcome(ERROR, "the test did not finish (the run ended while it ran)")


def read_record(path: Path) -> RunOutcomes:
    """Parse the JSON-lines record; a missing file is a run that reported nothing."""
    run = RunOutcomes()
    if not path.exists():
        return run
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short when the run was killed
            continue
        if "nodeid" in record:
            run.tests[record["nodeid"]] = _merge(run.tests.get(record["nodeid"]), record)
        elif "worker_down" in record:
            run.dead_workers.append(f"{record['worker_down']}: {record.get('error', '')}")
        elif "collect_error" in record:
            run.collect_errors[record["collect_error"]] = record.get("message", "")
        elif "collected" in record:
            run.collected = max(run.collected or 0, record["collected"])
        elif "session_finished" in record:
            run.finished = True
    return run
