"""Running the conformance suite against one target: a pjrtkit backend, or (layer 1 only) any
PJRT plugin shared library.

``run_suite(target, layers=..., check_ids=...)`` imports the layers' check modules, builds one
context per layer (``abi``: an ``AbiDriver``; ``hooks``: the ``Backend`` facade; ``jax``: a
``JaxTarget``), runs the selected checks and returns a ``SuiteResult`` that ``report`` turns into
JSON and markdown. ``Session`` does the same one check at a time (the pytest plugin uses it).

JAX fixes its platforms at the first backend use, and layer 1 lowers programs with JAX, so a
run that includes layer 3 enables the platform under test and XLA's cpu before anything else.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
import pkgutil
import platform as host_platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pjrtkit.conformance import report
from pjrtkit.conformance.checks import (LAYERS, REGISTRY, Check, CheckResult, Outcome,
                                                run_check)
from pjrtkit.conformance.children import (Shard, ShardRun, child_command, read_report,
                                          results_and_durations)
from pjrtkit.conformance.results import SuiteResult, describe_surface

PACKAGE = "pjrtkit.conformance"
LAYER_MODULES = {"abi": "abi_checks", "hooks": "hooks_checks", "jax": "jax_checks"}


class SelectionError(ValueError):
    """A --check or --layer argument names nothing that exists."""


# ---- targets ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Target:
    """What the suite runs against. ``name`` is the backend name used in rerun commands; a
    ``backend`` that no entry point names (a test backend) sets ``rerun_name`` to None."""

    label: str
    backend: Any = None
    library: str | None = None
    name: str | None = None

    @classmethod
    def backend_named(cls, name: str) -> "Target":
        from pjrtkit.discovery import load_backend

        return cls(label=name, backend=load_backend(name), name=name)

    @classmethod
    def of_backend(cls, backend, *, name: str | None = None) -> "Target":
        return cls(label=backend.name, backend=backend, name=name)

    @classmethod
    def of_library(cls, path: str) -> "Target":
        return cls(label=os.fspath(path), library=os.fspath(path))

    @property
    def layers(self) -> tuple[str, ...]:
        return ("abi",) if self.library else LAYERS

    @property
    def platform(self) -> str | None:
        return self.backend.platform_name if self.backend is not None else None

    def info(self) -> dict[str, Any]:
        import jax
        import jaxlib

        info: dict[str, Any] = {"target": self.label, "kind": "library" if self.library
                                else "pjrtkit backend"}
        if self.backend is not None:
            info.update(backend=self.backend.name, platform=self.backend.platform_name,
                        plugin_version=self.backend.version,
                        platform_version=self.backend.platform.version,
                        device_kind=self.backend.platform.device_kind)
        if self.library:
            info["library"] = self.library
        try:
            from importlib.metadata import version
            info["pjrtkit_version"] = version("pjrtkit")
        except Exception:  # noqa: BLE001 - informational only
            info["pjrtkit_version"] = "unknown"
        info.update(jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
                    python=sys.version.split()[0], machine=host_platform.machine())
        return info


# ---- check selection --------------------------------------------------------------------------

def import_layer(layer: str) -> str | None:
    """Import the check modules of ``layer``; None, or why they are missing."""
    base = LAYER_MODULES[layer]
    try:
        importlib.import_module(f"{PACKAGE}.{base}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.endswith(base):
            return f"{PACKAGE}.{base} is not installed"
        raise
    # Split modules (abi_checks_buffers, ...) register themselves too, whether or not the main
    # module imports them.
    package = importlib.import_module(PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith(base + "_"):
            importlib.import_module(f"{PACKAGE}.{module.name}")
    return None


def parse_layers(text: str | Sequence[str] | None, allowed: Sequence[str] = LAYERS
                 ) -> tuple[str, ...]:
    if text is None:
        return tuple(allowed)
    parts = text.split(",") if isinstance(text, str) else list(text)
    layers = tuple(p.strip() for part in parts for p in part.split(",") if p.strip())
    unknown = [layer for layer in layers if layer not in LAYERS]
    if unknown:
        raise SelectionError(f"unknown layer(s) {unknown}; layers are {', '.join(LAYERS)}")
    outside = [layer for layer in layers if layer not in allowed]
    if outside:
        raise SelectionError(f"layer(s) {outside} do not apply to this target (only "
                             f"{', '.join(allowed)})")
    return tuple(layer for layer in LAYERS if layer in layers)


def _matches(pattern: str, check_id: str) -> bool:
    if pattern == check_id:
        return True
    if "*" in pattern:
        regex = ".*".join(re.escape(part) for part in pattern.split("*"))
        return re.fullmatch(regex, check_id) is not None
    return pattern.endswith(".") and check_id.startswith(pattern)


def select_checks(layers: Sequence[str], patterns: Iterable[str] | None = None) -> list[Check]:
    """The registered checks of ``layers``, narrowed by ``patterns`` (exact ids; ``*`` as a
    wildcard; a prefix ending in ``.``). Raises SelectionError for a pattern matching none."""
    checks = [c for c in REGISTRY.values() if c.layer in layers]
    order = {layer: i for i, layer in enumerate(LAYERS)}
    checks.sort(key=lambda c: order[c.layer])  # registration order within a layer
    if not patterns:
        return checks
    patterns = list(patterns)
    chosen = [c for c in checks if any(_matches(p, c.id) for p in patterns)]
    for p in patterns:
        if not any(_matches(p, c.id) for c in checks):
            close = difflib.get_close_matches(p, [c.id for c in checks], n=5, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SelectionError(f"no check {p!r} in layer(s) {', '.join(layers)}{hint}")
    return chosen


# ---- contexts ---------------------------------------------------------------------------------

class Session:
    """Contexts built once per layer, and checks run one at a time against them."""

    def __init__(self, target: Target):
        self.target = target
        self._contexts: dict[str, tuple[Any, str | None]] = {}
        self.api_info: dict[str, Any] = {}

    def prepare_jax(self) -> None:
        """Enable the platform under test and XLA's cpu before any layer starts JAX."""
        if self.target.backend is not None and "jax" not in self._contexts:
            self.context("jax")

    def context(self, layer: str) -> tuple[Any, str | None]:
        """(context, None) or (None, why the layer cannot run)."""
        if layer not in self._contexts:
            try:
                self._contexts[layer] = (self._build(layer), None)
            except Exception as exc:  # noqa: BLE001 - reported on every check of the layer
                self._contexts[layer] = (None, f"{type(exc).__name__}: {exc}")
        return self._contexts[layer]

    def _build(self, layer: str) -> Any:
        if layer == "abi":
            from pjrtkit.conformance.abi_driver import AbiDriver

            if self.target.library:
                driver = AbiDriver.from_library(self.target.library)
            else:
                driver = AbiDriver.from_backend(self.target.backend)
            self.api_info = {"pjrt_api_version": f"{driver.major}.{driver.minor}",
                             "pjrt_api_struct_size": driver.struct_size}
            return driver
        if layer == "hooks":
            return self.target.backend
        from pjrtkit.conformance.jax_checks import JaxTarget

        return JaxTarget(self.target.platform, self.target.backend)

    def run(self, c: Check) -> tuple[CheckResult, float]:
        start = time.perf_counter()
        context, problem = self.context(c.layer)
        if problem is not None:
            result = CheckResult(c.id, c.layer, Outcome.FAIL, capability=c.capability,
                                 description=c.description,
                                 detail=f"the {c.layer} layer could not start: {problem}")
        else:
            result = run_check(c, context)
        return result, time.perf_counter() - start

    def close(self) -> None:
        context, _ = self._contexts.get("abi", (None, None))
        if context is not None:
            try:
                context.close()
            except Exception:  # noqa: BLE001 - cleanup must not hide the results
                pass


