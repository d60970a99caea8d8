"""Discovery of installed backends and selection by PJRTKIT_BACKENDS."""
import subprocess
import sys

import pytest

from pjrtkit import discovery
from pjrtkit.errors import BackendLoadFailure


def test_the_cpu_backend_is_installed_and_ok(monkeypatch):
    monkeypatch.delenv("PJRTKIT_BACKENDS", raising=False)
    statuses = {s.name: s for s in discovery.discover()}
    cpu = statuses["cpu"]
    assert cpu.ok, cpu.reason
    assert cpu.distribution == "pjrtkit-cpu"
    assert cpu.version == "0.1.0"
    assert cpu.backend.platform_name == "pjrtkit_cpu"


def test_pjrtkit_backends_narrows_the_selection(monkeypatch):
    monkeypatch.setenv("PJRTKIT_BACKENDS", "tpu")
    cpu = {s.name: s for s in discovery.discover()}["cpu"]
    assert cpu.status == "not selected"
    assert cpu.backend is None


def test_a_backend_that_cannot_build_its_topology_is_reported_not_raised(monkeypatch):
    monkeypatch.setenv("PJRTKIT_CPU_DEVICES", "zero")
    cpu = {s.name: s for s in discovery.discover()}["cpu"]
    assert cpu.status == "failed"
    assert "PJRTKIT_CPU_DEVICES" in cpu.reason


def test_loading_an_unknown_backend_names_what_is_installed():
    with pytest.raises(BackendLoadFailure,
                       match="no pjrtkit backend named 'nope'.*installed: .*cpu"):
        discovery.load_backend("nope")


def test_pjrtkit_list_shows_the_cpu_backend_and_its_version():
    out = subprocess.run([sys.executable, "-m", "pjrtkit.cli", "list"], capture_output=True,
                         text=True, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("cpu "))
    assert "pjrtkit_cpu" in line and "0.1.0" in line and line.rstrip().endswith("ok")


def test_pjrtkit_info_shows_what_the_backend_declares():
    out = subprocess.run([sys.executable, "-m", "pjrtkit.cli", "info", "cpu"],
                         capture_output=True, text=True, check=True).stdout
    assert "declared capabilities:" in out
    dtypes = next(line for line in out.splitlines() if line.strip().startswith("dtypes:"))
    # every PJRT buffer type ml_dtypes holds, the list cut short after 20 names
    assert "float32" in dtypes and "bfloat16" in dtypes and "complex64" in dtypes
    assert "(28 in all)" in dtypes
    assert "features: compile_only_topologies, multiple_devices" in out
