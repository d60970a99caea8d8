"""``pjrtkit jax-tests``: JAX's own test files on a backend and on XLA's CPU backend.

    pjrtkit jax-tests [--files lax_test,fft_test] [-k EXPR] [--x64] [--json PATH]
    pjrtkit jax-tests --expected-passes tests/jax_suite/expected_passes_jax-v0.10.2.txt
    pjrtkit jax-tests --multiprocess [--processes 4] [--files all_reduce_test,...] [--short]

The first form prints, per file, the tests that pass on XLA's CPU backend, how many of those pass
on the backend, the rate and the dead workers, then the failures grouped by cause. The second
(CI) runs only the listed tests on the backend, with the settings the list was written with,
and fails when one of them does not pass or a worker dies. The third runs
``tests/multiprocess/`` under JAX's own harness (``multiprocess.py``): the table of tests passing
on XLA's cpu and on the backend with N processes, and the cause of each failure; it fails when a
process ends by a signal (``--short``: CI's form, 2 processes, files that pass whole, backend
only, failing on any failure).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pjrtkit_tools.jax_tests import expected, report
from pjrtkit_tools.jax_tests.device_tag import device_tag_for
from pjrtkit_tools.jax_tests.runner import (
    DEFAULT_FILES, RunSettings, find_jax_tests_dir, recorded_file, run_file, run_side)

# What `pjrtkit jax-tests` shows (this module is the entry point pjrtkit.commands:jax-tests).
HELP = "JAX's own test files on a backend vs XLA's CPU"
DESCRIPTION = ("Run test files of a JAX source tree on a backend and on XLA's CPU backend and "
               "compare (needs JAX's test requirements: make jax-tests-env).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jax-tests", metavar="DIR",
                        help="root of a JAX source tree (tests/ and conftest.py of the JAX "
                             "version installed); default $PJRTKIT_JAX_TESTS_DIR or "
                             "../shared/jax-tests")
    parser.add_argument("--backend", default="cpu", help="pjrtkit backend name (default cpu)")
    parser.add_argument("--device-tag", choices=("cpu", "gpu", "tpu"),
                        help="jax_test_dut of the backend run (default: the backend's own, "
                             "see pjrtkit_tools.jax_tests.device_tag)")
    parser.add_argument("--reference-device-tag", choices=("cpu", "gpu", "tpu"),
                        help="jax_test_dut of the XLA cpu run (default: tpu for a backend "
                             "tested as tpu, so both runs pick the same tests and TPU "
                             "tolerances; else cpu)")
    parser.add_argument("--files", help="comma-separated test files (default: the 12 of issue 9)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--cases", type=int, default=3,
                        help="JAX_NUM_GENERATED_CASES (default 3)")
    parser.add_argument("--x64", action="store_true", help="JAX_ENABLE_X64=1")
    parser.add_argument("--alone", action="store_true",
                        help="run the backend side with JAX_PLATFORMS=pjrtkit_<backend> alone, "
                             "as users run it (default: pjrtkit_<backend>,cpu, so the few tests "
                             "that ask for XLA's cpu by name find it)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (default 2)")
    parser.add_argument("--time-limit", type=float, default=3600.0, metavar="SECONDS",
                        help="kill one pytest run after this long (default 3600)")
    parser.add_argument("--out", default="build/jax-tests",
                        help="folder for records, junitxml and logs (default build/jax-tests)")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON (rewritten "
                                                       "after each file)")
    parser.add_argument("--top", type=int, default=40, help="causes to print (default 40)")
    parser.add_argument("--from-records", action="store_true",
                        help="run nothing: report the runs recorded in --out earlier")
    parser.add_argument("--expected-passes", metavar="FILE",
                        help="CI form: run only the listed tests on the backend; exit 1 if one "
                             "does not pass or a worker dies")
    parser.add_argument("--write-expected", metavar="FILE",
                        help="write the tests that passed on both backends as an expected-pass "
                             "list")
    parser.add_argument("--expected-every", type=int, default=1, metavar="K",
                        help="with --write-expected: keep every K-th of each file's passes "
                             "(a short list for CI)")
    parser.add_argument("--multiprocess", action="store_true",
                        help="JAX's tests/multiprocess files under JAX's harness (default: "
                             "the eight of issue 24)")
    parser.add_argument("--processes", type=int, default=4,
                        help="with --multiprocess: processes per file (default 4)")
    parser.add_argument("--beside-cpu", action="store_true",
                        help="with --multiprocess: run the backend with XLA's cpu beside it "
                             "(JAX_PLATFORMS=pjrtkit_<backend>,cpu), for the tests that ask "
                             "for backend 'cpu' by name")
    parser.add_argument("--short", action="store_true",
                        help="with --multiprocess: CI's form (2 processes, the backend only, "
                             "files that pass whole; exit 1 on any failure)")
    add_suite_arguments(parser)


def add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    """``--all``: JAX's whole suite, resumable (``pjrtkit_tools.jax_tests.suite``)."""
    parser.add_argument("--all", action="store_true",
                        help="every test file of the tree (tests/multiprocess excluded), "
                             "resumable file by file; JAX_NUM_GENERATED_CASES=1 except the 12 "
                             "known files (3); --files narrows it")
    parser.add_argument("--reference-only", action="store_true",
                        help="with --all: only XLA's side (the pass list)")
    parser.add_argument("--report-only", action="store_true",
                        help="with --all: run nothing, report the stores")
    parser.add_argument("--passes-dir", default="tests/jax_suite/xla_passes",
                        help="with --all: where XLA's pass lists are kept, one per "
                             "configuration (default tests/jax_suite/xla_passes)")
    parser.add_argument("--records-dir", default="tests/jax_suite/records",
                        help="with --all: where the backend's per-file records are kept "
                             "(default tests/jax_suite/records)")


