"""The device check's stages (``__main__`` runs them under one deadline) and the files they
write: ``summary.md``, ``log.txt``, ``checks.json``, ``kernels.json`` and, emulated,
``baseline.json`` (what each holds: ``__main__``)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from pjrtkit_tools.gpu_device_check import summary

BACKEND = "pjrtkit_cuda"
EXAMPLES = ("mlp", "cnn", "transformer")
TRITON_CACHE_ARCHIVE = "triton-cache.tar.gz"
KERNEL_LOG = "kernel-log"
MANIFEST = "manifest.json"
# Conformance chunks per parallel process: a deadline stops only the chunks in flight.
CHUNKS_PER_WORKER = 3
# The bench stage profiles its PROFILED workloads of highest ratio to XLA, keeping this many
# seconds of its share for it.
PROFILED = 3
PROFILE_SHARE_S = 25
# The vendor-library path (cuBLAS through nvmath-python) is the vendor stage's alone: the other
# stages run with it off, so they measure the Triton kernels as before (and the bench stage
# autotunes them) even where nvmath-python is installed; the vendor stage runs with ``require``.
VENDOR_VARIABLE = "PJRTKIT_GPU_VENDOR_LIBRARIES"
# The conformance checks the vendor stage runs (id prefixes): the families whose programs hold
# a dot_general, after the core's expansions (fft as a DFT matmul, complex as pairs of reals,
# linear algebra). Run emulated with ``require``, the compile of every check holding a float
# dot cuBLAS takes is refused: at 93b3a3b, 96 of these 118 (the rest, such as integer dots
# and LU, keep the Triton kernels) and none outside them.
VENDOR_CHECKS = ("jax.dot.", "jax.complex.matmul[", "jax.fft.", "jax.linalg.", "jax.autodiff.",
                 "jax.program.", "jax.structure.pytree_in_out[",
                 "jax.random.typed_key_multivariate_normal[")
# The GPU suite's matmul workloads (float8 runs as a float16 dot with a float32 result).
VENDOR_WORKLOADS = ("matmul_f32", "matmul_bf16", "matmul_f8")
# Of the vendor stage's share: at most this for its probe (``vendor_check``), and this much
# kept for the matmul benchmarks after its conformance checks.
VENDOR_PROBE_S = 20
VENDOR_BENCH_S = 25
VENDOR_CHUNKS_PER_WORKER = 2


@dataclasses.dataclass
class Run:
    out: Path
    work: Path
    emulate: bool
    carry: Path
    baseline: Path
    started: float
    budget_s: float
    shards: int
    results: dict[str, dict] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def reference(self) -> str:
        return "cpu" if self.emulate else "cuda"

    @property
    def kernel_log(self) -> Path:
        return self.work / KERNEL_LOG

    @property
    def triton_cache(self) -> Path:
        return self.work / "triton-cache"

    def seconds_left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def prepare(self) -> None:
        """The scratch folder, the carried Triton cache unpacked where it was made (its group
        files name members by absolute path) and the environment every stage runs in."""
        self.work.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.kernel_log, ignore_errors=True)
        (self.out / "log.txt").write_text("")
        env = dict(os.environ)
        env.update(PJRTKIT_GPU_EMULATE="1" if self.emulate else "0",
                   PJRTKIT_GPU_KERNEL_LOG=str(self.kernel_log),
                   XLA_PYTHON_CLIENT_PREALLOCATE="false",
                   JAX_DEFAULT_MATMUL_PRECISION="highest", PYTHONUNBUFFERED="1")
        env[VENDOR_VARIABLE] = "off"  # the vendor stage sets require
        env.setdefault("PJRTKIT_CACHE_DIR", str(self.work / "pjrtkit-cache"))
        env.pop("TRITON_INTERPRET", None)
        if not self.emulate:
            env["TRITON_CACHE_DIR"] = str(self.triton_cache)
            archive = self.carry / TRITON_CACHE_ARCHIVE
            if archive.exists() and not self.triton_cache.exists():
                with tarfile.open(archive) as tar:
                    tar.extractall(self.work, filter="data")
        self.env = env

    def log(self, text: str) -> None:
        with open(self.out / "log.txt", "a") as f:
            f.write(text.rstrip("\n") + "\n")
        print(text.rstrip("\n")[-4000:], flush=True)

    def call(self, command: list[str], timeout: float, extra: dict | None = None
             ) -> tuple[int | None, str]:
        """Run ``command`` (its output logged); ``(exit status or None on timeout, output)``."""
        env = dict(self.env, **(extra or {}))
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=max(1.0, timeout))
            status = process.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
            output, _ = process.communicate()
            status = None
            output += f"\n[stopped after {timeout:.0f} s]"
        self.log(f"$ {' '.join(command)[:600]}\n{output[-30000:]}")
        return status, output

    def record(self, name: str, result: dict) -> None:
        self.results[name] = result
        self.log(f"=== stage {name}: {result.get('status')}"
                 + (f" ({result['why']})" if result.get("why") else ""))
        (self.out / "checks.json").write_text(json.dumps(self.results, indent=1) + "\n")
        write_kernels(self)
        (self.out / "summary.md").write_text(summary.markdown(self))


# ---- the stages: each returns its result (``status``: ok, failed, not run, error) ----------

def device(run: Run, limit: float) -> dict:
    """The machine and its software, then the carried kernels compiled into Triton's cache by
    this machine's Triton (answered from the carried cache when the builds match)."""
    start = time.monotonic()
    facts: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,"
                                "memory.total,clocks.max.sm", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
        facts["nvidia_smi"] = query.stdout.strip() or query.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        facts["nvidia_smi"] = f"unavailable: {exc}"
    facts.update(versions())
    manifest = read_json(run.carry / MANIFEST)
    facts["carried"] = manifest
    facts["carried_cache_matches_triton_build"] = (
        manifest.get("triton_key_sha256") == facts.get("triton_key_sha256")
        if manifest else None)
    capability = facts["nvidia_smi"].split(",")[1].strip() if facts["nvidia_smi"].count(",") \
        else ""
    target = "sm_" + capability.replace(".", "") if re.fullmatch(r"\d+\.\d", capability) \
        else "sm_90"
    facts["target"] = target
    _, listed = run.call([sys.executable, "-m", "pjrtkit.cli", "list"], 60)
    facts["pjrtkit_list"] = [line.strip() for line in listed.splitlines() if "cuda" in line][:5]
    records = run.carry / KERNEL_LOG
    if not records.exists():
        return {"status": "failed", "why": f"no carried kernel records in {records} (make "
                f"gpu-device-carry)", "facts": facts}
    report_path = run.work / "precompile.json"
    status, output = run.call(
        [sys.executable, "-m", "pjrtkit_gpu.precompile", "--log", str(records), "--target",
         target, "--jobs", str(os.cpu_count() or 1), "--json", str(report_path)],
        limit - (time.monotonic() - start))
    report = read_json(report_path)
    facts["precompile"] = report.get("summary") or {"why": output[-2000:]}
    facts["precompile_failures"] = [r for r in report.get("rows", []) if r.get("error")][:50]
    ok = status == 0
    return {"status": "ok" if ok else "failed",
            "why": None if ok else ("precompile stopped at the stage's time limit"
                                    if status is None else "a kernel did not compile"),
            "facts": facts}


