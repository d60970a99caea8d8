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
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": "stopped at the stage's time limit" if status is None
                else f"no report (exit {status})"}
    return json.loads(lines[-1])


def pallas(run: Run, limit: float) -> dict:
    status, output = run.call([sys.executable, "-m",
                               "pjrtkit_tools.gpu_device_check.pallas_check", "--reference",
                               run.reference], limit)
    lines = [line for line in output.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {}
    if run.emulate:  # compiled Triton IR cannot run on the interpreter: UNIMPLEMENTED, by design
        kernels = [v for v in report.values() if isinstance(v, dict)]
        ok = bool(kernels) and all(
            k["interpret"].get("match") and "UNIMPLEMENTED" in k["compiled"].get("error", "")
            for k in kernels)
    else:
        ok = status == 0
    return {"status": "ok" if ok else "failed", "kernels": report}


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
           "pallas": run.results.get("pallas"),
           "kernels": read_json(run.out / "kernels.json"),
           "stages": {k: {"status": v.get("status"), "seconds": v.get("seconds")}
                      for k, v in run.results.items()}}
    doc["versions"].pop("triton_key_sha256", None)
    (run.out / "baseline.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
