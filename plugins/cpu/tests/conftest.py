"""Shared fixtures for the cpu plugin's lowering tests.

Each test lowers a real JAX function to StableHLO, runs it through the cpu registry's plan and
compares with XLA's CPU backend in the same process (per-dtype tolerances). Kernels are checked
for exact result shapes and dtypes on every call.
"""
import os
import re
import zlib

os.environ.setdefault("PJRTKIT_CHECK_KERNELS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

from pjrtkit.testing.programs import run_on_xla_cpu, run_with_registry  # noqa: E402
from pjrtkit.testing.tolerances import assert_close  # noqa: E402


@pytest.fixture(autouse=True)
def _floating_point_mode_kept(request):
    """Warn (in the run's warnings summary) when the test thread starts or stops flushing
    subnormals during a test: plans called directly run their kernels on it, and a thread it
    then starts inherits the state (pjrtkit's own threads reset it, see pjrtkit.fp_state)."""
    from pjrtkit.fp_state import flushes_subnormals

    before = flushes_subnormals()
    yield
    after = flushes_subnormals()
    if after != before:
        import warnings

        warnings.warn(f"the test thread {'started' if after else 'stopped'} flushing subnormals "
                      f"during {request.node.nodeid}", RuntimeWarning, stacklevel=1)


@pytest.fixture
def rng(request):
    """A NumPy Generator seeded from the test's name, so every test is reproducible."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def registry():
    from pjrtkit_cpu.lowering import RULES
    return RULES


@pytest.fixture
def check(registry):
    """check(fn, *args, static_argnums=(), loosen=1.0): compare pjrtkit_cpu's plan with XLA."""

    def run(fn, *args, static_argnums=(), loosen=1.0):
        ours = run_with_registry(fn, args, registry, static_argnums=static_argnums)
        ref = run_on_xla_cpu(fn, args, static_argnums=static_argnums)
        assert len(ours) == len(ref)
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_close(a, b, what=f"output {i}", loosen=loosen)
        return ours

    return run


@pytest.fixture
def check_mlir(registry):
    """check_mlir(text, *args): run StableHLO text on XLA's CPU client and on our plan.

    For ops JAX's API cannot emit (integer power, TOTALORDER compares, 3-word Philox states).
    """
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.stablehlo.loader import load_program

    def run(text, *args):
        backend = xla_bridge.get_backend("cpu")
        device = backend.devices()[0]
        executable = backend.compile_and_load(text, xla_client.DeviceList((device,)),
                                              xla_client.CompileOptions())
        ref = executable.execute([jax.device_put(a, device) for a in args])
        with np.errstate(all="ignore"):
            ours = build_plan(load_program(text), registry)(*args)
        assert len(ours) == len(ref)
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_close(np.asarray(a), np.asarray(b), what=f"output {i}")

    return run


# Ops whose rules handle complex operands themselves (no elementwise math on them).
COMPLEX_READY_OPS = frozenset({
    "func.call", "func.return", "stablehlo.fft", "stablehlo.custom_call", "stablehlo.transpose",
    "stablehlo.cholesky", "stablehlo.triangular_solve"})


@pytest.fixture
def run_complex_kernels(registry):
    """run_complex_kernels(fn, *args, platform=None) -> (ours, xla): fn's program planned with
    the registry's rules and complex dtypes admitted, and XLA's cpu results.

    Kernels that take complex themselves (LAPACK, FFT) are tested here on programs made only of
    such ops (asserted), apart from the elementwise complex rules (which the cpu dtype table
    now admits too; test_dtype_sweep.py checks those). ``platform="pjrtkit_cpu"`` lowers with the plugin's JAX
    lowering rules (eigh, svd, ... as pjrtkit_* custom calls)."""
    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.stablehlo.ir import walk_ops
    from pjrtkit.testing.programs import lower_program

    admitted = registry.merged({}, dtypes=(*registry.dtypes, np.dtype(np.complex64),
                                           np.dtype(np.complex128)))

    def run(fn, *args, platform=None):
        if platform is not None:
            jax.devices(platform)  # JAX registers the platform's lowering rules at its start
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform or "cpu",)).as_text()
        # Reading a complex constant through jaxlib's attribute API aborts the process
        # (PJRT_NOTES.md); refuse such programs before the loader sees them.
        assert not re.search(r"stablehlo.constant .*complex<", text), "complex constant"
        program = lower_program(fn, *args, platform=platform)
        names = {op.name for op in walk_ops(program)}
        assert names <= COMPLEX_READY_OPS, f"ops beyond the complex-ready set: {names}"
        with np.errstate(all="ignore"):
            ours = tuple(np.asarray(r) for r in build_plan(program, admitted)(*args))
        return ours, run_on_xla_cpu(fn, args)

    return run


# -- fused loops (test_fusion*.py use these through pytestmark) ---------------------------------
@pytest.fixture
def private_fusion_cache(tmp_path_factory, monkeypatch):
    # One cache directory for the session's tests, never the user's.
    monkeypatch.setenv("PJRTKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "pjrtkit"))


@pytest.fixture
def check_fused(registry, private_fusion_cache):
    """check_fused(fn, *args, fused=True, inside=()): fuse, plan, run unfused and fused, compare
    to XLA. ``inside``: op names (without "stablehlo.") that must end up in fused loops."""
    from pjrtkit.lowering.plan import build_plan
    from pjrtkit.stablehlo.ir import walk_ops
    from pjrtkit.testing.programs import lower_program

    from pjrtkit_cpu.fusion import FUSED_OP, cache, fuse_program
    from pjrtkit_cpu.fusion.kernel import STATS

    def run(fn, *args, fused=True, loosen=1.0, inside=()):
        program = fuse_program(lower_program(fn, *args))
        count = sum(op.name == FUSED_OP for op in walk_ops(program))
        assert (count > 0) == fused, f"expected fused={fused}, found {count} fused ops"
        in_loops = {inner.name.removeprefix("stablehlo.") for op in walk_ops(program)
                    if op.name == FUSED_OP for inner in op.regions[0].entry.ops}
        assert set(inside) <= in_loops, f"not fused: {set(inside) - in_loops}"
        plan = build_plan(program, registry)
        flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
        ref = run_on_xla_cpu(fn, args)
        before = dict(STATS)
        with np.errstate(all="ignore"):
            first = plan(*flat)
            cache.wait_all(timeout=120)
            second = plan(*flat)
        failed = [f for f in list(cache._futures.values()) if f.done() and f.exception()]  # noqa: SLF001
        assert not failed, f"a fused loop failed to compile: {failed[0].exception()!r}"
        for outs in (first, second):
            assert len(outs) == len(ref)
            for i, (a, b) in enumerate(zip(outs, ref)):
                assert_close(np.asarray(a), b, what=f"output {i}", loosen=loosen)
        if fused:
            assert STATS["fused"] > before["fused"], "the fused loop never ran"
        return second

    return run
