"""pjrtkit.jax_compat against the installed JAX release: every private name it reaches for is
still there and still means what it did, the facts it records for the release hold, and no other
module reaches into JAX's private names. A JAX upgrade that moves anything fails here, by name."""
import inspect
import os
import pathlib
import re
import subprocess
import sys

import jax
import pytest

from pjrtkit import jax_compat

ROOT = pathlib.Path(__file__).resolve().parents[1]


def installed_release():
    release = jax_compat.release_line()
    assert release is not None, jax_compat.support_problem()
    return release


# -- the release itself ----------------------------------------------------------------------

def test_the_installed_jax_is_a_supported_release_line():
    versions = jax_compat.installed_versions()
    assert versions["jax"] == jax.__version__
    assert jax_compat.support_problem() is None, jax_compat.support_problem()
    # jaxlib must come from the same release as jax: mixing them is not a tested combination.
    import jaxlib
    assert jaxlib.__version__ == jax.__version__, (jax.__version__, jaxlib.__version__)


def test_every_release_names_a_constraints_file_that_pins_it():
    for line, release in jax_compat.SUPPORTED_JAX.items():
        assert jax_compat.version_tuple(release.jax)[:2] == line
        pins = (ROOT / release.constraints).read_text().splitlines()
        assert f"jax=={release.jax}" in pins, release
        assert f"jaxlib=={release.jax}" in pins, release


def test_the_readme_documents_every_pinned_set():
    readme = (ROOT / "README.md").read_text()
    for release in jax_compat.SUPPORTED_JAX.values():
        assert release.constraints in readme and release.jax in readme, release


def test_pjrtkit_list_names_the_installed_jax():
    out = subprocess.run([sys.executable, "-m", "pjrtkit.cli", "list"], capture_output=True,
                         text=True, check=True).stdout
    first = out.splitlines()[0]
    assert first.startswith(f"jax {jax.__version__}, jaxlib ") and "tested release line" in first


def test_version_tuple_and_support_problem():
    assert jax_compat.version_tuple("0.12.0.1") == (0, 12, 0, 1)
    assert jax_compat.version_tuple("0.13.0rc1") == (0, 13, 0)
    assert jax_compat.version_tuple("unknown") == ()
    assert jax_compat.support_problem("0.11.2") is None
    problem = jax_compat.support_problem("0.13.0")
    assert problem is not None and "0.13.0" in problem and "0.12.0.1" in problem


def test_stablehlo_versions_are_the_ones_recorded_for_this_release():
    current, minimum = jax_compat.stablehlo_version_range()
    assert jax_compat.version_tuple(minimum) <= jax_compat.version_tuple(current)
    release = installed_release()
    if jax.__version__ == release.jax:
        assert current == release.stablehlo_current, (jax.__version__, current)


def test_a_portable_artifact_loads_at_the_current_and_the_minimum_version():
    from pjrtkit.stablehlo.ir import walk_ops
    from pjrtkit.stablehlo.loader import load_program

    text = jax.jit(lambda a: a * 2.0 + 1.0).lower(jax.numpy.ones(3)).as_text()
    current, minimum = jax_compat.stablehlo_version_range()
    for target in (current, minimum):
        program = load_program(jax_compat.serialize_portable_artifact(text, target))
        assert "stablehlo.multiply" in {op.name for op in walk_ops(program)}, target


