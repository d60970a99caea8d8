"""One file's reference run (XLA's CPU backend) and backend run -> one comparison.

The measure is the one the breadth work is judged by: of the tests that pass on XLA's CPU
backend, how many pass on the backend. A test that fails on XLA too says nothing about the
backend and is not counted; a test that passes only on the backend is counted separately.
When the backend run was stopped (its time limit, a dead controller), the reference's passes it
never reached are counted as not reached, not as failures, so a partial run measures what it ran.
"""
from __future__ import annotations

import collections
import dataclasses

from pjrtkit_tools.jax_tests.causes import cause_of
from pjrtkit_tools.jax_tests.outcomes import UNFINISHED, RunOutcomes, TestOutcome


@dataclasses.dataclass
class FileComparison:
    file: str
    reference_passed: int
    backend_passed: int  # among the reference's passes
    backend_only_passed: int  # passed on the backend, not on the reference
    not_reached: int  # reference passes a stopped backend run never reported (not counted)
    failures: dict[str, TestOutcome]  # reference passed, backend did not: nodeid -> outcome
    passed_on_both: list[str]
    dead_workers: dict[str, list[str]]  # "reference"/"backend" -> what went down
    unfinished: list[str]  # which runs did not reach the end of their session
    collect_errors: dict[str, str]
    ran: dict[str, tuple[int, int | None]] = dataclasses.field(default_factory=dict)  # side ->
    # (tests reported, tests collected): how much of the file a stopped run covered
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        return self.backend_passed / self.reference_passed if self.reference_passed else None

    def causes(self) -> collections.Counter:
        return collections.Counter(cause_of(outcome.message or outcome.status)
                                   for outcome in self.failures.values())

    def as_json(self) -> dict:
        return {
            "file": self.file,
            "reference_passed": self.reference_passed,
            "backend_passed": self.backend_passed,
            "rate": self.rate,
            "backend_only_passed": self.backend_only_passed,
            "not_reached": self.not_reached,
            "dead_workers": self.dead_workers,
            "unfinished": self.unfinished,
            "collect_errors": self.collect_errors,
            "ran": {side: {"reported": n, "collected": of} for side, (n, of) in self.ran.items()},
            "seconds": self.seconds,
            "causes": dict(self.causes().most_common()),
            "failures": {nodeid: {"status": o.status, "message": o.message,
                                  "cause": cause_of(o.message or o.status)}
                         for nodeid, o in sorted(self.failures.items())},
        }


def compare(file: str, reference: RunOutcomes, backend: RunOutcomes) -> FileComparison:
    """Compare per test: a reference pass the backend did not pass (or never ran) is a failure."""
    reference_passes = reference.passed()
    backend_passes = backend.passed()
    not_reached = set()
    if not backend.finished:  # what it never reported, or was running when it was stopped
        not_reached = {nodeid for nodeid in reference_passes
                       if backend.tests.get(nodeid, UNFINISHED) is UNFINISHED}
        reference_passes = reference_passes - not_reached
    failures = {}
    for nodeid in sorted(reference_passes - backend_passes):
        failures[nodeid] = backend.tests.get(
            nodeid, TestOutcome("missing", "the backend run did not report this test (not "
                             "collected, or left unrun after its workers crashed)"))
    collect_errors = {f"backend: {k}": v for k, v in backend.collect_errors.items()}
    collect_errors.update({f"reference: {k}": v for k, v in reference.collect_errors.items()})
    return FileComparison(
        file=file,
        reference_passed=len(reference_passes),
        backend_passed=len(reference_passes & backend_passes),
        backend_only_passed=len(backend_passes - reference.passed()),
        not_reached=len(not_reached),
        failures=failures,
        passed_on_both=sorted(reference_passes & backend_passes),
        dead_workers={side: run.dead_workers for side, run in
                      (("reference", reference), ("backend", backend)) if run.dead_workers},
        unfinished=[side for side, run in (("reference", reference), ("backend", backend))
                    if not run.finished],
        collect_errors=collect_errors,
        ran={side: (len(run.tests), run.collected)
             for side, run in (("reference", reference), ("backend", backend))},
    )
