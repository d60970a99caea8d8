"""The conformance command, its reports, and the pytest plugin (each in a subprocess: JAX
fixes its platforms once per process)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from pjrtkit.conformance.checks import CheckResult, Outcome
from pjrtkit.conformance.report import SECTIONS, to_markdown
from pjrtkit.conformance.results import SuiteResult

ROOT = pathlib.Path(__file__).resolve().parents[2]
PJRTKIT = [sys.executable, "-m", "pjrtkit.cli"]


def _env(**extra) -> dict[str, str]:
    # (PYTEST_ADDOPTS too: the child pytests' output is read, and --durations of the outer run
    # would list the check names these tests look for)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES",
                        "PYTEST_ADDOPTS")}
    env.update(extra)
    return env


def _run(command, *, cwd=ROOT, timeout=900, **env):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=_env(**env))


def _suite_with_a_failure() -> SuiteResult:
    results = [
        CheckResult("hooks.topology.unique_ids", "hooks", Outcome.FAIL, detail="device ids are "
                    "unique", expected="unique ids", actual=[0, 0],
                    description="device ids are non-negative integers, unique in the topology"),
        CheckResult("abi.buffer.copy_raw_to_host", "abi", Outcome.UNSUPPORTED, detail="nope",
                    capability="copy_raw_to_host", description="CopyRawToHost copies bytes"),
        CheckResult("jax.sort.sort[float32-3x7]", "jax", Outcome.PASS, capability="JAX sort",
                    description="sort agrees"),
        CheckResult("hooks.copy_buffer.between_devices", "hooks", Outcome.SKIP,
                    detail="one device", description="copies between devices"),
    ]
    return SuiteResult(info={"target": "cpu", "platform": "pjrtkit_cpu"}, results=results,
                       durations={}, duration_seconds=1.0, layers=("abi", "hooks", "jax"),
                       rerun_name="cpu")


def test_markdown_report_has_every_section_a_plugin_author_needs():
    text = to_markdown(_suite_with_a_failure())
    for section in SECTIONS:
        assert f"\n## {section}\n" in text, section
    assert text.index("## Summary") < text.index("## Capabilities") < text.index(
        "## Failures") < text.index("## How to rerun one check") < text.index("## All checks")
    failures = text[text.index("## Failures"):text.index("## How to rerun one check")]
    assert "### `hooks.topology.unique_ids`" in failures
    assert "unique ids" in failures and "[0, 0]" in failures  # expected and actual
    assert "What it checks" in failures and "non-negative integers" in failures
    assert "pjrtkit conformance cpu --check hooks.topology.unique_ids" in text
    assert "pytest --pjrtkit-backend=cpu -k hooks.topology.unique_ids" in text
    capabilities = text[text.index("## Capabilities"):text.index("## Failures")]
    assert "| copy_raw_to_host | abi | absent |" in capabilities
    assert "| JAX sort | jax | present |" in capabilities
    assert "**Not conformant**" in text


def test_json_report_shape():
    data = _suite_with_a_failure().as_json()
    assert data["summary"] == {"pass": 1, "fail": 1, "unsupported": 1, "skip": 1, "total": 4}
    assert all(isinstance(data["summary"][k], int) for k in ("pass", "fail", "unsupported",
                                                             "skip"))
    for entry in data["checks"]:
        assert {"id", "layer", "outcome", "detail", "expected", "actual"} <= set(entry)
        assert entry["layer"] in ("abi", "hooks", "jax")
    assert data["checks"][0]["actual"] == [0, 0]


@pytest.fixture(scope="module")
def cpu_suite(tmp_path_factory):
    """The whole suite on the cpu plugin, run once for the tests that read its reports.

    ``make test`` has just run it (``make conformance``) and names the folder of its reports and
    printed summary in PJRTKIT_TEST_CONFORMANCE_REPORTS: read those rather than spend minutes
    running the same suite again. Anywhere else, run it here."""
    made = os.environ.get("PJRTKIT_TEST_CONFORMANCE_REPORTS")
    if made:
        folder = pathlib.Path(made)
        report, markdown, printed = (folder / f"cpu.{ext}" for ext in ("json", "md", "out"))
        if report.is_file() and markdown.is_file() and printed.is_file():
            # make conformance stops make test before pytest when the suite exits non-zero
            return subprocess.CompletedProcess(["make", "conformance"], 0,
                                               printed.read_text(), ""), report, markdown
    folder = tmp_path_factory.mktemp("cpu-conformance")
    report, markdown = folder / "cpu.json", folder / "cpu.md"
    done = _run(PJRTKIT + ["conformance", "cpu", "--json", str(report), "--markdown",
                           str(markdown)])
    return done, report, markdown


def test_conformance_on_cpu_passes_with_enough_checks_per_layer(cpu_suite):
    done, report, markdown = cpu_suite
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["summary"]["fail"] == 0
    passed = {layer: counts["pass"] for layer, counts in data["layers"].items()}
    assert passed["abi"] >= 60 and passed["hooks"] >= 20 and passed["jax"] >= 200, passed
    assert data["target"]["platform"] == "pjrtkit_cpu"
    assert data["target"]["pjrt_api_version"].startswith("0.")
    assert any(c["capability"] for c in data["capabilities"])
    text = markdown.read_text()
    for section in SECTIONS:
        assert f"## {section}" in text
    surface = data["jax_surface"]
    assert surface["fail"] == 0 and surface["checks"] >= 800, surface
    assert f"covers {surface['percent']:g}% of the JAX surface" in done.stdout
    if surface["unsupported"]:
        assert "**Conformant**:" not in text and "unsupported: " in text


COVERAGE_DOC = ROOT / "docs" / "coverage.md"


def test_docs_coverage_md_is_what_the_generator_makes_of_a_fresh_run(cpu_suite, tmp_path):
    _, report, _ = cpu_suite
    data = json.loads(report.read_text())
    committed = COVERAGE_DOC.read_text()
    versions = f"on jax {data['target']['jax_version']} / jaxlib {data['target']['jaxlib_version']}"
    if versions not in committed:
        pytest.skip(f"docs/coverage.md is generated on the pinned JAX set, not {versions}")
    generated = tmp_path / "coverage.md"
    done = _run(PJRTKIT + ["coverage", "cpu", "--from-json", str(report), "--output",
                           str(generated)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert generated.read_text() == committed, (
        "docs/coverage.md is out of date: regenerate it with "
        "`.venv/bin/pjrtkit coverage cpu --output docs/coverage.md`")


def test_coverage_table_marks_every_outcome():
    from pjrtkit.conformance.coverage_table import render

    result = SuiteResult(
        info={"target": "cpu", "backend": "cpu", "platform": "pjrtkit_cpu",
              "jax_version": "0.10.2", "jaxlib_version": "0.10.2"},
        results=[CheckResult("jax.dtype.add[int4-3x4]", "jax", Outcome.UNSUPPORTED,
                             capability="JAX dtype int4"),
                 CheckResult("jax.dtype.add[float32-3x4]", "jax", Outcome.PASS),
                 CheckResult("jax.dtype.compare[float32-3x4]", "jax", Outcome.FAIL),
                 CheckResult("jax.linalg.eigh[float32-5x5]", "jax", Outcome.PASS),
                 CheckResult("jax.linalg.eigh[float32-3x4x4]", "jax", Outcome.UNSUPPORTED),
                 CheckResult("jax.linalg.qr[float64-6x4]", "jax", Outcome.SKIP),
                 CheckResult("hooks.topology.unique_ids", "hooks", Outcome.PASS)],
        durations={}, duration_seconds=0.0, layers=("hooks", "jax"))
    text = render(result.as_json())
    assert text == render(result.as_json())  # nothing in it changes between renders
    assert "`pjrtkit coverage cpu --output docs/coverage.md`" in text
    assert "| op | int4 | float32 |" in text and "| add | – | ✓ |" in text
    assert "| compare |   | FAIL |" in text
    assert "| op | float32 | float64 |" in text
    assert "| eigh | ½ |   |" in text and "| qr |   | skip |" in text
    assert "| int4 | 1 | 0 | 1 | 0 | 0 |" in text
    assert "covers 40% of the JAX surface (2 of 5 checks)" in text
    assert "hooks" not in text.split("## By dtype")[1]


def test_check_selection_and_exit_status(tmp_path):
    report = tmp_path / "r.json"
    done = _run(PJRTKIT + ["conformance", "cpu", "--layer", "hooks,jax", "--json", str(report),
                           "--check", "hooks.topology.unique_ids",
                           "jax.elementwise.add[float32-3x4]", "jax.sort.*"])
    assert done.returncode == 0, done.stderr[-3000:]
    ids = [c["id"] for c in json.loads(report.read_text())["checks"]]
    assert ids[:2] == ["hooks.topology.unique_ids", "jax.elementwise.add[float32-3x4]"]
    assert len(ids) > 3 and all(i.startswith("jax.sort.") for i in ids[2:])
    unknown = _run(PJRTKIT + ["conformance", "cpu", "--check", "hooks.topology.uniqe_ids"])
    assert unknown.returncode == 2
    assert "hooks.topology.unique_ids" in unknown.stderr  # a suggestion
    both = _run(PJRTKIT + ["conformance", "cpu", "--library", "/nonexistent.so"])
    assert both.returncode == 2


def test_jobs_deal_the_jax_layer_over_children_and_report_as_one_process(tmp_path):
    """--jobs 2: the JAX layer's checks run in two child processes beside the other layers;
    the report lists the same checks in the same order with the same outcomes as one process's,
    each with its own duration."""
    selection = ["abi.event.", "hooks.topology.", "jax.sort.", "jax.cumulative.", "jax.fft."]
    reports = {}
    for jobs in (1, 2):
        reports[jobs] = tmp_path / f"jobs{jobs}.json"
        done = _run(PJRTKIT + ["conformance", "cpu", "--jobs", str(jobs), "--quiet", "--json",
                               str(reports[jobs]), "--check", *selection])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    one, two = (json.loads(reports[j].read_text()) for j in (1, 2))
    assert [(c["id"], c["outcome"]) for c in two["checks"]] == \
        [(c["id"], c["outcome"]) for c in one["checks"]]
    layers = [c["layer"] for c in two["checks"]]
    assert layers.index("jax") > layers.index("hooks") > layers.index("abi") == 0
    assert sum(c["layer"] == "jax" for c in two["checks"]) > 20
    assert all(c["duration_seconds"] > 0 for c in two["checks"] if c["layer"] == "jax")
    assert two["summary"] == one["summary"] and two["jax_surface"] == one["jax_surface"]
    # the JAX layer ran in the children: this process never started a JAX backend
    probe = ("import json; from jax._src import xla_bridge; "
             "from pjrtkit.conformance.runner import Target, run_suite; "
             "r = run_suite(Target.backend_named('cpu'), check_ids=['jax.sort.'], jobs={jobs}); "
             "print(json.dumps([len(r.results), xla_bridge.backends_are_initialized()]))")
    sorts = sum(c["id"].startswith("jax.sort.") for c in one["checks"])
    for jobs, started in ((1, True), (2, False)):
        ran = _run([sys.executable, "-c", probe.format(jobs=jobs)])
        assert ran.stdout and json.loads(ran.stdout.splitlines()[-1]) == [sorts, started], \
            ran.stderr[-3000:]


def test_library_mode_runs_layer_1_only():
    spec = __import__("importlib.util").util.find_spec("xla_plugins")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("xla-cpu-pjrt is not installed (pip install -e '.[dev]')")
    library = pathlib.Path(list(spec.submodule_search_locations)[0]) / "xla_cpu_pjrt" / \
        "xla_cpu_pjrt.so"
    done = _run(PJRTKIT + ["conformance", "--library", str(library), "--layer", "hooks"])
    assert done.returncode == 2 and "do not apply" in done.stderr


PLUGIN_FAILING_CHECK = textwrap.dedent("""
    from pjrtkit.conformance.checks import check, Failed

    @check("hooks.zz_selftest_always_fails", layer="hooks")
    def always_fails(backend):
        '''a check that always fails (tests the pytest plugin's failure report)'''
        raise Failed("the answer", expected=42, actual=41)
