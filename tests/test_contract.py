"""The hook contract is checked when a backend loads: a hook module that pluggy would register
without complaint, but whose hook the core would never call, is refused with an error naming
the backend, the function and the fix, and ``pjrtkit list`` shows it as failed with that reason.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pjrtkit import discovery
from pjrtkit.backend import Backend
from pjrtkit.errors import BackendLoadFailure, Internal, PluginContractError

# A complete plugin (the template's hooks) with one mistake each.
TEMPLATE = "from template_backend import *  # noqa: F403\n"

MISSPELT = TEMPLATE + """
from pjrtkit import hookimpl

@hookimpl
def pjrtkit_trasnfer_to_host(payload, device, memory_kind):
    return payload
"""

UNDECORATED = TEMPLATE + """
def pjrtkit_memory_stats(device, tracked):
    return tracked
"""

WRONG_ARGUMENT = TEMPLATE + """
from pjrtkit import hookimpl

@hookimpl
def pjrtkit_copy_buffer(payload, destination):
    return payload.copy()
"""

RETIRED = TEMPLATE + """
from pjrtkit import hookimpl

@hookimpl
def pjrtkit_execute(executable, arguments, devices):
    return []
"""


def _load(installed_plugin, name, source):
    import importlib

    installed_plugin(name, source)
    return Backend(name, importlib.import_module(f"{name}_hooks"))


def test_a_misspelt_hook_is_refused_naming_the_backend_the_hook_and_the_fix(installed_plugin):
    with pytest.raises(PluginContractError) as info:
        _load(installed_plugin, "misspelt", MISSPELT)
    message = str(info.value)
    assert "pjrtkit backend 'misspelt'" in message and "misspelt_hooks" in message
    assert "pjrtkit_trasnfer_to_host is not a pjrtkit hook" in message
    assert "did you mean pjrtkit_transfer_to_host?" in message


def test_a_hook_function_without_the_marker_is_refused(installed_plugin):
    with pytest.raises(PluginContractError, match="pjrtkit_memory_stats is not decorated with "
                                                  "@pjrtkit.hookimpl"):
        _load(installed_plugin, "undecorated", UNDECORATED)


def test_a_hook_taking_an_argument_the_hook_does_not_have_is_refused(installed_plugin):
    with pytest.raises(PluginContractError, match="pjrtkit_copy_buffer.*destination"):
        _load(installed_plugin, "wrongarg", WRONG_ARGUMENT)


def test_the_retired_execute_hook_is_refused_saying_what_replaced_it(installed_plugin):
    with pytest.raises(PluginContractError, match=r"pjrtkit_execute is not a pjrtkit hook "
                                                  r"\(running a program is no longer a hook"):
        _load(installed_plugin, "retired", RETIRED)


def test_a_plugin_error_is_a_backend_load_failure():
    assert issubclass(PluginContractError, BackendLoadFailure)


def test_complete_plugins_pass_the_check(template_backend):
    import pjrtkit_cpu.plugin

    assert Backend("cpu", pjrtkit_cpu.plugin).platform_name == "pjrtkit_cpu"
    assert template_backend.platform_name == "pjrtkit_template"


def test_discovery_reports_a_misspelt_backend_as_failed_and_loading_it_raises(
        installed_plugin, monkeypatch):
    monkeypatch.delenv("PJRTKIT_BACKENDS", raising=False)
    installed_plugin("misspelt", MISSPELT)
    statuses = {s.name: s for s in discovery.discover()}
    assert statuses["misspelt"].status == "failed"
    assert "pjrtkit_trasnfer_to_host is not a pjrtkit hook" in statuses["misspelt"].reason
    assert statuses["cpu"].ok, statuses["cpu"].reason  # one broken plugin breaks no other
    with pytest.raises(PluginContractError, match="pjrtkit_trasnfer_to_host"):
        discovery.load_backend("misspelt")


def test_pjrtkit_list_shows_a_misspelt_backend_as_failed_with_the_reason(installed_plugin):
    site = installed_plugin("misspelt", MISSPELT)
    template_dir = Path(__file__).parent / "plugins"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(template_dir)])}
    env.pop("PJRTKIT_BACKENDS", None)
    out = subprocess.run([sys.executable, "-m", "pjrtkit.cli", "list"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("misspelt "))
    assert "failed" in line and "PluginContractError" in line, line
    assert "did you mean pjrtkit_transfer_to_host?" in line, line
    cpu = next(line for line in out.stdout.splitlines() if line.startswith("cpu "))
    assert cpu.rstrip().endswith("ok"), cpu


ADD_ONE = """
func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %a, %a : tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""


def _compile_through_the_runtime(backend):
    from pjrtkit.runtime.executable import load_and_compile

    devices = backend.client_topology(options={}).devices
    return load_and_compile(backend, ADD_ONE.encode(), "mlir", b"", lambda options: devices)


def test_an_executable_without_execute_is_refused_at_compile(installed_plugin):
    """The executable object is the contract of execution: a plan handed back bare (as the
    retired pjrtkit_execute hook allowed) is INTERNAL at compile, naming what is missing."""
    backend = _load(installed_plugin, "bareplan", TEMPLATE + """
from pjrtkit import hookimpl
from pjrtkit.types import CompiledProgram
import template_backend

@hookimpl
def pjrtkit_compile(program, options, devices):
    return CompiledProgram(build_plan(program, template_backend.RULES))
""")
    with pytest.raises(Internal, match=r"pjrtkit_template: pjrtkit_compile returned a "
                                       r"CompiledProgram whose executable \(Plan\) has no "
                                       r"execute\(arguments, devices\) method"):
        _compile_through_the_runtime(backend)


def test_the_runtime_keeps_what_compile_returned(template_backend):
    executable = _compile_through_the_runtime(template_backend)
    assert type(executable.compiled.executable).__name__ == "TemplateExecutable"
    [[out]] = executable.compiled.executable.execute([[np.array([1, 2], np.float32)]], ())
    np.testing.assert_array_equal(out, [2, 4])
