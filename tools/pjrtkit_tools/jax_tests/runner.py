"""Build and run the pytest commands for JAX's test files: one on the backend, one on XLA's CPU.

Each run is a separate pytest process (JAX picks its platforms once per process) in the JAX
source tree given (its ``tests/`` folder and ``conftest.py``), with our ``pytest_plugin`` loaded
for the device tag and the outcome record, xdist workers, junitxml next to the record, and its
whole output in a log. The backend run lists the backend first and XLA's cpu after it
(``JAX_PLATFORMS=pjrtkit_cpu,cpu``): the first is JAX's default, and the few tests that ask for
the ``cpu`` backend by name find it. Nothing is fetched or installed here; the interpreter given
must have JAX's test requirements (``make jax-tests-env``).
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pjrtkit_tools.jax_tests.compare import FileComparison, compare
from pjrtkit_tools.jax_tests.outcomes import RunOutcomes, read_record
from pjrtkit_tools.jax_tests.pytest_plugin import DUT_VARIABLE, RECORD_VARIABLE

PLUGIN_MODULE = "pjrtkit_tools.jax_tests.pytest_plugin"

# The files issue 9 measures the breadth of a backend on.
DEFAULT_FILES = (
    "lax_test.py", "lax_numpy_test.py", "lax_numpy_indexing_test.py",
    "lax_numpy_reducers_test.py", "lax_numpy_operators_test.py", "lax_control_flow_test.py",
    "lax_autodiff_test.py", "random_lax_test.py", "linalg_test.py", "fft_test.py", "nn_test.py",
    "dtypes_test.py",
)

# More targets than this go to pytest in a file (``@path``): an expected-pass list has thousands.
ARGS_IN_FILE_ABOVE = 20

# Worker deaths xdist replaces before it gives up on the run (each is reported as a dead worker).
MAX_WORKER_RESTARTS = 1000

# What xdist prints when a worker process dies (a crash, an abort, the OOM killer).
_WORKER_DEATH = re.compile(r"node down|crashed while running|replacing crashed worker")


@dataclasses.dataclass
class RunSettings:
    """How to run: which tree, backend and tag, and JAX's test settings."""

    tests_dir: Path  # a JAX source tree's root: holds tests/ and conftest.py
    backend: str  # pjrtkit backend name; JAX platform pjrtkit_<backend>
    device_tag: str  # jax_test_dut of the backend run
    out_dir: Path  # records, junitxml and logs
    cases: int = 3  # JAX_NUM_GENERATED_CASES
    x64: bool = False  # JAX_ENABLE_X64
    workers: int = 2  # xdist workers; 0 runs in the pytest process itself
    keyword: str | None = None  # pytest -k
    python: str = sys.executable
    time_limit: float | None = 3600.0  # seconds per pytest run
    reference_device_tag: str = "cpu"  # jax_test_dut of the XLA cpu run
    alone: bool = False  # JAX_PLATFORMS=<backend> alone, as users run it (no XLA cpu beside)

    @property
    def platform(self) -> str:
        return f"pjrtkit_{self.backend}"


@dataclasses.dataclass
class SideRun:
    outcomes: RunOutcomes
    seconds: float
    log: Path


def test_file_path(settings: RunSettings, name: str) -> str:
    """``lax_test`` or ``lax_test.py`` or ``tests/lax_test.py`` -> ``tests/lax_test.py``."""
    name = name.strip()
    if "/" not in name:
        name = f"tests/{name}"
    if not name.endswith(".py") and "::" not in name:
        name += ".py"
    if not (settings.tests_dir / name.split("::")[0]).is_file():
        raise FileNotFoundError(f"no test file {name} under {settings.tests_dir}")
    return name


def environment(settings: RunSettings, side: str, record: Path) -> dict[str, str]:
    env = dict(os.environ)
    if side == "backend":
        env["JAX_PLATFORMS"] = settings.platform if settings.alone else f"{settings.platform},cpu"
    else:
        env["JAX_PLATFORMS"] = "cpu"
    env[DUT_VARIABLE] = settings.device_tag if side == "backend" else \
        settings.reference_device_tag
    env["JAX_NUM_GENERATED_CASES"] = str(settings.cases)
    env["JAX_ENABLE_X64"] = "1" if settings.x64 else "0"
    env[RECORD_VARIABLE] = str(record)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the JAX tree may be shared and read-only
    return env


