"""The op x dtype coverage table (``docs/coverage.md``), generated from layer 3's results.

``render(report)`` turns a conformance report (``SuiteResult.as_json()``, or the JSON file
``pjrtkit conformance --json`` writes) into markdown: the JAX-surface sentence, a table per
dtype, and one op x dtype table per family of cases. Nothing in it depends on timing or on
the machine, so the same results always give the same text; ``pjrtkit coverage BACKEND``
runs layer 3 and prints it, and a test compares the committed file with a fresh run.
"""
from __future__ import annotations

import collections
import json
import os
import sys
from typing import Any

from pjrtkit.conformance.results import describe_surface

PASS_MARK, FAIL_MARK, UNSUPPORTED_MARK, PARTIAL_MARK, SKIP_MARK = "✓", "FAIL", "–", "½", "skip"
LEGEND = (f"{PASS_MARK}: every check passed (same answer as XLA's CPU backend); "
          f"{UNSUPPORTED_MARK}: UNSUPPORTED (the plugin answered UNIMPLEMENTED, or JAX has no "
          f"lowering rule for it); {PARTIAL_MARK}: some checks passed, the others UNSUPPORTED; "
          f"{FAIL_MARK}: a check gave a different answer or an error; {SKIP_MARK}: XLA's CPU "
          f"backend cannot run it; blank: not measured.")

# Column order: the dtypes as the PJRT header groups them; anything else after, by name.
DTYPE_ORDER = ("bool", "int2", "int4", "int8", "int16", "int32", "int64", "uint2", "uint4",
               "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32",
               "float64", "complex64", "complex128", "float8_e5m2", "float8_e4m3fn",
               "float8_e4m3b11fnuz", "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e4m3",
               "float8_e3m4", "float8_e8m0fnu", "float4_e2m1fn")


def _split_id(check_id: str) -> tuple[str, str, str]:
    """(family, op, dtype) of ``jax.<family>.<op>[<dtype>-<shape>]``."""
    name, _, tag = check_id.removeprefix("jax.").partition("[")
    family, _, op = name.partition(".")
    return family, op, tag.rstrip("]").split("-")[0]


def _mark(outcomes: list[str]) -> str:
    kinds = set(outcomes)
    if "FAIL" in kinds:
        return FAIL_MARK
    if kinds == {"PASS"}:
        return PASS_MARK
    if kinds == {"UNSUPPORTED"}:
        return UNSUPPORTED_MARK
    if kinds <= {"PASS", "UNSUPPORTED", "SKIP"} and "PASS" in kinds and "UNSUPPORTED" in kinds:
        return PARTIAL_MARK
    if kinds == {"SKIP"}:
        return SKIP_MARK
    return PARTIAL_MARK if "PASS" in kinds else UNSUPPORTED_MARK


def _dtype_key(name: str) -> tuple[int, str]:
    return (DTYPE_ORDER.index(name), "") if name in DTYPE_ORDER else (len(DTYPE_ORDER), name)


def render(report: dict[str, Any]) -> str:
    checks = [c for c in report["checks"] if c["layer"] == "jax"]
    target = report.get("target", {})
    platform = target.get("platform") or target.get("target", "?")
    backend = target.get("backend") or target.get("target", "BACKEND")
    cells: dict[str, dict[str, dict[str, list[str]]]] = collections.defaultdict(
        lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    by_dtype: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for c in checks:
        family, op, dtype = _split_id(c["id"])
        cells[family][op][dtype].append(c["outcome"])
        by_dtype[dtype][c["outcome"]] += 1

    lines = [f"# JAX surface coverage: {platform}", "",
             f"Generated from the conformance suite's layer 3 (JAX programs compared with XLA's "
             f"CPU backend in the same process) by `pjrtkit coverage {backend} --output "
             f"docs/coverage.md`, on jax {target.get('jax_version', '?')} / jaxlib "
             f"{target.get('jaxlib_version', '?')}. Do not edit by hand: "
             f"`tests/conformance/test_report_and_cli.py` compares this file with a fresh run.",
             "", f"{platform} {describe_surface(report.get('jax_surface'))}.", "",
             LEGEND, "", "## By dtype", "",
             "| dtype | checks | PASS | UNSUPPORTED | FAIL | SKIP |", "|---|---|---|---|---|---|"]
    for dtype in sorted(by_dtype, key=_dtype_key):
        count = by_dtype[dtype]
        lines.append(f"| {dtype} | {sum(count.values())} | {count['PASS']} | "
                     f"{count['UNSUPPORTED']} | {count['FAIL']} | {count['SKIP']} |")
    lines.append("")
    for family in sorted(cells):
        ops = cells[family]
        dtypes = sorted({d for per_op in ops.values() for d in per_op}, key=_dtype_key)
        lines += [f"## {family}", "", "| op | " + " | ".join(dtypes) + " |",
                  "|---" * (len(dtypes) + 1) + "|"]
        for op in sorted(ops):
            row = [_mark(ops[op][d]) if d in ops[op] else " " for d in dtypes]
            lines.append(f"| {op} | " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("backend", help="installed pjrtkit backend name (e.g. cpu)")
    parser.add_argument("--from-json", metavar="PATH",
                        help="render a report `pjrtkit conformance --json` wrote instead of "
                             "running layer 3")
    parser.add_argument("--output", metavar="PATH", help="write the markdown here (default: "
                                                          "standard output)")


def main(args) -> int:
    """``pjrtkit coverage``: run layer 3 on a backend (or read a report) and print the table."""
    if args.from_json:
        with open(args.from_json) as f:
            report = json.load(f)
    else:
        from pjrtkit.conformance.runner import Target, run_suite

        report = run_suite(Target.backend_named(args.backend), layers=("jax",)).as_json()
    text = render(report)
    if args.output:
        parent = os.path.dirname(args.output)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
