"""The committed conformance pages and the tool that checks them against CI's whole runs
(pjrtkit_tools.conformance_pages; `.ci/run` calls it after `make conformance`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from pjrtkit_tools import conformance_pages

ROOT = Path(__file__).resolve().parents[1]
CUDA_PAGE = ROOT / "docs" / "conformance-cuda-emulated.md"


def _summary_counts(text: str) -> dict[str, int]:
    """The page's own summary table: | PASS | 978 | ..."""
    counts = {}
    for outcome in conformance_pages.OUTCOMES:
        match = re.search(rf"^\| {outcome} \| (\d+) \|$", text, re.MULTILINE)
        counts[outcome] = int(match.group(1))
    return counts


def test_the_cuda_page_lists_every_check_its_summary_counts():
    text = CUDA_PAGE.read_text()
    outcomes = conformance_pages.page_outcomes(text)
    counts = _summary_counts(text)
    assert len(outcomes) == sum(counts.values())
    for outcome, count in counts.items():
        assert sum(1 for o in outcomes.values() if o == outcome) == count, outcome


def _report(outcomes: dict[str, str]) -> dict:
    return {"checks": [{"id": check_id, "outcome": outcome}
                       for check_id, outcome in outcomes.items()]}


def test_the_tool_agrees_with_a_run_that_matches_the_page(tmp_path, capsys):
    outcomes = conformance_pages.page_outcomes(CUDA_PAGE.read_text())
    report = tmp_path / "cuda.json"
    report.write_text(json.dumps(_report(outcomes)))
    assert conformance_pages.main(["--report", str(report), "--page", str(CUDA_PAGE)]) == 0
    assert f"({len(outcomes)} checks)" in capsys.readouterr().out


def test_the_tool_names_a_changed_outcome_a_lost_check_and_a_new_one(tmp_path, capsys):
    outcomes = conformance_pages.page_outcomes(CUDA_PAGE.read_text())
    passing = sorted(check_id for check_id, o in outcomes.items() if o == "PASS")
    changed, lost = passing[0], passing[1]
    fresh = dict(outcomes)
    fresh[changed] = "FAIL"
    del fresh[lost]
    fresh["jax.new.check[float32]"] = "PASS"
    report = tmp_path / "cuda.json"
    report.write_text(json.dumps(_report(fresh)))
    assert conformance_pages.main(["--report", str(report), "--page", str(CUDA_PAGE)]) == 1
    out = capsys.readouterr().out
    assert f"{changed}: the page says PASS, the run says FAIL" in out
    assert f"{lost}: the page says PASS, the run has no such check" in out
    assert "jax.new.check[float32]: the run says PASS, the page does not list it" in out
    assert f"cp {report.with_suffix('.md')} {CUDA_PAGE}" in out