def pytest_command(settings: RunSettings, targets: list[str], junitxml: Path) -> list[str]:
    command = [settings.python, "-m", "pytest", "-p", PLUGIN_MODULE, "-p", "no:cacheprovider",
               "--rootdir", str(settings.tests_dir), "-q", "-rN", "--junitxml", str(junitxml)]
    if settings.workers > 0:
        # xdist stops scheduling after 4 x workers restarts by default, leaving the rest of the
        # file unrun; a backend that crashes on one dtype must still be measured on the others
        command += ["-n", str(settings.workers), "--max-worker-restart", str(MAX_WORKER_RESTARTS)]
    if settings.keyword:
        command += ["-k", settings.keyword]
    return command + targets


def run_side(settings: RunSettings, side: str, label: str, targets: list[str]) -> SideRun:
    """One pytest run (``side`` is "backend" or "reference"); never raises for a failing run."""
    out_dir = settings.out_dir.resolve()  # pytest runs in the JAX tree
    out_dir.mkdir(parents=True, exist_ok=True)

    def output(suffix: str) -> Path:
        return out_dir / f"{label}.{side}.{suffix}"

    record, log = output("jsonl"), output("log")
    record.unlink(missing_ok=True)
    if len(targets) > ARGS_IN_FILE_ABOVE:  # pytest reads arguments from a file given as @path
        argsfile = output("args")
        argsfile.write_text("\n".join(targets) + "\n", encoding="utf-8")
        targets = [f"@{argsfile}"]
    command = pytest_command(settings, targets, output("xml"))
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, cwd=settings.tests_dir, stdout=out,
                                   stderr=subprocess.STDOUT,
                                   env=environment(settings, side, record),
                                   start_new_session=True)  # its workers die with it
        try:
            returncode = process.wait(timeout=settings.time_limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
            out.write(f"\npjrtkit jax-tests: killed after {settings.time_limit:.0f} s\n")
    outcomes = read_record(record)
    if returncode < 0 and not outcomes.finished:
        outcomes.dead_workers.append(f"pytest itself: killed by signal {-returncode}")
    logged = sum(1 for line in log.read_text(errors="replace").splitlines()
                 if _WORKER_DEATH.search(line))
    if logged and not outcomes.dead_workers:
        outcomes.dead_workers.append(f"{logged} line(s) of worker deaths in {log}")
    return SideRun(outcomes, time.monotonic() - start, log)


def file_label(settings: RunSettings, target: str) -> str:
    return Path(target).stem + ("_x64" if settings.x64 else "")


def run_file(settings: RunSettings, name: str) -> FileComparison:
    """Run one test file on the backend and on XLA's CPU backend; compare the outcomes."""
    target = test_file_path(settings, name)
    label = file_label(settings, target)
    backend = run_side(settings, "backend", label, [target])
    xla = run_side(settings, "reference", label, [target])
    comparison = compare(target, xla.outcomes, backend.outcomes)
    comparison.seconds = {"backend": round(backend.seconds, 1),
                          "reference": round(xla.seconds, 1)}
    return comparison


def recorded_file(settings: RunSettings, name: str) -> FileComparison:
    """The comparison of an earlier run of ``name`` from its records in ``out_dir`` (no run):
    regroups failures after the cause rules change, or reports a run that was interrupted."""
    target = test_file_path(settings, name)
    stem = settings.out_dir / file_label(settings, target)
    return compare(target, read_record(Path(f"{stem}.reference.jsonl")),
                   read_record(Path(f"{stem}.backend.jsonl")))


def find_jax_tests_dir(explicit: str | None) -> Path:
    """The JAX tree: ``--jax-tests``, else ``PJRTKIT_JAX_TESTS_DIR``, else a ``shared/jax-tests``
    one or two levels above the current directory (this project's checkouts)."""
    given = explicit or os.environ.get("PJRTKIT_JAX_TESTS_DIR")
    candidates = [Path(given)] if given else [Path.cwd().parent / "shared" / "jax-tests",
                                              Path.cwd().parent.parent / "shared" / "jax-tests"]
    for candidate in candidates:
        if (candidate / "tests").is_dir():
            return candidate.resolve()
    raise FileNotFoundError(
        "no JAX test tree found (looked in " + ", ".join(map(str, candidates)) + "); pass "
        "--jax-tests DIR or set PJRTKIT_JAX_TESTS_DIR to a JAX source tree's root (the folder "
        "holding tests/ and conftest.py of that JAX version)")