def versions() -> dict[str, Any]:
    found: dict[str, Any] = {}
    from importlib import metadata

    for name in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "triton",
                 "cuda-bindings", "numpy", "ml_dtypes", "pjrtkit", "pjrtkit-gpu", "cffi",
                 "stevedore", "pluggy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    found["triton_key_sha256"] = triton_key_digest()
    return found


def triton_key_digest() -> str | None:
    """A digest of Triton's build key (its version and the hashes of its sources and of
    libtriton.so): Triton's cache answers only compiles made by an identical build."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        return None
    return hashlib.sha256(triton_key().encode()).hexdigest()


def conformance(run: Run, limit: float) -> dict:
    from pjrtkit_tools.gpu_device_check.conformance_shards import run_sharded

    workers = 2 if run.emulate else run.shards
    result = run_sharded("cuda", CHUNKS_PER_WORKER * workers, limit,
                         run.out / "conformance.json", run.out / "conformance.md", run.log,
                         env=run.env, workers=workers)
    outcomes = {c["id"]: c["outcome"] for c in read_json(run.out / "conformance.json")
                .get("checks", [])}
    result["outcomes"] = outcomes
    baseline = read_json(run.baseline).get("conformance", {}).get("outcomes", {})
    if baseline and not run.emulate:
        result["passed_emulated_not_on_gpu"] = {
            check: outcomes[check] for check, outcome in baseline.items()
            if outcome == "PASS" and check in outcomes and outcomes[check] != "PASS"}
        result["not_run_on_gpu"] = sorted(set(baseline) - set(outcomes))
    problems = result["failed"] or result["not_run"] or result.get("passed_emulated_not_on_gpu")
    result["status"] = "failed" if problems else "ok"
    return result


def training(run: Run, limit: float) -> dict:
    """The examples' steps, the three at once, against XLA's reference."""
    steps = 2 if run.emulate else 5
    start = time.monotonic()
    processes = {}
    for name in EXAMPLES:
        command = [sys.executable, f"examples/{name}_train.py", "--backend", BACKEND,
                   "--reference", run.reference, "--steps", str(steps)]
        processes[name] = (command, subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run.env,
            start_new_session=True))
    rows = {}
    for name, (command, process) in processes.items():
        try:
            output, _ = process.communicate(timeout=max(1.0, limit - (time.monotonic() - start)))
            status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            status = None
        run.log(f"$ {' '.join(command)}\n{output[-15000:]}")
        verdict = [line for line in output.splitlines() if line.startswith(("PASS:", "FAIL:"))]
        worst = re.search(r"^max rel diff: (\S+)", output, re.M)
        times = [line for line in output.splitlines() if line.startswith("time on ")]
        rows[name] = {"exit": status, "verdict": verdict or ["no verdict (stopped or crashed)"],
                      "max_rel_diff": float(worst.group(1)) if worst else None,
                      "times": times, "steps": steps}
    ok = all(r["exit"] == 0 for r in rows.values())
    return {"status": "ok" if ok else "failed", "reference": run.reference, "examples": rows}


def bench(run: Run, limit: float) -> dict:
    path = run.out / "bench.json"
    command = [sys.executable, "-m", "benchmarks", "--suite", "gpu", "--backend", BACKEND,
               "--reference", run.reference, "--json", str(path)]
    command += ["--smoke"] if run.emulate else ["--quick", "--repeats", "5"]
    extra = {} if run.emulate else {"PJRTKIT_GPU_AUTOTUNE": str(run.out / "tuned_configs.json")}
    start = time.monotonic()
    status, _ = run.call(command, limit - PROFILE_SHARE_S, extra)
    doc = read_json(path)
    rows = [{k: w.get(k) for k in ("name", "pjrtkit_s", "xla_s", "ratio", "target", "met",
                                   "correct", "error", "mismatch")}
            for w in doc.get("workloads", [])]
    result = {"status": "ok" if status == 0 else "failed",
              "why": None if status == 0 else ("stopped at the stage's time limit"
                                               if status is None else
                                               "a workload raised or differed from XLA"),
              "geomean_ratio": doc.get("geomean_ratio"), "workloads": rows,
              "reference": run.reference, "mode": doc.get("mode")}
    slowest = [r["name"] for r in sorted((r for r in rows if r.get("ratio")),
                                         key=lambda r: -r["ratio"])[:PROFILED]]
    left = limit - (time.monotonic() - start)
    if slowest and left > 5:
        result["profile"] = profile_workloads(run, slowest, left)
    return result


def profile_workloads(run: Run, names: list[str], limit: float) -> dict:
    """Launches per call and the kernel families that take the time, for ``names``
    (``profile_workloads``: every launch waits for the device, so the seconds are an upper
    bound; the split is the point)."""
    command = [sys.executable, "-m", "pjrtkit_tools.gpu_device_check.profile_workloads",
               "--names", ",".join(names), "--backend", BACKEND]
    if run.emulate:
        command.append("--smoke")
    status, output = run.call(command, limit)
    return last_json(output) or {"error": "stopped at the stage's time limit" if status is None
                                 else f"no report (exit {status})"}


def pallas(run: Run, limit: float) -> dict:
    status, output = run.call([sys.executable, "-m",
                               "pjrtkit_tools.gpu_device_check.pallas_check", "--reference",
                               run.reference], limit)
    report = last_json(output)
    if run.emulate:  # compiled Triton IR cannot run on the interpreter: UNIMPLEMENTED, by design
        kernels = [v for v in report.values() if isinstance(v, dict)]
        ok = bool(kernels) and all(
            k["interpret"].get("match") and "UNIMPLEMENTED" in k["compiled"].get("error", "")
            for k in kernels)
    else:
        ok = status == 0
    return {"status": "ok" if ok else "failed", "kernels": report}


def vendor(run: Run, limit: float) -> dict:
    """The cuBLAS path (``PJRTKIT_GPU_VENDOR_LIBRARIES=require``): a probe of a few dots in one
    process (``vendor_check``: nvmath-python, cuBLAS's version, gemms counted), then the
    conformance checks of ``VENDOR_CHECKS`` compared with the Triton path's outcomes, then,
    on a GPU, the GPU suite's matmul workloads against XLA. Emulated, ``require`` must refuse
    every float dot cuBLAS would take with FAILED_PRECONDITION naming the cause and leave
    every other outcome as the Triton path's; the checks it refused are recorded in the
    baseline as the ones the GPU runs through cuBLAS. On a GPU, a probe that did not run
    cuBLAS ends the stage with its exact error."""
    start = time.monotonic()
    extra = {VENDOR_VARIABLE: "require"}
    status, output = run.call([sys.executable, "-m",
                               "pjrtkit_tools.gpu_device_check.vendor_check"],
                              min(VENDOR_PROBE_S, limit), extra)
    probe = last_json(output) or {
        "error": "stopped at the stage's time limit" if status is None
        else f"no report (exit {status}): {output[-1500:]}"}
    result: dict[str, Any] = {"mode": "require", "probe": probe}
    problems = probe_problems(probe, run.emulate)
    if problems and not run.emulate:
        result.update(status="failed", why="the probe did not run cuBLAS: " + problems[0],
                      problems=problems,
                      conformance={"status": "not run", "why": "the probe failed"},
                      bench={"status": "not run", "why": "the probe failed"})
        return result

    from pjrtkit_tools.gpu_device_check.conformance_shards import all_check_ids, run_sharded

    ids = vendor_check_ids(all_check_ids())
    workers = 2 if run.emulate else run.shards
    left = limit - (time.monotonic() - start)
    deadline = left if run.emulate else max(5.0, left - VENDOR_BENCH_S)
    json_path = run.work / "vendor-conformance.json"
    shards = run_sharded("cuda", VENDOR_CHUNKS_PER_WORKER * workers, deadline, json_path,
                         run.work / "vendor-conformance.md", run.log, env=dict(run.env, **extra),
                         check_ids=ids, workers=workers)
    triton, source = run.results.get("conformance", {}).get("outcomes"), "this run"
    baseline = read_json(run.baseline)
    if not triton:
        triton = baseline.get("conformance", {}).get("outcomes", {})
        source = f"the baseline {run.baseline} ({baseline.get('git_commit')})"
    expected = (baseline.get("vendor") or {}).get("conformance", {}).get("library_checks")
    compared = compare_vendor_outcomes(read_json(json_path).get("checks", []), triton,
                                       run.emulate, expected)
    compared.update(selected=len(ids), summary=shards["summary"], not_run=shards["not_run"],
                    seconds=shards["seconds"], shards=shards["shards"], workers=workers,
                    triton_outcomes_from=source)
    result["conformance"] = compared
    problems += compared["problems"]
    if shards["not_run"]:
        problems.append(f"{len(shards['not_run'])} checks not run (the stage's time limit)")

    if run.emulate:
        result["bench"] = {"status": "not run", "why": "needs a GPU (cuBLAS cannot run on the "
                           "emulated driver)"}
    else:
        result["bench"] = vendor_bench(run, limit - (time.monotonic() - start), extra)
        if result["bench"]["status"] != "ok":
            problems.append(f"matmul benchmarks: {result['bench'].get('why')}")
    result.update(status="failed" if problems else "ok",
                  why=problems[0] if problems else None, problems=problems)
    return result


def vendor_check_ids(ids: list[str]) -> list[str]:
    """The checks of ``ids`` the vendor stage runs (``VENDOR_CHECKS``), in suite order."""
    return [i for i in ids if i.startswith(VENDOR_CHECKS)]


def probe_problems(probe: dict, emulate: bool) -> list[str]:
    """What is wrong with ``vendor_check``'s report: on a GPU, every dot the library takes
    must have run through it (gemms counted) and matched NumPy's product, the others must
    have run without it; emulated, ``require`` must have refused the first with
    FAILED_PRECONDITION and still run the others."""
    if probe.get("error"):
        return [probe["error"][:1500]]
    nvmath = probe.get("nvmath", {})
    missing = nvmath.get("import_error") or nvmath.get("cublas_import_error")
    problems = [f"nvmath-python: {missing}"] if missing and not emulate else []
    for name, row in (probe.get("cases") or {}).items():
        library = row.get("library_expected")
        if library and emulate:
            if not is_require_refusal(row.get("error", "")):
                problems.append(f"{name}: not refused with FAILED_PRECONDITION under require "
                                f"({row.get('error') or 'it ran'})")
        elif row.get("error"):
            problems.append(f"{name}: {row['error']}")
        elif not row.get("match"):
            problems.append(f"{name}: max rel diff {row.get('max_rel_diff')} from NumPy")
        elif library and not row.get("library_gemms"):
            problems.append(f"{name}: ran, but not through cuBLAS (no gemm counted)")
        elif not library and row.get("library_gemms"):
            problems.append(f"{name}: went through cuBLAS, which does not take it")
    if not probe.get("cases"):
        problems.append("no cases ran")
    return problems


def is_require_refusal(text: str) -> bool:
    return "FAILED_PRECONDITION" in text and f"{VENDOR_VARIABLE}=require" in text


def refusal_cause(text: str) -> str:
    """What ``require``'s refusal names as missing (after "on device N: ")."""
    match = re.search(r"on device \d+: (.*)", text, re.S)
    return (match.group(1) if match else text).strip()[:300]


def compare_vendor_outcomes(checks: list[dict], triton: dict[str, str], emulate: bool,
                            expected: list[str] | None = None) -> dict:
    """The vendor run's conformance ``checks`` (the JSON report's entries) against the Triton
    path's ``triton`` outcomes (id -> outcome). Emulated, a FAIL that is ``require``'s
    refusal is expected (``library_checks``: the checks whose float dots cuBLAS takes; the
    causes named); any other difference is a problem. On a GPU, a check that passes on the
    Triton path must pass; ``expected`` (the baseline's ``library_checks``) tells which of
    those ran their dots through cuBLAS (under ``require`` a check holding such a dot runs
    it through cuBLAS or fails)."""
    library, causes, differs, problems = [], set(), {}, []
    for check in checks:
        cid, outcome, actual = check["id"], check["outcome"], str(check.get("actual") or "")
        if outcome == "FAIL" and is_require_refusal(actual):
            library.append(cid)
            causes.add(refusal_cause(actual))
            if emulate:
                continue
        before = triton.get(cid)
        if outcome != before:
            differs[cid] = {"triton": before, "library": outcome,
                            "detail": str(check.get("detail") or "")[:200],
                            "actual": actual[:600]}
    result: dict[str, Any] = {"differs": differs}
    if emulate:
        result["library_checks"] = library
        result["refusal_causes"] = sorted(causes)
        if not library:
            problems.append("require refused no check: no dot reached the library")
        problems += [f"{cid}: {d['triton']} on the Triton path, {d['library']} under require"
                     for cid, d in differs.items()]
    else:
        if library:
            result["refused"] = library
            result["refusal_causes"] = sorted(causes)
        outcomes = {c["id"]: c["outcome"] for c in checks}
        if expected is not None:
            ran = [cid for cid in expected if cid in outcomes]
            result["library_checks_expected"] = len(expected)
            result["library_checks_passed"] = sum(outcomes[cid] == "PASS" for cid in ran)
            result["library_checks_not_passed"] = [cid for cid in ran if outcomes[cid] != "PASS"]
        regressions = [cid for cid, d in differs.items() if d["triton"] == "PASS"]
        result["passed_triton_not_library"] = regressions
        problems += [f"{cid}: PASS on the Triton path, {differs[cid]['library']} through "
                     f"cuBLAS ({differs[cid]['actual'][:200]})" for cid in regressions]
    result["problems"] = problems
    return result


def vendor_bench(run: Run, limit: float, extra: dict) -> dict:
    """The GPU suite's ``VENDOR_WORKLOADS`` through cuBLAS against XLA, with the bench
    stage's ratio for each (the Triton path, this run) beside."""
    path = run.work / "vendor-bench.json"
    path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "benchmarks", "--suite", "gpu", "--backend", BACKEND,
               "--reference", run.reference, "--quick", "--repeats", "5", "--only",
               ",".join(VENDOR_WORKLOADS), "--json", str(path)]
    status, _ = run.call(command, limit, extra)
    triton = {w["name"]: w.get("ratio")
              for w in run.results.get("bench", {}).get("workloads", [])}
    rows = [{**{k: w.get(k) for k in ("name", "pjrtkit_s", "xla_s", "ratio", "target", "met",
                                      "correct", "error", "mismatch")},
             "triton_ratio": triton.get(w.get("name"))}
            for w in read_json(path).get("workloads", [])]
    done = {r["name"] for r in rows}
    missing = [name for name in VENDOR_WORKLOADS if name not in done]
    ok = status == 0 and not missing
    return {"status": "ok" if ok else "failed",
            "why": None if ok else ("stopped at the stage's time limit" if status is None
                                    else "a workload raised or differed from XLA"),
            "workloads": rows, "not_run": missing, "reference": run.reference}