def run_suite(target: Target, *, layers: Sequence[str] | None = None,
              check_ids: Iterable[str] | None = None,
              progress: Callable[[CheckResult], None] | None = None,
              jobs: int = 1) -> SuiteResult:
    """Run the selected checks of ``layers`` against ``target``.

    With ``jobs`` > 1 and a target named by an installed backend, the JAX layer's checks are
    dealt out over ``jobs`` child processes (``pjrtkit conformance <name> --check <ids>``, every
    ``jobs``-th check to one child), which run while this process runs the other layers; the
    report is the same as one process's, in the same order. A child that ends without a report
    fails each of its checks, naming its exit status."""
    start = time.perf_counter()
    layers = parse_layers(layers, target.layers)
    missing = {}
    for layer in layers:
        reason = import_layer(layer)
        if reason:
            missing[layer] = reason
    checks = select_checks(layers, check_ids)
    jax_checks = [c for c in checks if c.layer == "jax"]
    children = None
    if jobs > 1 and target.name and len(jax_checks) > 1:
        shards = [jax_checks[k::jobs] for k in range(jobs)]
        children = ShardRun(target.name, [[c.id for c in shard] for shard in shards],
                            layers=["jax"])
        children.start()
        here = [c for c in checks if c.layer != "jax"]
    else:
        here = checks
    session = Session(target)
    found, durations = {}, {}
    try:
        if any(c.layer == "jax" for c in here):
            session.prepare_jax()
        for c in here:
            found[c.id], durations[c.id] = session.run(c)
            if progress is not None:
                progress(found[c.id])
        if children is not None:
            for shard in children.finished():
                shard_results, shard_durations = _shard_outcomes(shard, shards[shard.index])
                found.update(shard_results)
                durations.update(shard_durations)
                if progress is not None:
                    for result in shard_results.values():
                        progress(result)
    finally:
        session.close()
        if children is not None:
            children.close()
    info = target.info()
    info.update(session.api_info)
    return SuiteResult(info=info, results=[found[c.id] for c in checks], durations=durations,
                       duration_seconds=time.perf_counter() - start, layers=layers,
                       missing_layers=missing, rerun_name=target.name)


