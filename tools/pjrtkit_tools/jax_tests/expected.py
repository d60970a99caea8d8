"""The expected-pass list: JAX tests the backend passes today and must keep passing (CI).

One pytest node id per line (``tests/dtypes_test.py::DtypesTest::testX``); ``#`` starts a comment.
The ids of generated cases depend on ``JAX_NUM_GENERATED_CASES`` and x64, so a list is only
meaningful with the settings written in its header, which the check uses.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pjrtkit_tools.jax_tests.outcomes import PASSED, RunOutcomes, TestOutcome

_SETTING = re.compile(r"^#\s*settings:\s*(.*)$")


@dataclasses.dataclass
class ExpectedPasses:
    nodeids: list[str]
    settings: dict[str, str]  # from the "# settings: cases=3 x64=0" header line

    @property
    def cases(self) -> int:
        return int(self.settings.get("cases", 3))

    @property
    def x64(self) -> bool:
        return self.settings.get("x64", "0") == "1"


def read_expected(path: Path) -> ExpectedPasses:
    nodeids, settings = [], {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _SETTING.match(line)
        if match:
            settings.update(item.split("=", 1) for item in match.group(1).split() if "=" in item)
        line = line.split("#", 1)[0].strip()
        if line:
            nodeids.append(line)
    if not nodeids:
        raise ValueError(f"{path} lists no tests")
    return ExpectedPasses(nodeids, settings)


def write_expected(path: Path, nodeids: list[str], cases: int, x64: bool, about: str) -> None:
    header = [f"# {line}" for line in about.splitlines()]
    header.append(f"# settings: cases={cases} x64={int(x64)}")
    path.write_text("\n".join(header + sorted(nodeids)) + "\n", encoding="utf-8")


def unexpected_failures(expected: ExpectedPasses, run: RunOutcomes) -> dict[str, TestOutcome]:
    """Listed tests that did not pass; a listed test the run never reported is a failure too."""
    missing = TestOutcome("missing", "the run did not report this test (renamed, or the "
                                     "run stopped before it)")
    return {nodeid: run.tests.get(nodeid, missing) for nodeid in expected.nodeids
            if nodeid not in run.tests or run.tests[nodeid].status != PASSED}
