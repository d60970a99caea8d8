"""Preparing the folder that travels to the GPU test machine, and the device tool's command.

    python -m pjrtkit_tools.gpu_device_check.carry --folder .gpu-check \\
        --kernel-log build/gpu-device-check/kernel-log --compile-python PY [--jobs N]

``make gpu-device-carry`` runs it after building pjrtkit's wheels into ``FOLDER/wheels`` (for
the GPU machine's Python 3.12). It

1. downloads the wheels the machine lacks (cffi, pycparser, stevedore at the versions of the
   pinned set, each for CPython 3.12 on manylinux x86-64, and whatever they require that the
   machine has not: ``MACHINE_HAS``) into ``FOLDER/wheels``;
2. copies the emulated run's kernel records into ``FOLDER/kernel-log``;
3. compiles them for ``--target`` (sm_90) with ``--compile-python`` (an environment with the
   machine's Triton, 3.6.0) into Triton's cache at ``CACHE_PATH``, the path the device check
   reads it from there, then a second time to count the cache hits (all of them, when the key
   holds), keeps only what a cache hit reads (each kernel's metadata and cubin) and packs it as
   ``FOLDER/triton-cache.tar.gz``;
4. writes ``FOLDER/manifest.json`` (versions, Triton's build key digest, counts, sizes) and
   ``FOLDER/run-command.txt``, the command line for the device tool (``RUN_COMMAND``), and
   fails when what travels would pass ``TRAVEL_LIMIT`` bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

CACHE_PATH = Path("/tmp/pjrtkit-gpu-check/triton-cache")
TRAVEL_LIMIT = 64 << 20
# nvmath-python: the cuBLAS bindings of the vendor-library path (PJRTKIT_GPU_VENDOR_LIBRARIES;
# the machine has the nvidia-cublas libraries, cuda-core and cuda-pathfinder).
MISSING_ON_MACHINE = ("cffi", "pycparser", "stevedore", "nvmath-python")
# What the GPU test machine's image has (/work/.library/device/KINDS.md): a requirement of the
# missing wheels outside this list travels too.
MACHINE_HAS = {"setuptools", "pluggy", "numpy", "jax", "jaxlib", "ml-dtypes", "pytest",
               "packaging", "typing-extensions", "triton", "cuda-bindings", "cuda-core",
               "cuda-pathfinder", "scipy", "numba",
               "hypothesis", "pytest-xdist"}
# The wheels of pjrtkit that travel (the rocm, tpu and cpu plugins are not needed there).
PJRTKIT_WHEELS = ("pjrtkit-", "pjrtkit_tools-", "pjrtkit_gpu-", "pjrtkit_cuda-")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
RUN_COMMAND = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
    "--target /tmp/site {folder}/wheels/*.whl && export PYTHONPATH=/tmp/site || exit; "
    "if command -v make >/dev/null; then make gpu-device-check GPU_EMULATE=0; "
    "else python3 -m pjrtkit_tools.gpu_device_check --out \"$OUT\" --carry {folder}; fi")
# The device tool's timeout: the check's GPU budget (__main__.DEFAULT_BUDGET, 360 s) and a
# minute for the wheels' install and the interpreter's start.
RUN_TIMEOUT_S = 420


def pinned(constraints: Path, name: str) -> str:
    for line in constraints.read_text().splitlines():
        match = re.match(rf"^{re.escape(name)}==(\S+)", line.strip(), re.I)
        if match:
            return match.group(1)
    raise SystemExit(f"carry: {name} is not pinned in {constraints}")


def download(names_versions: list[str], into: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
               "-d", str(into)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command + names_versions, check=True)


def requirements(wheel: Path) -> list[str]:
    """The unconditional requirements (names) of ``wheel``."""
    with zipfile.ZipFile(wheel) as z:
        metadata = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(metadata).decode()
    names = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            spec = line.split(":", 1)[1].split(";")[0].strip()
            condition = line.split(";", 1)[1] if ";" in line else ""
            if "platform_python_implementation == \"PyPy\"" in condition or \
                    "implementation_name == \"pypy\"" in condition.lower() or \
                    "platform_system == \"Windows\"" in condition or \
                    "sys_platform == \"win32\"" in condition:
                continue  # (the machine is CPython on Linux)
            names.append(re.split(r"[ <>=!~(\[]", spec, maxsplit=1)[0].lower()
                         .replace("_", "-"))
    return names


def fetch_wheels(folder: Path, constraints: Path) -> list[str]:
    wheels = folder / "wheels"
    for stale in wheels.glob("*.whl"):
        if not stale.name.lower().startswith(PJRTKIT_WHEELS):
            stale.unlink()
    for wheel in wheels.glob("*.whl"):  # the plugins the check does not need
        if wheel.name.startswith(("pjrtkit_cpu-", "pjrtkit_rocm-", "pjrtkit_tpu-")):
            wheel.unlink()
    wanted, done = list(MISSING_ON_MACHINE), set()
    while wanted:
        name = wanted.pop()
        if name in done:
            continue
        done.add(name)
        download([f"{name}=={pinned(constraints, name)}"], wheels)
        wheel = next(w for w in wheels.glob("*.whl")
                     if w.name.lower().replace("_", "-").startswith(name + "-"))
        wanted += [r for r in requirements(wheel) if r not in MACHINE_HAS and r not in done]
    return sorted(w.name for w in wheels.glob("*.whl"))


def precompile(python: str, records: Path, target: str, jobs: int, report: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PJRTKIT_GPU_EMULATE", "TRITON_INTERPRET")}
    env["TRITON_CACHE_DIR"] = str(CACHE_PATH)
    command = [python, "-m", "pjrtkit_gpu.precompile", "--log", str(records), "--target",
               target, "--jobs", str(jobs), "--json", str(report)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
    if not report.exists():
        raise SystemExit(f"carry: precompile wrote no report (exit {done.returncode})")
    summary = json.loads(report.read_text())["summary"]
    summary["exit"] = done.returncode
    return summary


def pack_cache(archive: Path) -> int:
    """Keep what a cache hit reads (``*.json``: metadata and groups; ``*.cubin``), pack it."""
    for path in CACHE_PATH.rglob("*"):
        if path.is_file() and path.suffix not in (".json", ".cubin"):
            path.unlink()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(CACHE_PATH, arcname=CACHE_PATH.name)
    return archive.stat().st_size


def triton_key_digest(python: str) -> str:
    code = ("import hashlib; from triton.runtime.cache import triton_key; "
            "print(hashlib.sha256(triton_key().encode()).hexdigest())")
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def travel_size(folder: Path) -> dict[str, int]:
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    tree = sum(os.path.getsize(p) for p in tracked.decode().split("\0")
               if p and os.path.isfile(p))
    carried = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"working_tree": tree, "carried": carried, "total": tree + carried}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrtkit_tools.gpu_device_check.carry",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=".gpu-check")
    parser.add_argument("--kernel-log", default="build/gpu-device-check/kernel-log")
    parser.add_argument("--compile-python", required=True,
                        help="python of an environment with the GPU machine's Triton (3.6.0)")
    parser.add_argument("--constraints", default="constraints-jax0.11.txt")
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    from pjrtkit_gpu import kernel_log

    folder = Path(args.folder)
    records = kernel_log.read(Path(args.kernel_log))
    if not records:
        raise SystemExit(f"carry: no kernel records in {args.kernel_log}: run the emulated "
                         f"device check first (make JAX=0.11 gpu-device-check)")
    log_folder = folder / "kernel-log"
    shutil.rmtree(log_folder, ignore_errors=True)
    log_folder.mkdir(parents=True)
    with open(log_folder / "kernels-all.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")
    wheels = fetch_wheels(folder, Path(args.constraints))
    print(f"wheels: {', '.join(wheels)}", flush=True)

    shutil.rmtree(CACHE_PATH, ignore_errors=True)
    started = time.monotonic()
    first = precompile(args.compile_python, log_folder, args.target, args.jobs,
                       folder / "precompile.json")
    second = precompile(args.compile_python, log_folder, args.target, args.jobs,
                        folder / "precompile-again.json")
    archive_bytes = pack_cache(folder / "triton-cache.tar.gz")
    (folder / "precompile-again.json").unlink()
    manifest = {
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                     text=True).stdout.strip(),
        "target": args.target, "cache_path": str(CACHE_PATH),
        "triton_key_sha256": triton_key_digest(args.compile_python),
        "first_compile": first, "second_compile": second,
        "compile_seconds": round(time.monotonic() - started, 1),
        "triton_cache_archive_bytes": archive_bytes, "wheels": wheels,
    }
    manifest["travel_bytes"] = travel_size(folder)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    command = RUN_COMMAND.format(folder=args.folder)
    (folder / "run-command.txt").write_text(command + "\n")
    print(json.dumps({k: manifest[k] for k in ("first_compile", "second_compile",
                                                "travel_bytes")}, indent=1))
    print(f"\ndevice tool: run(command=<{folder}/run-command.txt>, carry=[\"{args.folder}\"], "
          f"timeout_s={RUN_TIMEOUT_S})\n{command}")
    if first["failures"]:  # reported, not fatal: those launches fail on the GPU as well
        failed = [r for r in json.loads((folder / "precompile.json").read_text())["rows"]
                  if r["error"]]
        print(f"carry: {len(failed)} kernels do not compile for {args.target} (listed in "
              f"{folder}/precompile.json):", file=sys.stderr)
        for row in failed[:30]:
            print(f"  {row['kernel']} {row['constexprs']}: {row['error'][:200]}",
                  file=sys.stderr)
    problems = []
    if second["cache_misses"]:
        problems.append(f"the second compile missed Triton's cache {second['cache_misses']} "
                        f"times")
    if manifest["travel_bytes"]["total"] > TRAVEL_LIMIT:
        problems.append(f"{manifest['travel_bytes']['total']} bytes would travel "
                        f"(limit {TRAVEL_LIMIT})")
    for problem in problems:
        print(f"carry: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
