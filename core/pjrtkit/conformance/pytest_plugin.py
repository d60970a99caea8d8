"""pytest plugin (entry point ``pytest11: pjrtkit``): the conformance suite as test items.

    pytest --pjrtkit-backend=cpu                      every check, one test item each
    pytest --pjrtkit-backend=cpu -k 'hooks.topology'   a subset (-k matches check ids)
    pytest --pjrtkit-library=/path/to/plugin.so       layer 1 against any PJRT plugin
    pytest --pjrtkit-backend=cpu --pjrtkit-layer=abi,hooks

A FAIL is a failed test whose report says what was expected and what came back; SKIP and
UNSUPPORTED are skipped tests with the reason; the terminal summary ends with the share of the
JAX surface the layer-3 items that ran cover. Without these options the plugin does nothing.
Given the option and no test paths, only the conformance items are collected (not the
project's own tests under ``testpaths``).

Layer 3 needs JAX started with the platform under test and XLA's cpu. When JAX was already
started in this process without them, the layer-3 items run in one fresh process instead.
"""
from __future__ import annotations

import pytest

from pjrtkit.conformance.checks import CheckResult, Outcome

_STATE = pytest.StashKey["_ConformanceState"]()


def pytest_addoption(parser):
    group = parser.getgroup("pjrtkit", "pjrtkit conformance suite")
    group.addoption("--pjrtkit-backend", metavar="NAME", default=None,
                    help="run the pjrtkit conformance suite against this installed backend")
    group.addoption("--pjrtkit-library", metavar="PATH", default=None,
                    help="run conformance layer 1 (the C ABI) against a PJRT plugin library")
    group.addoption("--pjrtkit-layer", metavar="LAYERS", default=None,
                    help="comma-separated conformance layers (abi,hooks,jax; default all)")


def _enabled(config) -> bool:
    return bool(config.getoption("pjrtkit_backend", None)
                or config.getoption("pjrtkit_library", None))


def pytest_configure(config):
    if _enabled(config):
        config.addinivalue_line("markers", "pjrtkit_conformance: a pjrtkit conformance check")


@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path, config):
    # `pytest --pjrtkit-backend=cpu` alone runs the suite, not the project's own test files;
    # test paths named on the command line are still collected.
    if _enabled(config) and config.args_source != pytest.Config.ArgsSource.ARGS:
        return True
    return None


class _ConformanceState:
    def __init__(self, config):
        from pjrtkit.conformance.runner import Session, Target, parse_layers

        backend_name = config.getoption("pjrtkit_backend")
        library = config.getoption("pjrtkit_library")
        if backend_name and library:
            raise pytest.UsageError("give --pjrtkit-backend or --pjrtkit-library, not both")
        self.backend_name = backend_name
        self.target = (Target.of_library(library) if library
                       else Target.backend_named(backend_name))
        self.layers = parse_layers(config.getoption("pjrtkit_layer"), self.target.layers)
        self.session = Session(self.target)
        self.subprocess_results: dict[str, CheckResult] | None = None
        self.results: list[CheckResult] = []  # in the order the items ran, for the summary

    def result(self, item: "ConformanceItem") -> CheckResult:
        check = item.check
        if check.layer == "jax":
            context, problem = self.session.context("jax")
            if problem is None and context.unavailable and context.started_elsewhere:
                return self._from_subprocess(item)
        result, _seconds = self.session.run(check)
        return result

    def _from_subprocess(self, item: "ConformanceItem") -> CheckResult:
        from pjrtkit.conformance.runner import run_in_subprocess

        if self.subprocess_results is None:
            ids = [i.check.id for i in item.session.items
                   if isinstance(i, ConformanceItem) and i.check.layer == "jax"]
            self.subprocess_results = run_in_subprocess(self.backend_name, ids, ["jax"])
        found = self.subprocess_results.get(item.check.id)
        if found is None:
            return CheckResult(item.check.id, "jax", Outcome.FAIL,
                               detail="the fresh-process run reported no result for this check")
        return found


class ConformanceFailure(Exception):
    def __init__(self, result: CheckResult):
        super().__init__(result.detail)
        self.result = result


class ConformanceCollector(pytest.Collector):
    def collect(self):  # items are made in pytest_collection_modifyitems
        return []


class ConformanceItem(pytest.Item):
    def __init__(self, *, check, state, **kwargs):
        super().__init__(**kwargs)
        self.check = check
        self.state = state
        self.add_marker("pjrtkit_conformance")

    def runtest(self):
        result = self.state.result(self)
        self.state.results.append(result)
        self.user_properties.append(("outcome", result.outcome.value))
        if result.outcome == Outcome.FAIL:
            raise ConformanceFailure(result)
        if result.outcome == Outcome.SKIP:
            pytest.skip(f"SKIP: {result.detail}")
        if result.outcome == Outcome.UNSUPPORTED:
            pytest.skip(f"UNSUPPORTED ({result.capability or 'optional capability'}): "
                        f"{result.detail}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            r = excinfo.value.result
            return "\n".join([
                f"conformance check {r.id} FAILED ({r.layer} layer)",
                f"  what it checks: {r.description}",
                f"  detail:   {r.detail}",
                f"  expected: {r.expected!r}",
                f"  actual:   {r.actual!r}",
            ])
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"conformance {self.check.id}"


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they apply to these items
def pytest_collection_modifyitems(session, config, items):
    if not _enabled(config):
        return
    from pjrtkit.conformance.runner import (SelectionError, import_layer,
                                                    select_checks)

    state = _ConformanceState(config)
    config.stash[_STATE] = state
    for layer in state.layers:
        reason = import_layer(layer)
        if reason:
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(f"conformance layer {layer} not run: {reason}"), 2)
    try:
        checks = select_checks(state.layers)
    except SelectionError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if any(c.layer == "jax" for c in checks):
        state.session.prepare_jax()  # before layer 1 lowers programs with JAX
    collector = ConformanceCollector.from_parent(
        session, name=f"pjrtkit-conformance[{state.target.label}]")
    items.extend(ConformanceItem.from_parent(collector, name=c.id, check=c, state=state)
                 for c in checks)


def pytest_terminal_summary(terminalreporter, config):
    """After the items: how much of the JAX surface the layer-3 items that ran cover."""
    state = config.stash.get(_STATE, None) if _enabled(config) else None
    if state is None or not any(r.layer == "jax" for r in state.results):
        return
    from pjrtkit.conformance.results import SuiteResult, describe_surface

    ran = SuiteResult(info={}, results=state.results, durations={}, duration_seconds=0.0,
                      layers=state.layers)
    name = state.target.platform or state.target.label
    terminalreporter.write_line(f"pjrtkit conformance: {name} "
                                f"{describe_surface(ran.jax_surface())} (of the items that ran)")


def pytest_unconfigure(config):
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.session.close()