def test_the_pjrt_minor_jaxlib_speaks_accepts_ours_and_is_the_recorded_one():
    """jaxlib logs both minors when a plugin's differs from its own; read them from the log."""
    from pjrtkit.abi.api import API_VERSION

    env = {k: v for k, v in os.environ.items() if k != "PJRTKIT_BACKENDS"}
    env.update(TF_CPP_MIN_LOG_LEVEL="0", JAX_PLATFORMS="pjrtkit_cpu")
    out = subprocess.run([sys.executable, "-c", "import jax; print(jax.devices()[0].platform)"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["pjrtkit_cpu"]
    found = re.search(r"plugin has PJRT API version (\d+)\.(\d+)\. The framework PJRT API "
                      r"version is (\d+)\.(\d+)", out.stderr)
    assert found, "jaxlib no longer logs the PJRT API versions:\n" + out.stderr[-2000:]
    ours, framework = (int(found[1]), int(found[2])), (int(found[3]), int(found[4]))
    assert ours == API_VERSION
    assert framework[0] == 0 and framework[1] >= ours[1]
    release = installed_release()
    if jax.__version__ == release.jax:
        assert framework[1] == release.pjrt_minor, (jax.__version__, framework)


# -- the private names -----------------------------------------------------------------------

def test_register_plugin_takes_the_arguments_we_pass():
    from jax._src import xla_bridge

    parameters = inspect.signature(xla_bridge.register_plugin).parameters
    assert list(parameters)[0] == "plugin_name"
    for name in ("priority", "c_api"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_a_registered_pjrtkit_platform_fails_quietly():
    # register_plugin makes the registration quiet through BackendRegistration.fail_quietly;
    # a release that drops the field or the registry would leave a broken plugin loud.
    from jax._src import xla_bridge

    jax.devices("cpu")
    assert "fail_quietly" in xla_bridge.BackendRegistration.__dataclass_fields__
    registration = xla_bridge._backend_factories["pjrtkit_cpu"]
    assert registration.fail_quietly is True


def test_backend_registry_queries():
    jax.devices("cpu")  # starts JAX's backends if nothing has yet
    assert jax_compat.backends_are_initialized() is True
    assert jax_compat.platform_is_registered("cpu")
    assert not jax_compat.platform_is_registered("pjrtkit_no_such_platform")
    assert "cpu" in jax_compat.initialized_backend_names()


def test_the_donation_allowlist_is_the_list_jax_reads():
    allowlist = jax_compat.platforms_with_donation()
    assert isinstance(allowlist, list) and "cpu" in allowlist
    name = "pjrtkit_compat_probe"
    try:
        jax_compat.allow_donation(name)
        jax_compat.allow_donation(name)
        assert allowlist.count(name) == 1
        # The list JAX consults when it decides to emit donation is the one we extended.
        from jax._src.interpreters import mlir
        assert name in mlir._platforms_with_donation
    finally:
        while name in allowlist:
            allowlist.remove(name)


@pytest.mark.parametrize("allowlist", jax_compat.ALLOWLISTS, ids=lambda a: a.feature)
def test_each_allowlist_is_where_we_say_and_still_names_cpu(allowlist):
    """The allowlists we do not extend still live where ALLOWLISTS says: if JAX moves or drops
    one, the table (and what the README tells users) must be revisited."""
    import importlib

    module_name, _, attribute = allowlist.where.rpartition(".")
    target = getattr(importlib.import_module(module_name), attribute)
    if isinstance(target, list):
        assert "cpu" in target
    else:
        source = inspect.getsource(target)
        literal = re.search(r"[\[{(][^\]})]*\"cpu\"", source)
        assert literal, f"no platform literal in {allowlist.where}"


def test_xla_client_protos_round_trip():
    client = jax_compat.xla_client()
    options = client.CompileOptions()
    options.num_replicas = 2
    parsed = client.CompileOptions.ParseFromString(options.SerializeAsString())
    assert parsed.num_replicas == 2
    assert jax_compat.serialized_device_assignment([[0], [1]])


# -- nothing else reaches into JAX ------------------------------------------------------------

SHIPPED = ["core/pjrtkit", "gpu/pjrtkit_gpu", "plugins/*/pjrtkit_*", "examples", "benchmarks"]
# The modules allowed to name JAX's private modules. Another entry needs a reason in its
# docstring and its own checks here; prefer adding the access to jax_compat.
MAY_USE_JAX_PRIVATES = {
    "core/pjrtkit/jax_compat.py",
    # Host callbacks, DLPack and platform_dependent on a new platform are built from JAX's own
    # callback, dlpack and conditional internals (no public spelling exists); each module's
    # tests (tests/jax/test_callbacks.py, test_dlpack.py) run on every supported release.
    "core/pjrtkit/jax_callbacks.py",
    "core/pjrtkit/jax_dlpack.py",
    "core/pjrtkit/jax_platform_like.py",
    # pl.pallas_call on the GPU plugins runs JAX's own pallas_call lowering rule as if for
    # cuda/rocm (no public spelling; tests: gpu/tests/test_pallas.py).
    "gpu/pjrtkit_gpu/jax_pallas.py",
    # The jax-tests runner's pytest plugin imports JAX's own test_util, which defines the
    # jax_test_dut flag JAX's test files read (it runs only inside JAX's test environment).
    "core/pjrtkit_tools/jax_tests/pytest_plugin.py",
}


def test_only_jax_compat_imports_private_jax_names():
    offenders = []
    for pattern in SHIPPED:
        for folder in ROOT.glob(pattern):
            for path in folder.rglob("*.py"):
                if str(path.relative_to(ROOT)) in MAY_USE_JAX_PRIVATES:
                    continue
                for number, line in enumerate(path.read_text().splitlines(), 1):
                    code = line.split("#")[0]
                    if re.search(r"\bjax\._src\b|from jax\._src|\bxla_bridge\b", code):
                        offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "JAX private names outside jax_compat:\n" + "\n".join(offenders)


def test_the_pallas_call_rule_the_gpu_plugins_wrap_is_where_they_look():
    """gpu/pjrtkit_gpu/jax_pallas.py re-runs JAX's generic pallas_call rule for cuda/rocm."""
    import inspect

    from jax._src.pallas import pallas_call

    rule = pallas_call._pallas_call_lowering  # noqa: SLF001 - the name the GPU plugins use
    assert "ctx" in inspect.signature(rule).parameters
    assert pallas_call.pallas_call_p.name == "pallas_call"


@pytest.mark.skipif(not jax_compat.pallas_triton_supported(),
                    reason="this jax's Pallas Triton kernels are not compiled by the GPU plugins")
def test_register_pallas_gpu_answers_where_this_jaxs_pallas_lowering_asks():
    """jax 0.12's Pallas Triton lowering asks gpu_info.get_gpu_info() for the device's GPU, and
    unknown device kinds are looked up in gpu_info.registry; jax 0.10 does not ask."""
    try:
        from jax._src.pallas.triton import gpu_info
    except ImportError:
        pytest.skip("this jax's Pallas Triton lowering does not ask which GPU (jax 0.10)")
    jax_compat.register_pallas_gpu("pjrtkit test GPU A", "sm_90")
    jax_compat.register_pallas_gpu("pjrtkit test GPU B", "gfx942")
    try:
        a, b = gpu_info.registry["pjrtkit test GPU A"](), gpu_info.registry["pjrtkit test GPU B"]()
    finally:
        del gpu_info.registry["pjrtkit test GPU A"], gpu_info.registry["pjrtkit test GPU B"]
    assert (a.arch_name, a.compute_capability) == ("9.0", 90)
    assert (b.arch_name, b.compute_capability) == ("gfx942", 0)


def test_the_portable_linear_algebra_jax_provides_is_where_jax_compat_looks():
    """pjrtkit.expansions.jax_linalg reuses JAX's QDWH eigh and svd (the TPU's) and the
    private QR primitives; each name must exist, with the parameters the rules pass."""
    import inspect

    from jax._src.lax import linalg

    eigh = inspect.signature(jax_compat.eigh_qdwh_implementation()).parameters
    assert {"lower", "sort_eigenvalues", "subset_by_index"} <= set(eigh)
    svd = inspect.signature(jax_compat.svd_polar_lowering()).parameters
    assert {"ctx", "operand", "full_matrices", "compute_uv", "subset_by_index",
            "algorithm"} <= set(svd)
    assert jax_compat.is_jacobi_eigh(linalg.EighImplementation.JACOBI)
    assert not jax_compat.is_jacobi_eigh(None)
    assert not jax_compat.is_jacobi_eigh(linalg.EighImplementation.QDWH)
    for name in ("geqrf", "householder_product"):
        assert callable(jax_compat.linalg_function(name))
    for name in ("eigh", "svd", "eig", "schur", "hessenberg", "tridiagonal"):
        assert jax_compat.linalg_primitive(name).name == name
