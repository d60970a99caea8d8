"""A broken third-party backend never breaks JAX or the other backends (issue 13).

Real throwaway plugins, installed the way a wheel installs them: a module beside a
``*.dist-info`` whose ``entry_points.txt`` names it in the group ``pjrtkit.backends``, on the
``PYTHONPATH`` of a fresh interpreter, so stevedore and importlib.metadata find them exactly as
they find pjrtkit-cpu. Each one breaks one step of starting: its import raises or hangs, its
``pjrtkit_platform`` raises, its ``pjrtkit_client_topology`` hangs, its client fails or hangs
only when JAX creates it, its JAX lowering rules and compile-only topologies raise or hang. The
cpu backend, XLA's cpu and ``import jax`` must be unaffected; ``pjrtkit list`` names each
failure and its reason; a hang costs one ``PJRTKIT_BACKEND_START_TIMEOUT_S``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TEMPLATE_DIR = Path(__file__).parent / "plugins"
# Long enough for the cpu backend to start on a loaded 2-core machine (about 2 s alone).
START_TIMEOUT_S = 20

_HEALTHY_CLONE = """
    from template_backend import *  # noqa: F401,F403 - every hook of the template backend
    from template_backend import _topology
    from pjrtkit import hookimpl
    from pjrtkit.types import PlatformInfo


    @hookimpl
    def pjrtkit_platform():
        return PlatformInfo(name="pjrtkit_{name}", version="0", device_kind="throwaway")
"""



def _after_the_start_check(breakage: str) -> str:
    """A healthy clone whose client hook runs ``breakage`` (one line) from its second call on:
    discovery's start check is the first call, JAX creating the client the second."""
    return _HEALTHY_CLONE + f"""

    _calls = []


    @hookimpl
    def pjrtkit_client_topology(options):
        _calls.append(options)
        if len(_calls) > 1:
            {breakage}
        return _topology("throwaway")
    """


PLUGINS = {
    "raises_on_import": "raise RuntimeError('broken on purpose at import')\n",
    "hangs_on_import": "import time\ntime.sleep(3600)\n",
    "platform_raises": """
        from pjrtkit import hookimpl


        @hookimpl
        def pjrtkit_platform():
            raise RuntimeError("pjrtkit_platform broken on purpose")
    """,
    "topology_hangs": _HEALTHY_CLONE + """

    @hookimpl
    def pjrtkit_client_topology(options):
        import time
        time.sleep(3600)
    """,
    # Pass discovery's start check, then fail or hang when JAX creates their client.
    "client_fails_in_jax": _after_the_start_check(
        'raise RuntimeError("client broken on purpose after the start check")'),
    "client_hangs_in_jax": _after_the_start_check("import time; time.sleep(3600)"),
    # Registers and runs programs; its compile-only topology hook never returns.
    "aot_hangs": _HEALTHY_CLONE + """

    @hookimpl
    def pjrtkit_make_topology(name, options):
        import time
        time.sleep(3600)
    """,
    # Registers and runs programs; its optional hooks raise.
    "rules_and_aot_raise": _HEALTHY_CLONE + """

    @hookimpl
    def pjrtkit_jax_lowering_rules():
        raise RuntimeError("lowering rules broken on purpose")


    @hookimpl
    def pjrtkit_make_topology(name, options):
        raise RuntimeError("make_topology broken on purpose")
    """,
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A directory holding the throwaway plugins and their distribution's metadata."""
    root = tmp_path_factory.mktemp("throwaway_backends")
    for name, source in PLUGINS.items():
        body = textwrap.dedent(source).replace("{name}", name)
        (root / f"throwaway_{name}.py").write_text(body)
    info = root / "pjrtkit_throwaway-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pjrtkit-throwaway\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[pjrtkit.backends]\n" + "".join(
        f"{name} = throwaway_{name}\n" for name in PLUGINS))
    return root


class Started:
    """A fresh interpreter with the throwaway plugins installed; ``result()`` waits for it."""

    def __init__(self, site: Path, args: list[str], **env):
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES")}
        environment.update(env)
        environment.setdefault("PJRTKIT_BACKEND_START_TIMEOUT_S", str(START_TIMEOUT_S))
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(site), str(TEMPLATE_DIR), environment.get("PYTHONPATH", "")])
        self.args = [sys.executable, *args]
        self.began = time.monotonic()
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=environment)
        self._result: subprocess.CompletedProcess | None = None
        self.seconds = 0.0

    def result(self) -> subprocess.CompletedProcess:
        if self._result is None:
            try:
                stdout, stderr = self.process.communicate(timeout=240)
            finally:
                if self.process.poll() is None:
                    self.process.kill()
            self.seconds = time.monotonic() - self.began
            self._result = subprocess.CompletedProcess(self.args, self.process.returncode,
                                                       stdout, stderr)
        return self._result


def run(site: Path, args: list[str], **env) -> subprocess.CompletedProcess:
    return Started(site, args, **env).result()


JAX_PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.experimental import topologies
    print("default", jax.devices()[0].platform)
    cpu = jax.devices("pjrtkit_cpu")[0]
    print("pjrtkit_cpu", float(jax.jit(lambda x: (x * x).sum())(jnp.arange(4.0, device=cpu))))
    clone = jax.devices("pjrtkit_rules_and_aot_raise")[0]
    print("clone", jax.jit(lambda x: x + x)(jnp.ones(2, jnp.float32, device=clone)).tolist())
    try:
        topologies.get_topology_desc("", platform="pjrtkit_rules_and_aot_raise")
    except Exception as exc:
        print("aot", type(exc).__name__, "make_topology broken on purpose" in str(exc))
    try:
        topologies.get_topology_desc("", platform="pjrtkit_aot_hangs")
    except Exception as exc:
        print("aot hangs", type(exc).__name__, "DEADLINE_EXCEEDED" in str(exc),
              "(pjrtkit_make_topology)" in str(exc))
    for platform in ("pjrtkit_client_fails_in_jax", "pjrtkit_topology_hangs",
                     "pjrtkit_client_hangs_in_jax"):
        try:
            jax.devices(platform)
        except Exception as exc:
            print("absent", platform, type(exc).__name__,
                  "DEADLINE_EXCEEDED" in str(exc) and "did not finish within" in str(exc))
    print("still", float(jnp.ones(3, device=cpu).sum()), jax.devices("cpu")[0].platform)
