"""``pjrtkit jax-tests --all``: the whole-suite runner on a small fake JAX tree, with real pytest
processes on pjrtkit_cpu and on XLA's cpu: file discovery (tests/multiprocess left out,
sub-folders in), the XLA pass list and the backend's record as per-file JSON lines, resuming
(a second run runs nothing), and the counting rules (a backend skip or a test never reached
counts as failing; a file XLA passes nothing in is left out and listed)."""
import json
import textwrap

import pytest

from pjrtkit_tools.jax_tests import runner, suite
from pjrtkit_tools.jax_tests.runner import RunSettings

MEASURED = textwrap.dedent('''
    import jax
    import numpy as np
    import pytest

    def on_backend():
        return jax.devices()[0].platform != "cpu"

    def test_passes_on_both():
        np.testing.assert_array_equal(jax.jit(lambda a: a * 2)(np.arange(3)), [0, 2, 4])

    def test_fails_on_the_backend():
        assert not on_backend(), "backend says no"

    def test_skipped_on_the_backend():
        if on_backend():
            pytest.skip("not on this backend")

    def test_fails_everywhere():
        assert False
''')
NOTHING_PASSES = "def test_fails():\n    assert False\n"
# One xdist worker runs this module (make test passes `--dist loadgroup`): its module fixture runs
# the whole-suite runner (pytest processes on two backends), and each worker given some of its
# tests would run it again.
pytestmark = pytest.mark.xdist_group("test_jax_suite_whole")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("jax_tree")
    for name, text in {"tests/a_test.py": MEASURED, "tests/sub/b_test.py": NOTHING_PASSES,
                       "tests/multiprocess/c_test.py": NOTHING_PASSES,
                       "tests/helpers.py": "X = 1\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def make_suite(tree, out):
    settings = RunSettings(tests_dir=tree, backend="cpu", device_tag="cpu", out_dir=out / "logs",
                           workers=0, time_limit=300)
    return suite.Suite(settings, suite.Store(out / "passes.jsonl"),
                       suite.Store(out / "record.jsonl"))


@pytest.fixture(scope="module")
def measured(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    whole = make_suite(tree, out)
    files = suite.suite_files(tree)
    suite.run_suite(whole, files, say=lambda line: None)
    return out, files


def test_every_test_file_but_the_multiprocess_ones(tree):
    assert suite.suite_files(tree) == ["tests/a_test.py", "tests/sub/b_test.py"]


def test_the_known_files_keep_three_cases_the_others_one():
    assert suite.cases_for("tests/lax_test.py") == 3
    assert suite.cases_for("tests/api_test.py") == suite.cases_for("tests/pallas/x_test.py") == 1


def test_xla_pass_list_and_backend_record_are_one_line_per_file(measured):
    out, _ = measured
    passes = [json.loads(line) for line in (out / "passes.jsonl").read_text().splitlines()]
    assert [p["file"] for p in passes] == ["tests/a_test.py", "tests/sub/b_test.py"]
    a = passes[0]
    assert a["cases"] == 1 and a["reported"] == 4
    assert a["passed"] == ["tests/a_test.py::" + n for n in (
        "test_fails_on_the_backend", "test_passes_on_both", "test_skipped_on_the_backend")]
    record = [json.loads(line) for line in (out / "record.jsonl").read_text().splitlines()]
    assert [r["file"] for r in record] == ["tests/a_test.py"]  # b: XLA passes nothing
    assert (record[0]["xla_passed"], record[0]["ran"], record[0]["passed"]) == (3, 3, 1)
    assert record[0]["failures"] == {
        "tests/a_test.py::test_fails_on_the_backend": "AssertionError: backend says no",
        "tests/a_test.py::test_skipped_on_the_backend": "Skipped: not on this backend"}


def test_a_second_run_resumes_with_nothing_left_to_run(tree, measured, monkeypatch):
    out, files = measured
    monkeypatch.setattr(suite, "run_side", lambda *a, **k: pytest.fail("ran again"))
    suite.run_suite(make_suite(tree, out), files, say=lambda line: None)


def test_the_report_counts_unreached_and_unrun_tests_as_failing(tree, measured, tmp_path):
    out, files = measured
    summary = suite.summarize(make_suite(tree, out), files)
    assert (summary["totals"].xla_passed, summary["totals"].passed) == (3, 1)
    assert summary["left_out"] == [("tests/sub/b_test.py", 1)]
    text = suite.table(summary, "pjrtkit_cpu")
    assert "3 of 3" in text and "33.33%" in text and "sub/b_test.py: 0 passed of 1" in text
    # a backend run stopped before the end: what it never reported is a failure, not reached
    partial = suite.backend_entry("tests/a_test.py", json.loads(
        (out / "passes.jsonl").read_text().splitlines()[0]), runner.read_record(tmp_path / "x"),
        0.0)
    assert (partial["ran"], partial["passed"]) == (0, 0)
    assert set(partial["failures"].values()) == {suite.NOT_REACHED}
    # a file with an XLA pass list but no backend record yet counts every pass as failing
    (out / "record.jsonl").rename(tmp_path / "record.jsonl")
    try:
        empty = suite.summarize(make_suite(tree, out), files)
    finally:
        (tmp_path / "record.jsonl").rename(out / "record.jsonl")
    assert (empty["totals"].xla_passed, empty["totals"].passed) == (3, 0)
    assert "(not run yet)" in suite.table(empty, "pjrtkit_cpu")


def test_the_command_reports_the_stores_of_its_configuration(tree, measured, tmp_path, capsys):
    import argparse

    from pjrtkit import jax_compat
    from pjrtkit_tools.jax_tests.command import add_arguments, main

    out, _ = measured
    configuration = suite.configuration_name(tree, jax_compat.installed_versions()["jax"],
                                             "cpu", False)
    assert configuration.endswith("_cpu_x64-off")
    (tmp_path / "passes").mkdir()
    (tmp_path / "records").mkdir()
    (tmp_path / "passes" / f"{configuration}.jsonl").write_text(
        (out / "passes.jsonl").read_text())
    (tmp_path / "records" / f"{configuration}_pjrtkit_cpu_with-cpu.jsonl").write_text(
        (out / "record.jsonl").read_text())
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--all", "--report-only", "--jax-tests", str(tree),
                              "--passes-dir", str(tmp_path / "passes"),
                              "--records-dir", str(tmp_path / "records"),
                              "--json", str(tmp_path / "report.json")])
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "a_test.py" in printed and "3 of 3" in printed and "33.33%" in printed
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["totals"]["xla_passed"] == 3 and report["totals"]["passed"] == 1
    assert report["settings"]["configuration"] == configuration
