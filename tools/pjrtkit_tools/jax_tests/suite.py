"""JAX's whole test suite on a backend, file by file, resumable: ``pjrtkit jax-tests --all``.

One *configuration* is a JAX test tree run with one installed JAX, device tag and x64 setting.
Per configuration two stores, JSON lines with one line per test file, appended as each file
finishes (so a run that stops resumes at the next file, and the stores are small enough to
commit):

- the XLA pass list (``xla_passes``): what XLA's CPU backend passes in each file, run once per
  tree and configuration, whatever backend is measured later;
- the backend's record (``records``): of those passes, how many the backend reached and passed,
  each failure's cause, dead workers, seconds.

Selection: every ``*_test.py`` under the tree's ``tests/`` except ``tests/multiprocess/`` (JAX's
multi-process harness; ``--multiprocess``), ``tests/pallas/`` and ``tests/mosaic/`` included. Both
sides run the same files with the same settings: ``JAX_NUM_GENERATED_CASES=1``, except the twelve
files the breadth work measured first (``runner.DEFAULT_FILES``), which keep 3.

Counting (issue 27's acceptance): every test XLA passes counts; one the backend did not pass,
for any reason (failed, skipped, not reached before a time limit, its worker dead, not
collected), is a failure; "ran R of C" says how many of the C XLA passes the backend reported at
all. A file XLA passes nothing in is left out of the rates and listed with its count.
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterable
from pathlib import Path

from pjrtkit_tools.jax_tests.causes import cause_of
from pjrtkit_tools.jax_tests.outcomes import PASSED, RunOutcomes
from pjrtkit_tools.jax_tests.runner import DEFAULT_FILES, RunSettings, run_side

EXCLUDED_DIRECTORIES = ("tests/multiprocess/",)
KNOWN_FILES_CASES = 3  # JAX_NUM_GENERATED_CASES of the files in runner.DEFAULT_FILES
OTHER_FILES_CASES = 1
NOT_REACHED = "not reached (time limit, dead worker, or not collected on the backend)"


def suite_files(tests_dir: Path) -> list[str]:
    """Every test file of the tree, as ``tests/...`` paths, sorted."""
    root = tests_dir / "tests"
    found = []
    for path in sorted(root.rglob("*_test.py")):
        relative = path.relative_to(tests_dir).as_posix()
        if not relative.startswith(EXCLUDED_DIRECTORIES):
            found.append(relative)
    return found


def cases_for(file: str) -> int:
    return KNOWN_FILES_CASES if Path(file).name in DEFAULT_FILES else OTHER_FILES_CASES


def configuration_name(tests_dir: Path, jax_version: str, device_tag: str, x64: bool) -> str:
    """``jax-tests_jax-0.10.2_cpu_x64-off``: the tree, the JAX that runs it, tag and x64."""
    tree = re.sub(r"[^A-Za-z0-9.]+", "-", tests_dir.name).strip("-")
    return f"{tree}_jax-{jax_version}_{device_tag}_x64-{'on' if x64 else 'off'}"


def backend_record_name(configuration: str, platform: str, alone: bool) -> str:
    return f"{configuration}_{platform}{'_alone' if alone else '_with-cpu'}"


class Store:
    """A JSON-lines file of per-test-file entries (``{"file": ..., ...}``), appended to."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, dict] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # a line cut short when a run was killed
                    continue
                self.entries[entry["file"]] = entry

    def __contains__(self, file: str) -> bool:
        return file in self.entries

    def add(self, entry: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry, sort_keys=True) + "\n")
        self.entries[entry["file"]] = entry


def reference_entry(file: str, cases: int, run: RunOutcomes, seconds: float) -> dict:
    """What the XLA pass list keeps of XLA's run of one file."""
    return {"file": file, "cases": cases, "passed": sorted(run.passed()),
            "reported": len(run.tests), "collected": run.collected,
            "finished": run.finished, "dead_workers": len(run.dead_workers),
            "collect_errors": sorted(run.collect_errors), "seconds": round(seconds, 1)}


def backend_entry(file: str, reference: dict, run: RunOutcomes, seconds: float) -> dict:
    """The backend's record of one file against XLA's passes: counts, and the cause of each
    failure (a pass XLA has that the backend did not pass, reached or not)."""
    xla_passes = reference["passed"]
    failures = {}
    reached = 0
    for nodeid in xla_passes:
        outcome = run.tests.get(nodeid)
        if outcome is not None:
            reached += 1
        if outcome is None:
            failures[nodeid] = NOT_REACHED
        elif outcome.status != PASSED:
            failures[nodeid] = cause_of(outcome.message or outcome.status)
    return {"file": file, "cases": reference["cases"], "xla_passed": len(xla_passes),
            "ran": reached, "passed": len(xla_passes) - len(failures),
            "backend_only_passed": len(run.passed() - set(xla_passes)),
            "failures": failures, "dead_workers": len(run.dead_workers),
            "finished": run.finished, "collect_errors": sorted(run.collect_errors),
            "seconds": round(seconds, 1)}


@dataclasses.dataclass
class Suite:
    """One configuration's stores and how to run a side of one file."""

    settings: RunSettings
    reference: Store
    backend: Store

    def run_reference(self, file: str) -> dict:
        settings = dataclasses.replace(self.settings, cases=cases_for(file))
        side = run_side(settings, "reference", _label(file, settings), [file])
        entry = reference_entry(file, settings.cases, side.outcomes, side.seconds)
        self.reference.add(entry)
        return entry

    def run_backend(self, file: str) -> dict:
        reference = self.reference.entries[file]
        settings = dataclasses.replace(self.settings, cases=reference["cases"])
        side = run_side(settings, "backend", _label(file, settings), [file])
        entry = backend_entry(file, reference, side.outcomes, side.seconds)
        self.backend.add(entry)
        return entry


