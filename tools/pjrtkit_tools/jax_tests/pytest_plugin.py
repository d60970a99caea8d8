"""pytest plugin for runs of JAX's own tests: sets the device tag and records every outcome.

Loaded explicitly (``-p pjrtkit_tools.jax_tests.pytest_plugin``) by the runner, never through
an entry point, so it touches no other pytest run. Two environment variables drive it:

``PJRTKIT_JAX_TEST_DUT``
    the device tag. JAX's test_util reads ``jax_test_dut`` when a test module is collected (its
    skip decorators ask ``device_under_test()``), and the flag exists only once test_util is
    imported, so it is set here when collection starts (before any test module is imported), in
    the controller and in every xdist worker (each collects on its own).
``PJRTKIT_JAX_TEST_RECORD``
    a file to which the controlling process appends one JSON line per test report and per
    worker that went down. Unlike junitxml, written once at the end, the record survives a run
    that is killed at its time limit or whose controller dies.

A pjrtkit GPU platform tested with the tag ``gpu`` is not XLA's CUDA or ROCm backend, but
JAX's ``jtu.is_device_cuda()`` finds "cuda" in its platform version and then asks XLA's
``gpu`` backend for the compute capability (``xla_bridge.local_devices(backend="gpu")``),
which does not exist here: every test that asks fails before it starts. So on a pjrtkit
platform the vendor checks answer False, as they do for the XLA cpu reference run under the
same tag, and both runs select the same tests (``answer_vendor_checks_as_the_reference``).
"""
from __future__ import annotations

import importlib
import json
import os

import pytest

DUT_VARIABLE = "PJRTKIT_JAX_TEST_DUT"
RECORD_VARIABLE = "PJRTKIT_JAX_TEST_RECORD"


_tag_set = False


def pytest_make_collect_report(collector):
    # Before the first test module is imported, where pytest captures output; not in
    # pytest_configure or at session start: test_util binds ``capture_stdout`` to the
    # ``sys.stdout`` of its import, which must be the capturing one the tests print to (else
    # every test of jtu.capture_stdout sees no output, on XLA's cpu as on the backend).
    global _tag_set
    tag = os.environ.get(DUT_VARIABLE)
    if tag and not _tag_set and isinstance(collector, pytest.Module):
        import jax

        test_util = importlib.import_module("jax._src.test_util")  # defines jax_test_dut
        jax.config.update("jax_test_dut", tag)
        if os.environ.get("JAX_PLATFORMS", "").startswith("pjrtkit_"):
            answer_vendor_checks_as_the_reference(test_util)
        _tag_set = True


def pytest_configure(config):
    path = os.environ.get(RECORD_VARIABLE)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(OutcomeRecorder(path), "pjrtkit-jax-tests-recorder")


def answer_vendor_checks_as_the_reference(test_util) -> None:
    """``is_device_cuda`` and ``is_device_rocm`` of JAX's test_util answer False (see the
    module docstring); the checks built on them (compute capability, device tags "cuda" and
    "rocm") follow, since test_util calls them through its module globals."""
    test_util.is_device_cuda = lambda: False
    test_util.is_device_rocm = lambda: False


def first_line_of_failure(report) -> str:
    """The failure's own message: exception type and the first non-empty line after it."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr or "")
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        text = str(longrepr[2])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0]
    if head.endswith(":") and len(lines) > 1:  # "AssertionError:" then the message below it
        head = f"{head} {lines[1]}"
    return head[:500]


class OutcomeRecorder:
    """Appends the reports the controller sees (its own or forwarded by xdist workers)."""

    def __init__(self, path: str):
        self.path = path
        self.stream = open(path, "a", encoding="utf-8")  # closed at unconfigure

    def write(self, record: dict) -> None:
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()

    def pytest_runtest_logreport(self, report):
        record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                  "seconds": round(getattr(report, "duration", 0.0), 3)}
        if getattr(report, "wasxfail", None) is not None:
            record["xfail"] = True
        if report.outcome != "passed":
            record["message"] = first_line_of_failure(report)
        self.write(record)

    def pytest_collectreport(self, report):
        if report.outcome == "failed":
            self.write({"collect_error": report.nodeid, "message": first_line_of_failure(report)})

    def pytest_collection_finish(self, session):
        if not session.config.pluginmanager.hasplugin("dsession"):  # no xdist: we collected
            self.write({"collected": len(session.items)})

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: each worker's collection
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.write({"collected": len(ids)})

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: absent when running without workers
    def pytest_testnodedown(self, node, error):
        if error:
            self.write({"worker_down": getattr(node, "gateway", node).id, "error": str(error)})

    def pytest_sessionfinish(self, session, exitstatus):
        self.write({"session_finished": int(exitstatus)})

    def pytest_unconfigure(self, config):
        self.stream.close()
