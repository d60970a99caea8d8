"""Layer 3: JAX end to end. Unchanged JAX programs run on the platform under test and on XLA's
own CPU backend in the same process; every output is compared with the one per-dtype tolerance
table (``pjrtkit.testing.tolerances``: integers, bools and bit-level results exact).

The cases are a table (``jax_cases.py`` and its siblings: programs x dtypes x shapes, JAX's
surface rather than any plugin's), registered as generated checks with ids like
``jax.elementwise.add[float32-3x4]``. The context is a ``JaxTarget``. What the platform lacks
(it answers UNIMPLEMENTED, or JAX has no lowering rule for it) is UNSUPPORTED, never FAIL and
never skipped: the report's summary turns those into the share of JAX's surface it covers.

JAX fixes its platforms at the first backend use. ``configure_jax`` enables the platform under
test and XLA's ``cpu`` beside it when it still can; when JAX already started without one of
them (inside another program's process), ``JaxTarget.unavailable`` says why, and the caller runs
this layer in a fresh process instead (``runner``, ``pytest_plugin``).
"""
from __future__ import annotations

import contextlib
import io
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from pjrtkit.conformance.checks import (Check, Failed, Skipped, Unsupported,
                                                register_generated)
from pjrtkit.conformance import jax_cases, jax_cases_dtypes, jax_cases_numerics, \
    jax_cases_programs
from pjrtkit.conformance.jax_cases import Case

LAYER = "jax"
REFERENCE_PLATFORM = "cpu"


def configure_jax(platform: str, backend=None) -> str | None:
    """Make ``platform`` and XLA's cpu available to JAX; None if both are, else the reason.

    ``backend``: a ``Backend`` that no entry point names (a test backend) is registered with JAX
    here, before JAX starts its platforms.
    """
    import jax

    from pjrtkit import jax_compat, jax_glue

    initialized = jax_compat.backends_are_initialized()
    if not initialized:
        if backend is not None and platform not in jax_glue.registered_backends() \
                and not jax_compat.platform_is_registered(platform):
            jax_glue.register_backend(backend)
        jax.config.update("jax_platforms", f"{platform},{REFERENCE_PLATFORM}")
    missing = []
    for name in (platform, REFERENCE_PLATFORM):
        try:
            if not jax.devices(name):
                missing.append(f"{name} (no devices)")
        except RuntimeError as exc:
            missing.append(f"{name} ({str(exc).splitlines()[0][:200]})")
    if not missing:
        return None
    how = ("JAX was already started in this process without it" if initialized
           else "JAX could not start it")
    return f"platform(s) {', '.join(missing)} unavailable: {how}"


def _declared_features(backend) -> frozenset[str]:
    """The features a backend declares; none when its capabilities hook fails (the hooks
    layer reports that failure; here it only means no allowance is made)."""
    try:
        return backend.capabilities().features
    except Exception:  # noqa: BLE001 - a broken hook is the hooks layer's FAIL, not ours
        return frozenset()


class JaxTarget:
    """The layer-3 context: the device under test and XLA's CPU device as the reference."""

    def __init__(self, platform: str, backend=None):
        from pjrtkit import jax_compat

        self.platform = platform
        # Started by someone else without our platforms: SKIP (rerun in a fresh process);
        # started here and the platform did not come up: the plugin's FAIL.
        self.started_elsewhere = jax_compat.backends_are_initialized()
        self.unavailable = configure_jax(platform, backend)
        # A TPU's float32 contractions are bf16 passes: compared at bfloat16's tolerance.
        self.bf16_contractions = backend is not None and \
            "bf16_contractions" in _declared_features(backend)
        if self.unavailable is None:
            import jax

            self.device = jax.devices(platform)[0]
            self.reference = jax.devices(REFERENCE_PLATFORM)[0]
        self._jitted: dict[str, Callable] = {}

    def jitted(self, case: Case) -> Callable:
        """One jitted function per case, shared by both devices (JAX caches per placement)."""
        import jax

        fn = self._jitted.get(case.id)
        if fn is None:
            fn = case.fn if case.prejitted else jax.jit(case.fn, **case.jit_kwargs)
            self._jitted[case.id] = fn
        return fn


def _summary(value: np.ndarray) -> str:
    value = np.asarray(value)
    flat = value.ravel()
    head = flat[:6].tolist() if flat.dtype.kind != "V" else flat[:6]
    more = ", ..." if flat.size > 6 else ""
    return f"{value.dtype}{list(value.shape)} {head}{more}"


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _run_on(target: JaxTarget, case: Case, args: tuple, device
            ) -> tuple[list, Any, list, str]:
    """(NumPy outputs, their pytree, (placed inputs, device outputs), what it printed)."""
    import jax

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed) if case.prints else contextlib.nullcontext():
        placed = [jax.device_put(a, device) for a in args]
        if case.eager:
            with jax.default_device(device):
                out = case.fn(*placed)
        else:
            out = target.jitted(case)(*placed)
        leaves, treedef = jax.tree_util.tree_flatten(out)
        for leaf in leaves:
            leaf.block_until_ready()
        if case.prints:
            jax.effects_barrier()
    return [np.asarray(x) for x in leaves], treedef, (placed, leaves), printed.getvalue()