""")

PLUGIN_JAX_STARTED_WITHOUT_PJRTKIT = textwrap.dedent("""
    def pytest_configure(config):
        import jax
        jax.config.update("jax_platforms", "cpu")
        jax.devices()
""")


def test_pytest_plugin_one_item_per_check_with_outcomes(tmp_path):
    (tmp_path / "zz_failing_check.py").write_text(PLUGIN_FAILING_CHECK)
    done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                 "zz_failing_check", "--pjrtkit-backend=cpu", "-rs", "-k",
                 "hooks.topology or copy_buffer.between_devices or zz_selftest or "
                 "negative_stride or jax.elementwise.add[float32-3x4]"],
                PYTHONPATH=str(tmp_path))
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "1 failed" in out and "failed" in out
    assert "expected: 42" in out and "actual:   41" in out
    assert "SKIP: the client has 1 device" in out
    assert "UNSUPPORTED (JAX host_input)" in out or "negative_stride" not in out
    passed = int(out.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 11  # 10 topology checks + the jax case
    assert "pjrtkit conformance: pjrtkit_cpu covers " in out and "of the items that ran" in out
    assert "hooks.topology.unique_ids" in _run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pjrtkit-backend=cpu",
         "--co", "-q", "-k", "unique_ids"]).stdout


def test_pytest_plugin_runs_layer_3_in_a_fresh_process_when_jax_started_without_it(tmp_path):
    (tmp_path / "zz_jax_started.py").write_text(PLUGIN_JAX_STARTED_WITHOUT_PJRTKIT)
    done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                 "zz_jax_started", "--pjrtkit-backend=cpu", "--pjrtkit-layer=jax", "-k",
                 "jax.elementwise.add[float32-3x4] or jax.sort.sort[int32-3x7]"],
                PYTHONPATH=str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout


def test_without_the_option_the_plugin_collects_nothing_extra():
    done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q",
                 "tests/test_hookspecs.py"])
    assert done.returncode == 0
    assert "pjrtkit-conformance" not in done.stdout
    assert "hooks.topology" not in done.stdout
