"""A pjrtkit backend as a shared library any PJRT host loads (``pjrtkit build-library``).

Each host here is real: a C program that dlopens the library (and XLA's own CPU plugin
library, the reference), JAX loading it by path (PJRT_NAMES_AND_LIBRARY_PATHS), pypjrt's
conformance checker (written by others), and pjrtkit's own C ABI layer against the library.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pjrtkit.testing.tolerances import assert_close
from distribution_support import (
    clean_env, compile_host, mlp_arguments, mlp_forward, python_of_other_minor, run_host,
    xla_cpu_plugin)

BIN = pathlib.Path(sys.executable).parent

pytestmark = pytest.mark.xdist_group("shared_library")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("library")
    done = subprocess.run([str(BIN / "pjrtkit"), "build-library", "cpu", "--output", str(out)],
                          capture_output=True, text=True, env=clean_env())
    assert done.returncode == 0, done.stderr
    path = out / "libpjrtkit_cpu.so"
    assert path.is_file() and str(path) in done.stdout
    return path


def _dynamic_symbols(path: pathlib.Path, *flags: str) -> set[str]:
    listing = subprocess.run(["nm", "-D", *flags, str(path)], capture_output=True, text=True,
                             check=True).stdout
    return {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}


def test_the_library_exports_only_get_pjrt_api_and_links_no_python(library):
    defined = {s for s in _dynamic_symbols(library, "--defined-only")}
    assert defined == {"GetPjrtApi"}
    undefined = _dynamic_symbols(library, "--undefined-only")
    assert not {s for s in undefined if s.startswith(("Py", "_Py"))}, undefined
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True,
                            check=True).stdout
    assert "libpython" not in needed


def test_build_library_names_a_backend_that_is_not_installed(tmp_path):
    done = subprocess.run([str(BIN / "pjrtkit"), "build-library", "nosuchbackend", "--output",
                           str(tmp_path)], capture_output=True, text=True, env=clean_env())
    assert done.returncode == 1
    assert "no pjrtkit backend named 'nosuchbackend'" in done.stderr and "cpu" in done.stderr


@pytest.fixture(scope="module")
def mlp_files(tmp_path_factory):
    """The MLP forward pass as a StableHLO portable artifact both plugins read, its compile
    options and its inputs, as files a C host reads."""
    import jax
    from jaxlib import xla_client

    from pjrtkit import jax_compat
    from pjrtkit.conformance.abi_driver import AbiDriver

    out = tmp_path_factory.mktemp("mlp")
    arguments = mlp_arguments()
    text = jax.jit(mlp_forward).lower(*arguments).as_text()
    # XLA's plugin (PJRT 0.81) reads older StableHLO than jaxlib writes: the oldest of the two.
    target = AbiDriver.from_library(xla_cpu_plugin()).stablehlo_target()
    (out / "mlp.mlirbc").write_bytes(jax_compat.serialize_portable_artifact(text, target))
    options = xla_client.CompileOptions()
    options.num_replicas = options.num_partitions = 1
    options.device_assignment = xla_client.DeviceAssignment.create(np.zeros((1, 1), np.int32))
    (out / "options.pb").write_bytes(options.SerializeAsString())
    inputs = []
    for index, array in enumerate(arguments):
        path = out / f"input{index}.bin"
        array.tofile(path)
        inputs.append(f"{path}:f32:{'x'.join(map(str, array.shape))}")
    return out, inputs


def _host_outputs(done: subprocess.CompletedProcess, prefix: pathlib.Path) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    outputs = {}
    for line in lines:
        if line.startswith("output "):
            _, index, _, code, _, dims = line.split()
            shape = () if dims == "scalar" else tuple(int(d) for d in dims.split("x"))
            assert code == "11", line  # PJRT_Buffer_Type_F32
            outputs[int(index)] = np.fromfile(f"{prefix}.{index}.bin", np.float32).reshape(shape)
    return {"lines": lines, "outputs": outputs}


@pytest.mark.parametrize("threads", [False, True], ids=["main-thread", "host-thread"])
def test_a_c_host_gets_from_the_library_what_it_gets_from_xla_plugin(library, mlp_files,
                                                                    tmp_path, threads):
    folder, inputs = mlp_files
    host = compile_host(tmp_path)
    program, options = folder / "mlp.mlirbc", folder / "options.pb"
    xla = _host_outputs(run_host(host, xla_cpu_plugin(), program, options, tmp_path / "xla",
                                 inputs), tmp_path / "xla")
    ours = _host_outputs(run_host(host, library, program, options, tmp_path / "ours", inputs,
                                  threads=threads), tmp_path / "ours")
    assert "platform cpu" in xla["lines"] and "platform pjrtkit_cpu" in ours["lines"]
    assert "api 0.90" in ours["lines"]
    assert sorted(xla["outputs"]) == sorted(ours["outputs"]) == [0]
    assert ours["outputs"][0].shape == xla["outputs"][0].shape == (8, 4)
    assert_close(ours["outputs"][0], xla["outputs"][0])


def test_jax_loads_the_library_by_path(library, tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np, jax
        import sys; sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
        from distribution_support import mlp_arguments, mlp_forward
        from pjrtkit import jax_glue
        arguments = mlp_arguments()
        outputs = {{}}
        for platform in ("pjrtkit_cpu", "cpu"):
            device = jax.devices(platform)[0]
            result = jax.jit(mlp_forward)(*[jax.device_put(a, device) for a in arguments])
            assert result.devices() == {{device}}
            outputs[platform] = np.asarray(result)
        # the entry point registered nothing: the platform is the library's
        assert jax_glue.registered_backends() == {{}}, jax_glue.registered_backends()
        np.savez({str(tmp_path / "outputs.npz")!r}, **outputs)
    """)
    env = clean_env(PJRTKIT_BACKENDS="none", JAX_PLATFORMS="pjrtkit_cpu,cpu",
                    PJRT_NAMES_AND_LIBRARY_PATHS=f"pjrtkit_cpu:{library}")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = np.load(tmp_path / "outputs.npz")
    assert_close(outputs["pjrtkit_cpu"], outputs["cpu"])


