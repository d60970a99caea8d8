"""Shared helpers of the core tests.

Core tests run against the template backend (``tests/plugins/template_backend.py``), the
smallest complete plugin, not against pjrtkit_cpu: what they check is the core, and a backend
they can read in one sitting keeps their failures about the core. ``tests/plugins`` is put on
``sys.path`` so that tests (and the subprocesses they start, through ``PLUGINS_DIR``) import
its modules by name, as a plugin's entry point would.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from stevedore import ExtensionManager

PLUGINS_DIR = Path(__file__).parent / "plugins"
if str(PLUGINS_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGINS_DIR))


@pytest.fixture(scope="session")
def template_backend():
    """The template plugin behind the typed facade, as discovery would load it."""
    import template_backend as module

    from pjrtkit.backend import Backend

    return Backend("template", module, "test")


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """``installed_plugin(name, source) -> site directory``: a backend installed for real.

    Writes the hook module ``<name>_hooks.py`` from ``source`` and a distribution
    ``pjrtkit-test-<name>`` whose entry point (group ``pjrtkit.backends``) names it, into a
    fresh directory put on ``sys.path``; pass the directory as PYTHONPATH to a subprocess.
    """

    modules = []

    def install(name: str, source: str) -> Path:
        site = tmp_path / f"site-{name}"
        dist_info = site / f"pjrtkit_test_{name}-0.1.dist-info"
        dist_info.mkdir(parents=True)
        (site / f"{name}_hooks.py").write_text(textwrap.dedent(source))
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: pjrtkit-test-{name}\nVersion: 0.1\n")
        (dist_info / "entry_points.txt").write_text(
            f"[pjrtkit.backends]\n{name} = {name}_hooks\n")
        monkeypatch.syspath_prepend(str(site))
        # stevedore keeps the entry points it listed once per process; start from a fresh list
        # (monkeypatch puts the process's back afterwards).
        monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})
        sys.modules.pop(f"{name}_hooks", None)  # a module of that name from another test
        modules.append(f"{name}_hooks")
        return site

    yield install
    for module in modules:
        sys.modules.pop(module, None)