def settings_from(args) -> RunSettings:
    device_tag = device_tag_for(args.backend, args.device_tag)
    reference_tag = getattr(args, "reference_device_tag", None) or \
        ("tpu" if device_tag == "tpu" else "cpu")
    return RunSettings(tests_dir=find_jax_tests_dir(args.jax_tests), backend=args.backend,
                       device_tag=device_tag, reference_device_tag=reference_tag,
                       out_dir=Path(args.out), cases=args.cases, x64=args.x64,
                       workers=args.workers, keyword=args.keyword,
                       time_limit=args.time_limit or None, alone=args.alone)


def describe(settings: RunSettings) -> dict:
    return {"tests_dir": str(settings.tests_dir), "backend": settings.platform,
            "device_tag": settings.device_tag,
            "reference_device_tag": settings.reference_device_tag,
            "JAX_NUM_GENERATED_CASES": settings.cases,
            "JAX_ENABLE_X64": int(settings.x64), "workers": settings.workers,
            "keyword": settings.keyword,
            "JAX_PLATFORMS": settings.platform if settings.alone else f"{settings.platform},cpu"}


def run_comparison(settings: RunSettings, args) -> int:
    files = args.files.split(",") if args.files else list(DEFAULT_FILES)
    print(f"JAX tests in {settings.tests_dir} on {settings.platform} (device tag "
          f"{settings.device_tag}) and on XLA's cpu (device tag "
          f"{settings.reference_device_tag}); JAX_NUM_GENERATED_CASES={settings.cases}, "
          f"JAX_ENABLE_X64={int(settings.x64)}; logs in {settings.out_dir}", flush=True)
    comparisons = []
    for name in files:
        if args.from_records:
            comparisons.append(recorded_file(settings, name))
        else:
            comparison = run_file(settings, name)
            comparisons.append(comparison)
            print(f"  {comparison.file}: {comparison.backend_passed}/"
                  f"{comparison.reference_passed} ({comparison.seconds['backend']:.0f} s + "
                  f"{comparison.seconds['reference']:.0f} s)", flush=True)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(
                report.as_json(comparisons, describe(settings)), indent=1) + "\n")
    print()
    print(report.table(comparisons, settings.platform))
    print()
    print(report.causes_text(comparisons, args.top))
    if args.write_expected:
        every = max(1, args.expected_every)
        passing = [nodeid for c in comparisons for nodeid in c.passed_on_both[::every]]
        expected.write_expected(Path(args.write_expected), passing, settings.cases, settings.x64,
                                f"JAX tests that pass on {settings.platform} and on XLA's cpu\n"
                                f"written by: pjrtkit jax-tests --files {','.join(files)}"
                                + (f" -k '{settings.keyword}'" if settings.keyword else "")
                                + (f" --expected-every {every}" if every > 1 else ""))
    dead = [c.file for c in comparisons if c.dead_workers or c.unfinished]
    if dead:
        print(f"\nworkers died or runs did not finish in: {', '.join(dead)}", file=sys.stderr)
        return 1
    return 0


def run_expected(settings: RunSettings, path: Path) -> int:
    listed = expected.read_expected(path)
    settings.cases, settings.x64 = listed.cases, listed.x64
    settings.keyword = None
    print(f"{len(listed.nodeids)} expected passes from {path} on {settings.platform} (device "
          f"tag {settings.device_tag}, JAX_NUM_GENERATED_CASES={settings.cases}, "
          f"JAX_ENABLE_X64={int(settings.x64)})", flush=True)
    run = run_side(settings, "backend", path.stem, listed.nodeids)
    failures = expected.unexpected_failures(listed, run.outcomes)
    print(f"{len(listed.nodeids) - len(failures)} of {len(listed.nodeids)} passed in "
          f"{run.seconds:.0f} s (log: {run.log})")
    for nodeid, outcome in sorted(failures.items()):
        print(f"  {outcome.status.upper()}: {nodeid}: {outcome.message}")
    for death in run.outcomes.dead_workers:
        print(f"  DEAD WORKER: {death}")
    if not run.outcomes.finished:
        tail = run.log.read_text(errors="replace").strip().splitlines()[-5:]
        print("  the pytest run did not finish; the end of its log:\n    " + "\n    ".join(tail))
    return 1 if failures or run.outcomes.dead_workers or not run.outcomes.finished else 0


