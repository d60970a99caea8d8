"""Keeps the conformance pages in docs/ honest: each page's per-check outcomes against a fresh
whole run of the suite.

A page such as ``docs/conformance-cuda-emulated.md`` is the markdown report of CI's whole
``make conformance`` run, committed. This tool reads the fresh JSON report of the same run
(``build/conformance/<plugin>.json``) and the committed page, and fails when they disagree: a
check whose outcome differs, a check the page lists that the run no longer has, or one the run
has that the page does not list. The fix it prints is to commit the fresh markdown report.

    python -m pjrtkit_tools.conformance_pages --report build/conformance/cuda.json \
        --page docs/conformance-cuda-emulated.md [--markdown build/conformance/cuda.md]

A narrowed run (``CONFORMANCE_NARROWED``) lacks most of the page's checks and so disagrees: only
a whole run can vouch for a page. Exit status: 0 when they agree, 1 when they differ, 2 when a
file cannot be read.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

OUTCOMES = ("PASS", "FAIL", "UNSUPPORTED", "SKIP")
_ROW = re.compile(r"^\| `([^`]+)` \| (" + "|".join(OUTCOMES) + r") \|")


def page_outcomes(text: str) -> dict[str, str]:
    """The per-check outcomes a markdown report lists (its check table's rows)."""
    outcomes: dict[str, str] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            outcomes[match.group(1)] = match.group(2)
    return outcomes


def report_outcomes(report: dict) -> dict[str, str]:
    return {check["id"]: check["outcome"] for check in report["checks"]}


def differences(page: dict[str, str], fresh: dict[str, str]) -> list[str]:
    """What differs between a page's outcomes and a fresh run's, one line each, sorted."""
    lines = []
    for check_id in sorted(page.keys() | fresh.keys()):
        if check_id not in fresh:
            lines.append(f"{check_id}: the page says {page[check_id]}, the run has no such check")
        elif check_id not in page:
            lines.append(f"{check_id}: the run says {fresh[check_id]}, the page does not list it")
        elif page[check_id] != fresh[check_id]:
            lines.append(f"{check_id}: the page says {page[check_id]}, the run says "
                         f"{fresh[check_id]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", required=True, type=Path,
                        help="the fresh JSON report of a whole conformance run")
    parser.add_argument("--page", required=True, type=Path, help="the committed markdown page")
    parser.add_argument("--markdown", type=Path,
                        help="the fresh markdown report, named in the fix that is printed")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
        page_text = args.page.read_text()
    except (OSError, ValueError) as exc:
        print(f"conformance pages: cannot read {exc}", file=sys.stderr)
        return 2
    page, fresh = page_outcomes(page_text), report_outcomes(report)
    lines = differences(page, fresh)
    if not lines:
        print(f"conformance pages: {args.page} agrees with {args.report} ({len(fresh)} checks)")
        return 0
    print(f"conformance pages: {args.page} disagrees with the fresh run {args.report} on "
          f"{len(lines)} checks:")
    for line in lines:
        print(f"  {line}")
    fresh_md = args.markdown or args.report.with_suffix(".md")
    print(f"commit the fresh report as the page: cp {fresh_md} {args.page}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