def _label(file: str, settings: RunSettings) -> str:
    stem = file.removeprefix("tests/").removesuffix(".py").replace("/", "__")
    return stem + ("_x64" if settings.x64 else "")


def run_suite(suite: Suite, files: Iterable[str], *, reference_only: bool = False,
              say=print) -> None:
    """Run what the stores lack, file by file: XLA's side first (once per configuration), then
    the backend's for files where XLA passes something."""
    for file in files:
        started = time.monotonic()
        if file not in suite.reference:
            entry = suite.run_reference(file)
            say(f"  {file}: XLA passes {len(entry['passed'])} of {entry['reported']} "
                f"({entry['seconds']:.0f} s)")
        if reference_only or file in suite.backend:
            continue
        if not suite.reference.entries[file]["passed"]:
            continue  # left out: nothing to measure the backend against
        record = suite.run_backend(file)
        say(f"  {file}: {record['passed']} of {record['xla_passed']} on the backend, ran "
            f"{record['ran']} ({time.monotonic() - started:.0f} s)")


@dataclasses.dataclass
class Totals:
    xla_passed: int = 0
    ran: int = 0
    passed: int = 0
    dead_workers: int = 0

    @property
    def rate(self) -> float | None:
        return self.passed / self.xla_passed if self.xla_passed else None


def summarize(suite: Suite, files: Iterable[str]) -> dict:
    """Totals, per-file rows, left-out and unmeasured files, causes: the report's content."""
    totals, rows, left_out, missing = Totals(), [], [], []
    causes: dict[str, dict] = {}
    for file in files:
        reference = suite.reference.entries.get(file)
        if reference is None:
            missing.append(file)
            continue
        if not reference["passed"]:
            left_out.append((file, reference["reported"]))
            continue
        record = suite.backend.entries.get(file)
        if record is None:  # not run yet: every XLA pass counts as failing
            record = {"file": file, "xla_passed": len(reference["passed"]), "ran": 0,
                      "passed": 0, "dead_workers": 0, "seconds": 0.0,
                      "failures": {n: NOT_REACHED for n in reference["passed"]},
                      "unmeasured": True}
        rows.append(record)
        totals.xla_passed += record["xla_passed"]
        totals.ran += record["ran"]
        totals.passed += record["passed"]
        totals.dead_workers += record["dead_workers"]
        for cause in record["failures"].values():
            group = causes.setdefault(cause, {"failures": 0, "files": set()})
            group["failures"] += 1
            group["files"].add(Path(file).stem)
    ordered = sorted(causes.items(), key=lambda item: -item[1]["failures"])
    return {"totals": totals, "rows": rows, "left_out": left_out, "missing": missing,
            "causes": [(cause, group["failures"], sorted(group["files"]))
                       for cause, group in ordered]}


def _percent(passed: int, of: int) -> str:
    return f"{100.0 * passed / of:6.2f}%" if of else "     -"


def table(summary: dict, platform: str) -> str:
    header = (f"{'file':<44} {'XLA passed':>10} {'ran':>12} {platform + ' passed':>18} "
              f"{'rate':>7} {'dead':>4} {'seconds':>8}")
    lines = [header, "-" * len(header)]
    for row in summary["rows"]:
        ran = f"{row['ran']} of {row['xla_passed']}"
        note = "  (not run yet)" if row.get("unmeasured") else ""
        lines.append(f"{row['file'].removeprefix('tests/'):<44} {row['xla_passed']:>10} "
                     f"{ran:>12} {row['passed']:>18} "
                     f"{_percent(row['passed'], row['xla_passed']):>7} "
                     f"{row['dead_workers']:>4} {row['seconds']:>8.0f}{note}")
    totals = summary["totals"]
    lines.append("-" * len(header))
    lines.append(f"{'total':<44} {totals.xla_passed:>10} "
                 f"{f'{totals.ran} of {totals.xla_passed}':>12} {totals.passed:>18} "
                 f"{_percent(totals.passed, totals.xla_passed):>7} {totals.dead_workers:>4}")
    if summary["left_out"]:
        lines.append("")
        lines.append("left out (XLA's CPU backend passes no test in them; tests reported):")
        lines.extend(f"  {file.removeprefix('tests/')}: 0 passed of {reported}"
                     for file, reported in summary["left_out"])
    if summary["missing"]:
        lines.append("")
        lines.append(f"no XLA pass list yet for {len(summary['missing'])} file(s): "
                     + ", ".join(f.removeprefix("tests/") for f in summary["missing"][:10])
                     + (" ..." if len(summary["missing"]) > 10 else ""))
    return "\n".join(lines)


def causes_text(summary: dict, top: int) -> str:
    causes = summary["causes"]
    if not causes:
        return "no failures among the tests that pass on XLA's CPU backend"
    lines = [f"top {min(top, len(causes))} of {len(causes)} causes (failures: cause [files])"]
    lines.extend(f"{count:>6}  {cause}  [{', '.join(files)}]"
                 for cause, count, files in causes[:top])
    return "\n".join(lines)


def as_json(summary: dict, settings: dict) -> dict:
    totals = summary["totals"]
    return {"settings": settings,
            "totals": {"xla_passed": totals.xla_passed, "ran": totals.ran,
                       "passed": totals.passed, "rate": totals.rate,
                       "dead_workers": totals.dead_workers},
            "files": summary["rows"],
            "left_out": [{"file": f, "reported": n} for f, n in summary["left_out"]],
            "not_run": summary["missing"],
            "causes": [{"cause": c, "failures": n, "files": f}
                       for c, n, f in summary["causes"]]}