def _shard_outcomes(shard: Shard, checks: list[Check]
                    ) -> tuple[dict[str, CheckResult], dict[str, float]]:
    """A child's results and durations; without its report, each of its checks fails, naming
    the child's exit status and the end of its output."""
    if shard.report is not None:
        return results_and_durations(shard.report)
    results = {c.id: CheckResult(
        c.id, c.layer, Outcome.FAIL, capability=c.capability, description=c.description,
        detail=f"the conformance child running this check's shard ended without a report "
               f"(exit status {shard.exit_status}): {shard.output_tail[-2000:]}")
        for c in checks}
    return results, {c.id: 0.0 for c in checks}


def run_in_subprocess(backend_name: str, check_ids: Sequence[str], layers: Sequence[str],
                      timeout: float = 1800) -> dict[str, CheckResult]:
    """Run checks of a named backend in a fresh process (JAX platforms are per process)."""
    with tempfile.TemporaryDirectory(prefix="pjrtkit-conformance-") as tmp:
        path = os.path.join(tmp, "report.json")
        done = subprocess.run(child_command(backend_name, path, layers, check_ids),
                              capture_output=True, text=True, timeout=timeout)
        if not os.path.exists(path):
            raise RuntimeError(f"the conformance subprocess wrote no report (exit "
                               f"{done.returncode}): {done.stderr[-2000:]}")
        return results_and_durations(read_report(path))[0]


# ---- the command line (``pjrtkit conformance``; test backends reuse it) -----------------------

def add_arguments(parser) -> None:
    parser.add_argument("--json", metavar="PATH", help="write the JSON report here")
    parser.add_argument("--markdown", metavar="PATH", help="write the markdown report here")
    parser.add_argument("--layer", metavar="LAYERS",
                        help=f"comma-separated layers to run (default: all of "
                             f"{','.join(LAYERS)}; only abi with --library)")
    parser.add_argument("--check", metavar="ID", nargs="+", action="extend",
                        help="run only these checks (exact ids, '*' wildcards, or a prefix "
                             "ending in '.')")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="run the JAX layer's checks in N child processes beside the other "
                             "layers (a backend named by an installed plugin; default 1: all "
                             "in this process)")


def run_and_report(target: Target, args) -> int:
    """Run, print a summary, write the reports; exit status 1 only when a check FAILed."""
    def progress(r: CheckResult) -> None:
        if r.outcome == Outcome.FAIL and not args.quiet:
            print(f"FAIL {r.id}: {r.detail}"[:400], file=sys.stderr, flush=True)

    result = run_suite(target, layers=args.layer, check_ids=args.check, progress=progress,
                       jobs=args.jobs)
    if args.json:
        report.write_json(result, args.json)
    if args.markdown:
        report.write_markdown(result, args.markdown)
    s = result.summary()
    per_layer = "; ".join(
        f"{layer}: {result.count(Outcome.PASS, layer)} PASS, {result.count(Outcome.FAIL, layer)} "
        f"FAIL, {result.count(Outcome.UNSUPPORTED, layer)} UNSUPPORTED, "
        f"{result.count(Outcome.SKIP, layer)} SKIP" for layer in result.layers)
    print(f"pjrtkit conformance {target.label}: PASS {s['pass']}, FAIL {s['fail']}, "
          f"UNSUPPORTED {s['unsupported']}, SKIP {s['skip']} in {result.duration_seconds:.1f} s")
    print(f"  {per_layer}")
    if "jax" in result.layers:
        print(f"  {target.platform or target.label} {describe_surface(result.jax_surface())}")
    for layer, reason in result.missing_layers.items():
        print(f"  layer {layer} not run: {reason}")
    for r in result.failed:
        print(f"  FAIL {r.id}")
    for path in (args.json, args.markdown):
        if path:
            print(f"  report: {path}")
    return result.exit_status


def main_for_backend(backend, argv: Sequence[str] | None = None, *,
                     name: str | None = None) -> int:
    """``pjrtkit conformance`` for a ``Backend`` object that no entry point names."""
    import argparse

    parser = argparse.ArgumentParser(description=f"conformance suite on backend {backend.name}")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_and_report(Target.of_backend(backend, name=name), args)
    except SelectionError as exc:
        parser.error(str(exc))
        return 2