""")


@pytest.fixture(scope="module")
def with_hanging_backends(site) -> dict[str, Started]:
    """`pjrtkit list` and a JAX program beside every throwaway backend, the hanging ones
    included; started together, so the module waits for the start timeout once."""
    return {"list": Started(site, ["-m", "pjrtkit.cli", "list", "--json"]),
            "jax": Started(site, ["-c", JAX_PROGRAM])}


@pytest.mark.long  # waits out the start timeout (20 s) twice: make test-long, which CI runs
def test_pjrtkit_list_reports_each_broken_backend_with_its_reason(with_hanging_backends):
    listing = with_hanging_backends["list"]
    out = listing.result()
    elapsed = listing.seconds
    assert out.returncode == 0, out.stderr
    statuses = {s["name"]: s for s in json.loads(out.stdout)}
    assert statuses["cpu"]["status"] == "ok"
    failed = {name: s["reason"] for name, s in statuses.items() if s["status"] == "failed"}
    assert set(failed) == {"raises_on_import", "hangs_on_import", "platform_raises",
                           "topology_hangs"}, failed
    assert "import of throwaway_raises_on_import failed: RuntimeError: broken on purpose" \
        in failed["raises_on_import"]
    assert "pjrtkit_platform raised RuntimeError: pjrtkit_platform broken on purpose" \
        in failed["platform_raises"]
    assert f"did not start within {START_TIMEOUT_S} s" in failed["hangs_on_import"]
    assert "stuck importing its module" in failed["hangs_on_import"]
    assert "stuck calling pjrtkit_client_topology" in failed["topology_hangs"]
    # The backends start at once: two hanging backends cost one timeout, not two.
    assert elapsed < 2 * START_TIMEOUT_S, elapsed
    # Logged once each, on stderr, for whoever runs JAX without `pjrtkit list`.
    for name in failed:
        assert out.stderr.count(f"pjrtkit backend {name!r}") == 1, out.stderr


@pytest.mark.long
def test_jax_and_the_cpu_backend_work_beside_broken_backends(with_hanging_backends):
    out = with_hanging_backends["jax"].result()
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:5] == ["default cpu", "pjrtkit_cpu 14.0", "clone [2.0, 2.0]",
                         "aot JaxRuntimeError True", "aot hangs JaxRuntimeError True True"], \
        out.stdout
    # The hanging client cost one start timeout (bounded_calls) and is absent, saying why.
    assert lines[5:] == ["absent pjrtkit_client_fails_in_jax RuntimeError False",
                         "absent pjrtkit_topology_hangs RuntimeError False",
                         "absent pjrtkit_client_hangs_in_jax RuntimeError True",
                         "still 3.0 cpu"], out.stdout
    # Why each is missing is in the log; the client that failed inside JAX is JAX's own
    # "failed to initialize" error, recorded instead of raised for every program, and warned
    # about once on stderr (JAX itself only logs it at INFO).
    assert "client broken on purpose after the start check" not in out.stdout
    for name, why in (("client_fails_in_jax", "client broken on purpose after the start check"),
                      ("client_hangs_in_jax", "creating a pjrtkit_client_hangs_in_jax client")):
        warned = [line for line in out.stderr.splitlines()
                  if line.startswith(f"pjrtkit backend {name!r}: creating its")]
        assert len(warned) == 1 and why in warned[0], out.stderr[-3000:]
    assert "no JAX lowering rules registered" in out.stderr


def test_naming_the_broken_backend_in_jax_platforms_fails_loudly_and_says_why(site):
    out = run(site, ["-c", "import jax; jax.devices()"],
              JAX_PLATFORMS="pjrtkit_client_fails_in_jax,cpu",
              PJRTKIT_BACKENDS="client_fails_in_jax,cpu")  # no hanging ones: no timeout wait
    assert out.returncode != 0
    assert "client broken on purpose after the start check" in out.stderr


def test_pjrtkit_backends_leaves_broken_backends_unimported(site):
    # Narrowed to cpu, the hanging ones are never started, so nothing waits for a timeout.
    started = time.monotonic()
    out = run(site, ["-c", textwrap.dedent("""
        import sys, jax, jax.numpy as jnp
        print(float(jnp.ones(3, device=jax.devices("pjrtkit_cpu")[0]).sum()),
              sorted(m for m in sys.modules if m.startswith("throwaway_")))
    """)], PJRTKIT_BACKENDS="cpu", PJRTKIT_BACKEND_START_TIMEOUT_S="600")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["3.0", "[]"]
    assert time.monotonic() - started < 120


def test_loading_a_hanging_backend_by_name_fails_after_the_timeout(site):
    out = run(site, ["-m", "pjrtkit.cli", "info", "hangs_on_import"],
              PJRTKIT_BACKEND_START_TIMEOUT_S="3")
    assert out.returncode != 0
    assert "pjrtkit backend 'hangs_on_import' failed to load: did not start within 3 s" \
        in out.stdout + out.stderr