def test_a_host_running_another_python_gets_an_error_naming_both(library):
    other = python_of_other_minor()
    if other is None:
        pytest.skip("no interpreter of another Python minor version on this machine")
    script = ("import ctypes, sys; f = ctypes.CDLL(sys.argv[1]).GetPjrtApi; "
              "f.restype = ctypes.c_void_p; print('api', f())")
    done = subprocess.run([other, "-c", script, str(library)], capture_output=True, text=True,
                          env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "api None" in done.stdout  # NULL, not a crash
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"built for Python {here}" in done.stderr and "the host runs another Python" in done.stderr
    other_version = subprocess.run([other, "-c", "import sys; print(sys.version.split()[0])"],
                                   capture_output=True, text=True).stdout.strip()
    assert other_version in done.stderr


def _pypjrt_report(args: list[str], cwd: pathlib.Path) -> dict:
    done = subprocess.run(args, capture_output=True, text=True, env=clean_env(), cwd=cwd,
                          timeout=900)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads((cwd / "report.json").read_text())


def _failures(report: dict) -> list[str]:
    return [f"{c['id']}: {c['detail']}" for c in report["checks"] if c["result"] == "fail"]


def test_pypjrt_conform_finds_no_failure_in_the_library(library, tmp_path):
    """pypjrt's checker (PyPI pypjrt 0.1.1) on the library: zero FAIL. XLA's own CPU plugin runs
    through pypjrt.conform.run too, without the executable-layouts check that crashes on it; the
    two reports are printed side by side."""
    ours_dir, xla_dir = tmp_path / "ours", tmp_path / "xla"
    ours_dir.mkdir()
    xla_dir.mkdir()
    ours = _pypjrt_report([str(BIN / "pypjrt-conform"), str(library), "--json",
                           str(ours_dir / "report.json")], ours_dir)
    script = textwrap.dedent(f"""
        import json
        from pypjrt import conform
        from pypjrt._loader import Plugin
        # crashes inside XLA's plugin (xla-cpu-pjrt 0.0.1), so it is left out for it alone
        conform._CHECKS[:] = [c for c in conform._CHECKS
                              if f"{{c[0]}}.{{c[1]}}" != "layouts.executable_parameters"]
        report = conform.run(Plugin({str(xla_cpu_plugin())!r}))
        open("report.json", "w").write(json.dumps(report.to_json()))
    """)
    xla = _pypjrt_report([sys.executable, "-c", script], xla_dir)
    assert not _failures(xla), _failures(xla)  # the checker expects what XLA does
    assert not _failures(ours), _failures(ours)
    assert sum(c["result"] == "pass" for c in ours["checks"]) > 40
    results = {c["id"]: [c["result"], "-"] for c in ours["checks"]}
    for c in xla["checks"]:
        results.setdefault(c["id"], ["-", "-"])[1] = c["result"]
    print(f"{'check':<45} {'libpjrtkit_cpu':<14} xla_cpu_pjrt")
    for check_id, (mine, theirs) in sorted(results.items()):
        if mine != theirs:
            print(f"{check_id:<45} {mine:<14} {theirs}")


def test_the_conformance_abi_layer_passes_against_the_library(library, tmp_path):
    report = tmp_path / "abi.json"
    done = subprocess.run([str(BIN / "pjrtkit"), "conformance", "--library", str(library),
                           "--json", str(report)], capture_output=True, text=True,
                          env=clean_env(), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = [c["outcome"] for c in json.loads(report.read_text())["checks"]]
    assert "FAIL" not in outcomes and outcomes.count("PASS") > 100
