"""The runner end to end: real pytest processes, real JAX, on pjrtkit_cpu and on XLA's cpu.

A small test file stands in for a JAX test file (this environment has no xdist and pytest 9, so
it runs without workers): one test passes on both backends, one passes only where the device tag
was set by our pytest plugin, and one fails only on the backend, so the comparison, the
expected-pass check and the dead-run detection each have something to catch.
"""
import argparse
import textwrap

import pytest

from pjrtkit_tools.jax_tests import expected
from pjrtkit_tools.jax_tests import runner
from pjrtkit_tools.jax_tests.command import add_arguments, run_expected
from pjrtkit_tools.jax_tests.runner import RunSettings, run_file

TEST_FILE = textwrap.dedent('''
    import os
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax._src import test_util as jtu

    def test_add_matches_numpy():
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_allclose(np.asarray(jax.jit(lambda a: a + a)(x)), x + x)

    def test_device_tag_is_cpu():
        assert jtu.device_under_test() == "cpu"

    def test_default_platform_is_xla_cpu():
        assert jax.devices()[0].platform == "cpu", f"default platform {jax.devices()[0].platform}"

    def test_capture_stdout_sees_what_the_program_prints():
        # JAX's test_util binds capture_stdout to the sys.stdout of its import: the runner's
        # plugin must import it where pytest captures output, as the test modules do
        with jtu.capture_stdout() as output:
            jax.jit(lambda v: jax.debug.print("v={}", v))(np.int32(7))
            jax.effects_barrier()
        assert output() == "v=7\\n"

    def test_dies_when_asked():
        if os.environ.get("JAX_SUITE_TEST_DIE") and jax.devices()[0].platform != "cpu":
            os._exit(3)
''')
NODE = "tests/fake_jax_test.py::"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("jax_tree")
    (root / "tests").mkdir()
    (root / "tests" / "fake_jax_test.py").write_text(TEST_FILE)
    return root


def settings(tree, tmp_path, **kwargs):
    return RunSettings(tests_dir=tree, backend="cpu", device_tag="cpu", out_dir=tmp_path,
                       workers=0, time_limit=300, **kwargs)


@pytest.fixture(scope="module")
def comparison(tree, tmp_path_factory):
    return run_file(settings(tree, tmp_path_factory.mktemp("out")), "fake_jax_test")


def test_comparison_counts_backend_failures_among_xla_passes(comparison):
    assert comparison.reference_passed == 5
    assert comparison.backend_passed == 4
    assert list(comparison.failures) == [NODE + "test_default_platform_is_xla_cpu"]
    assert "default platform pjrtkit_cpu" in comparison.failures[
        NODE + "test_default_platform_is_xla_cpu"].message
    # the plugin set the tag: without it device_under_test() is "pjrtkit_cpu" and this fails
    assert NODE + "test_device_tag_is_cpu" in comparison.passed_on_both
    assert not comparison.dead_workers and not comparison.unfinished
    assert NODE + "test_capture_stdout_sees_what_the_program_prints" in comparison.passed_on_both
    assert comparison.ran == {"reference": (5, 5), "backend": (5, 5)}


def expected_list(tmp_path, names):
    path = tmp_path / "expected.txt"
    expected.write_expected(path, [NODE + name for name in names], cases=3, x64=False,
                            about="test list")
    return path


def cli_args():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([])


def test_expected_pass_check_passes_when_every_listed_test_passes(tree, tmp_path, capsys):
    path = expected_list(tmp_path, ["test_add_matches_numpy", "test_device_tag_is_cpu"])
    assert run_expected(settings(tree, tmp_path), path) == 0
    assert "2 of 2 passed" in capsys.readouterr().out


def test_expected_pass_check_fails_when_a_listed_test_fails(tree, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "ARGS_IN_FILE_ABOVE", 0)  # the node ids go through an @file
    path = expected_list(tmp_path, ["test_add_matches_numpy", "test_default_platform_is_xla_cpu"])
    assert run_expected(settings(tree, tmp_path), path) == 1
    out = capsys.readouterr().out
    assert "1 of 2 passed" in out
    assert "FAILED: " + NODE + "test_default_platform_is_xla_cpu" in out


def test_expected_pass_check_fails_when_a_listed_test_is_gone(tree, tmp_path, capsys):
    path = expected_list(tmp_path, ["test_add_matches_numpy", "test_renamed_since"])
    assert run_expected(settings(tree, tmp_path), path) == 1
    assert "MISSING: " + NODE + "test_renamed_since" in capsys.readouterr().out


def test_expected_pass_check_fails_when_the_run_dies(tree, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JAX_SUITE_TEST_DIE", "1")
    path = expected_list(tmp_path, ["test_add_matches_numpy", "test_dies_when_asked"])
    assert run_expected(settings(tree, tmp_path), path) == 1
    out = capsys.readouterr().out
    assert "did not finish" in out


def test_settings_come_from_the_list_header(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("# about\n# settings: cases=5 x64=1\ntests/a.py::t  # a comment\n\n")
    listed = expected.read_expected(path)
    assert (listed.nodeids, listed.cases, listed.x64) == (["tests/a.py::t"], 5, True)
    assert cli_args().cases == 3


def test_a_tpu_backend_is_compared_with_xla_cpu_tested_as_tpu_too(tmp_path):
    """Issue 11: JAX's tests pick tests and tolerances by the device tag, so a virtual TPU and
    its XLA cpu reference both run as ``tpu``; cpu backends keep the cpu tag on both sides."""
    from pjrtkit_tools.jax_tests.command import settings_from
    from pjrtkit_tools.jax_tests.runner import DUT_VARIABLE, environment

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    for backend, tag in (("tpu", "tpu"), ("cpu", "cpu")):
        s = settings_from(parser.parse_args(["--jax-tests", str(tree), "--backend", backend]))
        assert environment(s, "reference", tmp_path / "r.jsonl")[DUT_VARIABLE] == tag
        assert environment(s, "backend", tmp_path / "b.jsonl")[DUT_VARIABLE] == tag
    s = settings_from(parser.parse_args(["--jax-tests", str(tree), "--backend", "tpu",
                                         "--reference-device-tag", "cpu"]))
    assert environment(s, "reference", tmp_path / "r.jsonl")[DUT_VARIABLE] == "cpu"


def test_vendor_checks_answer_as_the_reference_on_a_pjrtkit_gpu_platform(monkeypatch):
    """Tag gpu on pjrtkit_cuda: JAX's is_device_cuda() would find "cuda" in the platform
    version and ask XLA's (absent) gpu backend for its compute capability; the plugin makes the
    vendor checks answer False, as on the XLA cpu reference run."""
    import importlib

    from pjrtkit_tools.jax_tests.pytest_plugin import answer_vendor_checks_as_the_reference

    test_util = importlib.import_module("jax._src.test_util")
    monkeypatch.setattr(test_util, "is_device_cuda", lambda: True)
    monkeypatch.setattr(test_util, "is_device_rocm", lambda: True)
    answer_vendor_checks_as_the_reference(test_util)
    assert not test_util.is_device_cuda() and not test_util.is_device_rocm()
    assert not test_util.is_cuda_compute_capability_at_least("8.0")
    assert not test_util.is_cuda_compute_capability_equal("9.0")
    assert {"cuda", "rocm"}.isdisjoint(test_util._get_device_tags())