def last_json(output: str) -> dict:
    """The last JSON line a stage's child printed (its report), or {} when there is none."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {}


# ---- files ---------------------------------------------------------------------------------

def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def write_kernels(run: Run) -> None:
    """``kernels.json``: the distinct kernels this run launched (emulated) or compiled (GPU:
    with Triton's cache hits and compile seconds), by kernel name."""
    from pjrtkit_gpu import kernel_log

    records = kernel_log.read(run.kernel_log) if run.kernel_log.exists() else []
    doc: dict[str, Any] = {"mode": "emulated" if run.emulate else "gpu",
                           "distinct_kernels": len(records), "by_name": {}}
    for r in records:
        name = r.get("name") or f"pallas:{r.get('pallas')}"
        entry = doc["by_name"].setdefault(name, {"kernels": 0})
        entry["kernels"] += 1
        if not run.emulate:
            entry["cache_hits"] = entry.get("cache_hits", 0) + (r.get("cache_hit") is True)
            entry["compiled"] = entry.get("compiled", 0) + (r.get("cache_hit") is False)
            entry["seconds"] = round(entry.get("seconds", 0.0) + r.get("seconds", 0.0), 2)
    if not run.emulate:
        doc["cache_hits"] = sum(r.get("cache_hit") is True for r in records)
        doc["compiled"] = sum(r.get("cache_hit") is False for r in records)
        doc["compile_seconds"] = round(sum(r.get("seconds", 0.0) for r in records), 1)
        doc["slowest"] = sorted(({k: r.get(k) for k in ("name", "constexprs", "seconds",
                                                         "cache_hit", "error")}
                                 for r in records), key=lambda r: -(r["seconds"] or 0))[:20]
        doc["errors"] = [r for r in records if r.get("error")][:50]
        doc["precompile"] = run.results.get("device", {}).get("facts", {}).get("precompile")
    (run.out / "kernels.json").write_text(json.dumps(doc, indent=1) + "\n")


def write_baseline(run: Run) -> None:
    """``baseline.json``: the emulated run's record (committed as the baseline)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    doc = {"mode": "emulated", "git_commit": commit, "versions": versions(),
           "conformance": {k: run.results.get("conformance", {}).get(k)
                           for k in ("summary", "not_run", "failed", "outcomes", "seconds")},
           "training": run.results.get("training"), "bench": run.results.get("bench"),
           "pallas": run.results.get("pallas"), "vendor": run.results.get("vendor"),
           "kernels": read_json(run.out / "kernels.json"),
           "stages": {k: {"status": v.get("status"), "seconds": v.get("seconds")}
                      for k, v in run.results.items()}}
    doc["versions"].pop("triton_key_sha256", None)
    (run.out / "baseline.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