def is_absent_capability(exc: BaseException) -> bool:
    """The platform answered UNIMPLEMENTED, or JAX has no lowering rule for it: an absent
    capability, not a wrong answer."""
    text = str(exc)
    return "UNIMPLEMENTED" in text or (isinstance(exc, NotImplementedError)
                                       and "MLIR translation rule for primitive" in text)


_CONTRACTIONS = ("dot_general", "conv_general_dilated")


def _has_contraction(case: Case, args: tuple) -> bool:
    """Whether the case's program holds a dot or a convolution (at any depth of its jaxpr)."""
    import jax

    try:
        with jax.enable_x64(True):
            text = str(jax.make_jaxpr(case.fn)(*args))
    except Exception:  # noqa: BLE001 - a program JAX cannot trace again is judged as it is
        return False
    return any(name in text for name in _CONTRACTIONS)


def run_case(case: Case, target: JaxTarget) -> str:
    """Run ``case`` on both devices and compare; raises Failed/Skipped/Unsupported."""
    import jax

    from pjrtkit.testing.tolerances import assert_close

    if target.unavailable:
        if target.started_elsewhere:
            raise Skipped(target.unavailable)
        raise Failed(f"JAX starts platform {target.platform} beside XLA's cpu",
                     expected="both platforms have devices", actual=target.unavailable)
    capability = case.feature
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    with jax.default_device(target.reference):  # inputs never depend on the device under test
        args = case.make_args(rng)
    with jax.enable_x64(True):
        try:
            expected, expected_tree, _, expected_text = _run_on(target, case, args,
                                                                target.reference)
        except Exception as exc:  # the reference must run it, or the case proves nothing
            raise Skipped(f"XLA's CPU backend cannot run this case: {_error_text(exc)}") from exc
        try:
            actual, actual_tree, (placed, leaves), actual_text = _run_on(target, case, args,
                                                                         target.device)
        except Exception as exc:
            text = _error_text(exc)
            if is_absent_capability(exc):
                raise Unsupported(capability, text) from exc
            raise Failed(f"the program runs on {target.platform}",
                         expected=f"{len(expected)} output(s) like XLA's CPU backend",
                         actual=text) from exc
    if actual_tree != expected_tree:
        raise Failed("the output pytree has XLA's structure", expected=str(expected_tree),
                     actual=str(actual_tree))
    for i, leaf in enumerate(leaves):
        devices = leaf.devices()
        if devices != {target.device}:
            raise Failed(f"output {i} lives on the device under test",
                         expected=str(target.device), actual=str(sorted(map(str, devices))))
    if case.prints and actual_text != expected_text:
        raise Failed("the program prints what it prints on XLA's CPU backend",
                     expected=expected_text[-600:], actual=actual_text[-600:])
    for i, (ours, ref) in enumerate(zip(actual, expected)):
        if ours.dtype != ref.dtype or ours.shape != ref.shape:
            raise Failed(f"output {i} has XLA's dtype and shape",
                         expected=f"{ref.dtype}{list(ref.shape)}",
                         actual=f"{ours.dtype}{list(ours.shape)}")
    if case.invariants is not None:
        # What must agree where the outputs themselves may differ (signs of eigenvectors, ...).
        actual, expected = case.invariants(actual, args), case.invariants(expected, args)
    reduced = target.bf16_contractions and _has_contraction(case, args)
    for i, (ours, ref) in enumerate(zip(actual, expected)):
        try:
            assert_close(ours, ref, what=f"output {i}", loosen=case.loosen,
                         reduced_precision=reduced)
        except AssertionError as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            raise Failed(f"output {i} of {case.id} matches XLA's CPU backend within the "
                         f"{ref.dtype} tolerance{' (bf16 contractions)' if reduced else ''}: "
                         f"{' | '.join(lines[:6])[:600]}",
                         expected=_summary(ref), actual=_summary(ours)) from exc
    if case.donate:
        if not placed[0].is_deleted():
            raise Failed("a donated input reads as deleted after the call",
                         expected="is_deleted() == True", actual="is_deleted() == False")
    shapes = ", ".join(f"{x.dtype}{list(x.shape)}" for x in actual)
    return f"matches XLA cpu: {shapes}"[:200]


def _as_check(case: Case) -> Check:
    def run(target: JaxTarget, case=case) -> str:
        return run_case(case, target)

    # JAX cases are optional capabilities: an op family the backend answers UNIMPLEMENTED for
    # is UNSUPPORTED; a wrong answer is always FAIL.
    return Check(case.id, LAYER, run, mandatory=False, capability=case.feature,
                 description=case.description or f"{case.id} agrees with XLA's CPU backend")


CASE_MODULES = (jax_cases, jax_cases_dtypes, jax_cases_numerics, jax_cases_programs)


def all_cases() -> list[Case]:
    """Every layer-3 case, built once: each case module's ``BUILDERS`` add to one table."""
    if not jax_cases.CASES:
        for module in CASE_MODULES:
            for build in module.BUILDERS:
                build()
    ids = [c.id for c in jax_cases.CASES]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise ValueError(f"duplicate layer-3 case ids: {sorted(duplicates)}")
    return list(jax_cases.CASES)


def register_cases() -> list[Case]:
    cases = all_cases()
    register_generated(_as_check(c) for c in cases)
    return cases


CASES = register_cases()
