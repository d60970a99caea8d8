"""The multi-process mode of `pjrtkit jax-tests`: reading JAX's harness output (the summary's
exit codes and each process's absltest log) into per-test outcomes, and the table."""
from __future__ import annotations

from pjrtkit_tools.jax_tests import multiprocess

HARNESS = """Process 0, ret: 0, len(stdout): 0, len(stderr): 10; Ran 2 tests in 1.0s; OK
Process 1, ret: -6, len(stdout): 0, len(stderr): 10; Test crashed?
"""
OK_LOG = """[ RUN      ] DeviceIdTest.testJit
[       OK ] DeviceIdTest.testJit
[ RUN      ] DeviceIdTest.testPrimitive
ERROR: testPrimitive (__main__.DeviceIdTest)
RuntimeError: Unknown backend cpu. Available backends are ['pjrtkit_cpu']
[  FAILED  ] DeviceIdTest.testPrimitive
"""
CRASHED_LOG = """[ RUN      ] DeviceIdTest.testJit
F1126 client.h:80] Terminating process
"""


def test_outcomes_exit_codes_and_causes_come_from_the_logs(tmp_path):
    (tmp_path / "jax_0_stderr.log").write_text(OK_LOG)
    (tmp_path / "jax_1_stderr.log").write_text(CRASHED_LOG)
    run = multiprocess._parse("device_id_test", "pjrtkit_cpu", tmp_path, 2, HARNESS, 1.0)
    assert run.exit_codes == [0, -6]
    assert run.signals == [1]
    assert run.outcomes == {"DeviceIdTest.testJit": ["OK", "crashed"],
                            "DeviceIdTest.testPrimitive": ["FAILED", "crashed"]}
    assert run.passed == set()  # a test passes only when every process says OK
    assert run.causes["DeviceIdTest.testPrimitive"].startswith("RuntimeError: Unknown backend")


def test_the_table_counts_the_reference_passes(tmp_path):
    ours = multiprocess.FileRun("f", "pjrtkit_cpu", {"A.a": ["OK", "OK"], "A.b": ["OK", "FAILED"]},
                                [0, 1], 1.0, {"A.b": "ValueError: x"}, tmp_path)
    theirs = multiprocess.FileRun("f", "cpu", {"A.a": ["OK", "OK"], "A.b": ["OK", "OK"]},
                                  [0, 0], 1.0, {}, tmp_path)
    text = multiprocess.table([(ours, theirs)], "pjrtkit_cpu")
    assert "| f | 2 | 1 | none |" in text and "| **total** | 2 | 1 (50.0%) | |" in text
    assert multiprocess.failures_text([(ours, theirs)]) == "f: A.b: ValueError: x"


def test_the_site_fix_reads_this_environments_packages(tmp_path):
    text = (multiprocess.site_fix_dir(tmp_path) / "sitecustomize.py").read_text()
    assert "site.addsitedir(" in text and "site-packages" in text