def run_multiprocess(args) -> int:
    from pjrtkit_tools.jax_tests import multiprocess

    tests_dir = find_jax_tests_dir(args.jax_tests)
    platform = args.backend if args.backend.startswith("pjrtkit_") else f"pjrtkit_{args.backend}"
    if args.beside_cpu:
        platform += ",cpu"
    processes = 2 if args.short else args.processes
    default = multiprocess.SHORT_FILES if args.short else multiprocess.FILES
    files = args.files.split(",") if args.files else list(default)
    out = Path(args.out) / "multiprocess"
    print(f"JAX's multi-process tests in {tests_dir}, {processes} processes, on {platform}"
          f"{'' if args.short else ' and XLA cpu'}; logs in {out}", flush=True)
    pairs = []
    for name in files:
        ours = multiprocess.run_file(tests_dir, name, platform, processes, out,
                                     args.time_limit)
        theirs = None if args.short else multiprocess.run_file(
            tests_dir, name, "cpu", processes, out, args.time_limit)
        pairs.append((ours, theirs))
        print(f"  {name}: {len(ours.passed)} of {len(ours.outcomes)} on {platform}"
              + ("" if theirs is None else f", {len(theirs.passed)} on cpu")
              + f" ({ours.seconds:.0f} s)", flush=True)
    print()
    print(multiprocess.table(pairs, platform))
    print()
    print(multiprocess.failures_text(pairs))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"processes": processes, "platform": platform,
            "files": [{"file": o.file, "outcomes": o.outcomes, "exit_codes": o.exit_codes,
                       "causes": o.causes,
                       "reference_passed": sorted(t.passed) if t else None}
                      for o, t in pairs]}, indent=1) + "\n")
    signalled = [o.file for o, _ in pairs if o.signals]
    if signalled:
        print(f"\nprocesses ended by a signal in: {', '.join(signalled)}", file=sys.stderr)
        return 1
    not_run = [run.file for pair in pairs for run in pair if run is not None and not run.ran]
    if not_run:
        print(f"\nthe harness ran no tests (see harness.log) in: {', '.join(not_run)}",
              file=sys.stderr)
        return 1
    if args.short and any(set(o.outcomes) - o.passed or not o.outcomes for o, _ in pairs):
        return 1
    return 0


def run_whole_suite(settings: RunSettings, args) -> int:
    from pjrtkit import jax_compat
    from pjrtkit_tools.jax_tests import suite

    configuration = suite.configuration_name(settings.tests_dir,
                                             jax_compat.installed_versions()["jax"],
                                             settings.device_tag, settings.x64)
    if settings.reference_device_tag != settings.device_tag:
        configuration += f"_xla-as-{settings.reference_device_tag}"
    passes = Path(args.passes_dir) / f"{configuration}.jsonl"
    records = Path(args.records_dir) / (
        suite.backend_record_name(configuration, settings.platform, settings.alone) + ".jsonl")
    whole = suite.Suite(settings, suite.Store(passes), suite.Store(records))
    files = suite.suite_files(settings.tests_dir)
    if args.files:
        wanted = {runner_target(settings, name) for name in args.files.split(",")}
        files = [f for f in files if f in wanted]
    print(f"JAX's suite in {settings.tests_dir}: {len(files)} files; configuration "
          f"{configuration}; XLA pass list {passes}; backend record {records} "
          f"({settings.platform}{' alone' if settings.alone else ', cpu beside it'})",
          flush=True)
    if not args.report_only:
        suite.run_suite(whole, files, reference_only=args.reference_only,
                        say=lambda line: print(line, flush=True))
    summary = suite.summarize(whole, files)
    print()
    print(suite.table(summary, settings.platform))
    print()
    print(suite.causes_text(summary, args.top))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(
            suite.as_json(summary, {**describe(settings), "configuration": configuration}),
            indent=1) + "\n")
    return 0


def runner_target(settings: RunSettings, name: str) -> str:
    from pjrtkit_tools.jax_tests.runner import test_file_path

    return test_file_path(settings, name)


def main(args) -> int:
    if args.multiprocess:
        return run_multiprocess(args)
    settings = settings_from(args)
    if args.all:
        return run_whole_suite(settings, args)
    if args.expected_passes:
        return run_expected(settings, Path(args.expected_passes))
    return run_comparison(settings, args)
