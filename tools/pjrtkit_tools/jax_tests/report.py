"""The per-file table, the top causes across files, and the JSON form of both."""
from __future__ import annotations

import collections
from collections.abc import Sequence

from pjrtkit_tools.jax_tests.compare import FileComparison


def _rate(passed: int, of: int) -> str:
    return f"{100.0 * passed / of:6.2f}%" if of else "     -"


def table(comparisons: Sequence[FileComparison], backend: str) -> str:
    header = (f"{'file':<34} {'XLA passed':>10} {backend + ' passed':>16} {'rate':>7} "
              f"{'only ' + backend:>12} {'dead':>4}  seconds (backend/XLA)")
    lines = [header, "-" * len(header)]
    for c in comparisons:
        dead = sum(len(v) for v in c.dead_workers.values())
        note = ""
        if c.unfinished:
            note = "  unfinished: " + ", ".join(
                f"{side} ran {c.ran[side][0]} of {c.ran[side][1] or '?'}" if side in c.ran
                else side for side in c.unfinished)
        if c.not_reached:
            note += f" ({c.not_reached} XLA passes not reached on the backend)"
        lines.append(f"{c.file.removeprefix('tests/'):<34} {c.reference_passed:>10} "
                     f"{c.backend_passed:>16} {_rate(c.backend_passed, c.reference_passed):>7} "
                     f"{c.backend_only_passed:>12} {dead:>4}  "
                     f"{c.seconds.get('backend', 0):.0f}/{c.seconds.get('reference', 0):.0f}"
                     f"{note}")
    reference = sum(c.reference_passed for c in comparisons)
    passed = sum(c.backend_passed for c in comparisons)
    dead = sum(len(v) for c in comparisons for v in c.dead_workers.values())
    lines.append("-" * len(header))
    lines.append(f"{'total':<34} {reference:>10} {passed:>16} {_rate(passed, reference):>7} "
                 f"{sum(c.backend_only_passed for c in comparisons):>12} {dead:>4}")
    return "\n".join(lines)


def top_causes(comparisons: Sequence[FileComparison]) -> list[tuple[str, int, list[str]]]:
    """(cause, failures, files) for every cause, most failures first."""
    counts: collections.Counter = collections.Counter()
    files: dict[str, set[str]] = collections.defaultdict(set)
    for c in comparisons:
        for cause, count in c.causes().items():
            counts[cause] += count
            files[cause].add(c.file.removeprefix("tests/").removesuffix(".py"))
    return [(cause, count, sorted(files[cause])) for cause, count in counts.most_common()]


def causes_text(comparisons: Sequence[FileComparison], top: int) -> str:
    causes = top_causes(comparisons)
    if not causes:
        return "no failures among the tests that pass on XLA's CPU backend"
    lines = [f"top {min(top, len(causes))} of {len(causes)} causes (failures: cause [files])"]
    for cause, count, files in causes[:top]:
        lines.append(f"{count:>6}  {cause}  [{', '.join(files)}]")
    return "\n".join(lines)


def as_json(comparisons: Sequence[FileComparison], settings: dict) -> dict:
    reference = sum(c.reference_passed for c in comparisons)
    passed = sum(c.backend_passed for c in comparisons)
    return {
        "settings": settings,
        "totals": {"reference_passed": reference, "backend_passed": passed,
                   "rate": passed / reference if reference else None,
                   "dead_workers": sum(len(v) for c in comparisons
                                       for v in c.dead_workers.values())},
        "causes": [{"cause": cause, "failures": count, "files": files}
                   for cause, count, files in top_causes(comparisons)],
        "files": [c.as_json() for c in comparisons],
    }
