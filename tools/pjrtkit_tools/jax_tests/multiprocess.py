"""JAX's multi-process test files (``tests/multiprocess/``) under JAX's own harness
(``jax._src.test_multiprocess``): each file runs as absltest in every one of N processes joined by
``jax.distributed``, on a backend and on XLA's CPU backend; results come from the per-process
logs the harness writes (``jax_<i>_stderr.log``). A test passes when every process reports it
OK; a process that ends by a signal is reported as such.

The harness starts its workers as ``/proc/self/exe`` (the base interpreter, not a virtual
environment's ``bin/python``), so the workers would not see the environment's packages: the run
puts on ``PYTHONPATH`` a directory whose ``sitecustomize.py`` adds this interpreter's
site-packages (``site.addsitedir``, which also reads the ``.pth`` files of editable installs).
pjrtkit's parser child inherits the same variable.
"""
from __future__ import annotations

import dataclasses
import os
import re
import site
import subprocess
import sys
import time
from pathlib import Path

FILES = ("all_reduce_test", "all_gather_test", "all_to_all_test", "axis_index_test",
         "device_id_test", "key_value_store_test", "wait_barrier_test", "pmap_test")
# CI's short form: files whose every test passes on both backends, with 2 processes.
SHORT_FILES = ("all_reduce_test", "all_gather_test", "axis_index_test",
               "key_value_store_test", "wait_barrier_test")

_MARK = re.compile(r"^\[ +(OK|FAILED|SKIPPED|RUN) +\] (.+?)\s*$", re.M)
_RET = re.compile(r"^Process (\d+), ret: (-?\d+),", re.M)
_ERROR_LINE = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Failure)\b.*)$", re.M)


@dataclasses.dataclass
class FileRun:
    """One file on one platform: each test's outcome per process, exit codes, time."""

    file: str
    platform: str
    outcomes: dict[str, list[str]]  # test -> outcome in each process (missing: "crashed")
    exit_codes: list[int | None]
    seconds: float
    causes: dict[str, str]  # failing test -> first error line found in a process's log
    log_dir: Path

    @property
    def passed(self) -> set[str]:
        return {t for t, per in self.outcomes.items() if per and all(o == "OK" for o in per)}

    @property
    def ran(self) -> bool:
        """Whether every process ran tests (a harness that failed to start runs none)."""
        return bool(self.outcomes) and None not in self.exit_codes

    @property
    def signals(self) -> list[int]:
        return [p for p, code in enumerate(self.exit_codes) if code is not None and code < 0]


def site_fix_dir(out: Path) -> Path:
    """A directory with a ``sitecustomize.py`` that adds this interpreter's site-packages."""
    folder = out / "site-fix"
    folder.mkdir(parents=True, exist_ok=True)
    packages = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (folder / "sitecustomize.py").write_text(
        "import site\n" + "".join(f"site.addsitedir({p!r})\n" for p in packages))
    return folder


def _parse(file: str, platform: str, log_dir: Path, processes: int, harness_log: str,
           seconds: float) -> FileRun:
    codes: list[int | None] = [None] * processes
    for index, code in _RET.findall(harness_log):
        if int(index) < processes:
            codes[int(index)] = int(code)
    outcomes: dict[str, list[str]] = {}
    causes: dict[str, str] = {}
    for p in range(processes):
        log_path = log_dir / f"jax_{p}_stderr.log"
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        seen: dict[str, str] = {}
        for mark, test in _MARK.findall(text):
            if mark == "RUN":
                seen.setdefault(test, "crashed")
            else:
                seen[test] = mark
        for test, outcome in seen.items():
            outcomes.setdefault(test, ["crashed"] * processes)[p] = outcome
            if outcome != "OK" and test not in causes:
                after = text.split(f"] {test}", 1)[-1]
                found = _ERROR_LINE.search(after) or _ERROR_LINE.search(text)
                causes[test] = found.group(1)[:300] if found else outcome.lower()
    return FileRun(file, platform, outcomes, codes, seconds, causes, log_dir)


def run_file(tests_dir: Path, file: str, platform: str, processes: int, out: Path,
             time_limit: float = 900, extra_env: dict | None = None) -> FileRun:
    """Run ``tests/multiprocess/<file>.py`` with ``--num_processes`` on ``platform``."""
    out = out.resolve()  # the harness runs in the JAX tree
    log_dir = out / platform.replace(",", "+") / file
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in log_dir.glob("jax_*_std*.log"):
        stale.unlink()
    env = dict(os.environ, JAX_PLATFORMS=platform, TEST_UNDECLARED_OUTPUTS_DIR=str(log_dir))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site_fix_dir(out))] + [p for p in [env.get("PYTHONPATH", "")] if p])
    env.update(extra_env or {})
    script = tests_dir / "tests" / "multiprocess" / f"{file}.py"
    started = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, str(script), f"--num_processes={processes}"],
                                cwd=tests_dir, env=env, capture_output=True, text=True,
                                timeout=time_limit)
        harness_log = result.stdout + result.stderr
    except subprocess.TimeoutExpired as exc:
        harness_log = f"timed out after {time_limit:g} s\n{exc.stdout or ''}"
    (log_dir / "harness.log").write_text(harness_log)
    return _parse(file, platform, log_dir, processes, harness_log,
                  time.perf_counter() - started)


def table(pairs: list[tuple[FileRun, FileRun | None]], platform: str) -> str:
    """Markdown: per file, tests passing on XLA's cpu, of those passing on the platform."""
    lines = [f"| file | pass on XLA cpu | pass on {platform} | processes ended by a signal |",
             "|---|---:|---:|---|"]
    total_ref = total_ours = 0
    for ours, theirs in pairs:
        reference = theirs.passed if theirs else set(ours.outcomes)
        mine = ours.passed & reference
        total_ref += len(reference)
        total_ours += len(mine)
        signals = ", ".join(f"{p} ({ours.exit_codes[p]})" for p in ours.signals) or "none"
        lines.append(f"| {ours.file} | {len(reference) if theirs else '-'} | {len(mine)} | "
                     f"{signals} |")
    rate = f"{100 * total_ours / total_ref:.1f}%" if total_ref else "-"
    lines.append(f"| **total** | {total_ref} | {total_ours} ({rate}) | |")
    return "\n".join(lines)


def failures_text(pairs: list[tuple[FileRun, FileRun | None]]) -> str:
    out = []
    for ours, theirs in pairs:
        reference = theirs.passed if theirs else set(ours.outcomes)
        for test in sorted(reference - ours.passed):
            out.append(f"{ours.file}: {test}: {ours.causes.get(test, 'not reported')}")
    return "\n".join(out) if out else "no failures"
