"""Grouping of failures by cause, per-test outcomes from a record, and the comparison."""
import json

from pjrtkit_tools.jax_tests.causes import cause_of
from pjrtkit_tools.jax_tests.compare import compare
from pjrtkit_tools.jax_tests.outcomes import UNFINISHED, RunOutcomes, TestOutcome, read_record


def unimplemented(op, dtype, shape, where):
    return (f"jax.errors.JaxRuntimeError: UNIMPLEMENTED: pjrtkit_cpu: no lowering rule for op "
            f"'{op}' ({op}(tensor<{shape}x{dtype}>) -> (tensor<{shape}x{dtype}>) at "
            f"loc(\"{where}\":12:3)). The backend does not implement this StableHLO op")


def test_unimplemented_groups_by_op_and_dtype_not_shape_or_location():
    a = cause_of(unimplemented("stablehlo.cbrt", "f32", "3x4", "lax_test.py"))
    b = cause_of(unimplemented("stablehlo.cbrt", "f32", "7", "other.py"))
    c = cause_of(unimplemented("stablehlo.cbrt", "f16", "3x4", "lax_test.py"))
    d = cause_of(unimplemented("stablehlo.erf", "f32", "3x4", "lax_test.py"))
    assert a == b
    assert len({a, c, d}) == 3
    assert "stablehlo.cbrt" in a and "tensor<f32>" in a and "loc(" not in a


def test_pjrtkit_tensor_types_and_short_locations():
    one = cause_of("UNIMPLEMENTED: no lowering rule for op 'stablehlo.triangular_solve' "
                   "(stablehlo.triangular_solve(tensor<10x3xfloat32>) -> (tensor<10x1xfloat32>) "
                   'at "triangular_solve"). The backend does not implement this StableHLO op')
    two = cause_of("UNIMPLEMENTED: no lowering rule for op 'stablehlo.triangular_solve' "
                   "(stablehlo.triangular_solve(tensor<5x2xfloat32>) -> (tensor<5x1xfloat32>) "
                   'at "triangular_solve"). The backend does not implement this StableHLO op')
    assert one == two
    assert "tensor<float32>" in one and "ADDR" not in one and "at " not in one
    assert cause_of("object at 0x7f56a2c0 deleted") == "object at ADDR deleted"


def test_numbers_vanish_but_dtype_names_keep_their_digits():
    one = cause_of("AssertionError: Not equal to tolerance rtol=1e-06, atol=1e-06 for float32")
    two = cause_of("AssertionError: Not equal to tolerance rtol=0.001, atol=5 for float32")
    assert one == two
    assert "float32" in one and "1e" not in one
    assert (cause_of("TypeError: shape (3, 4) vs (2,)")
            == cause_of("TypeError: shape (5, 1) vs (9,)"))


def test_only_the_first_non_empty_line_counts():
    assert cause_of("\n\nValueError: bad axis 3\nTraceback detail 17") == "ValueError: bad axis N"
    assert cause_of("") == "(no message)"


def write_record(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"cut sh')


def test_record_folds_phases_into_one_outcome_per_test(tmp_path):
    record = tmp_path / "run.jsonl"
    write_record(record, [
        {"nodeid": "t::ok", "when": "setup", "outcome": "passed"},
        {"nodeid": "t::ok", "when": "call", "outcome": "passed"},
        {"nodeid": "t::ok", "when": "teardown", "outcome": "passed"},
        {"nodeid": "t::bad", "when": "setup", "outcome": "passed"},
        {"nodeid": "t::bad", "when": "call", "outcome": "failed", "message": "ValueError: x"},
        {"nodeid": "t::bad", "when": "teardown", "outcome": "passed"},
        {"nodeid": "t::skip", "when": "setup", "outcome": "skipped", "message": "not cpu"},
        {"nodeid": "t::xf", "when": "call", "outcome": "skipped", "xfail": True},
        {"nodeid": "t::setup_error", "when": "setup", "outcome": "failed", "message": "E"},
        {"nodeid": "t::crashed", "when": "???", "outcome": "failed",
         "message": "worker 'gw1' crashed while running 't::crashed'"},
        {"nodeid": "t::running", "when": "setup", "outcome": "passed"},
        {"worker_down": "gw1", "error": "Not properly terminated"},
    ])
    run = read_record(record)
    status = {nodeid: outcome.status for nodeid, outcome in run.tests.items()}
    assert status == {"t::ok": "passed", "t::bad": "failed", "t::skip": "skipped",
                      "t::xf": "xfailed", "t::setup_error": "error", "t::crashed": "failed",
                      "t::running": "error"}
    assert run.dead_workers == ["gw1: Not properly terminated"]
    assert not run.finished  # the killed run never wrote session_finished


def test_comparison_counts_only_tests_that_pass_on_xla():
    reference = RunOutcomes(tests={
        "a": TestOutcome("passed"), "b": TestOutcome("passed"), "c": TestOutcome("passed"),
        "d": TestOutcome("failed", "E"), "e": TestOutcome("passed")}, finished=True)
    backend = RunOutcomes(tests={
        "a": TestOutcome("passed"),
        "b": TestOutcome("failed", unimplemented("stablehlo.cbrt", "f32", "3", "f.py")),
        "c": TestOutcome("failed", unimplemented("stablehlo.cbrt", "f32", "9x9", "g.py")),
        "d": TestOutcome("passed")}, finished=True, dead_workers=["gw0: boom"])
    result = compare("tests/f_test.py", reference, backend)
    assert (result.reference_passed, result.backend_passed) == (4, 1)
    assert result.rate == 0.25
    assert result.backend_only_passed == 1
    assert set(result.failures) == {"b", "c", "e"}
    assert result.failures["e"].status == "missing"
    causes = result.causes()
    assert sorted(causes.values()) == [1, 2]  # b and c share a cause; e has its own
    assert result.dead_workers == {"backend": ["gw0: boom"]}
    assert result.passed_on_both == ["a"]
    assert result.as_json()["failures"]["b"]["cause"] == result.as_json()["failures"]["c"]["cause"]


def test_a_stopped_backend_run_counts_only_what_it_reached():
    reference = RunOutcomes(tests={name: TestOutcome("passed") for name in "abcd"},
                            finished=True)
    backend = RunOutcomes(tests={"a": TestOutcome("passed"), "b": TestOutcome("failed", "E"),
                                 "c": UNFINISHED}, finished=False)
    result = compare("tests/f_test.py", reference, backend)
    assert (result.reference_passed, result.backend_passed, result.not_reached) == (2, 1, 2)
    assert list(result.failures) == ["b"]
    assert result.unfinished == ["backend"]
