"""The vocabulary of the conformance suite: checks, outcomes, results.

A check is a function registered with ``@check(id, layer=...)``. It receives the layer's
context object (``abi``: an ``AbiDriver`` over one PJRT_Api; ``hooks``: a ``Backend`` facade;
``jax``: a ``JaxTarget``) and either returns (PASS, optionally with a detail string) or raises:

- ``Failed(what, expected=..., actual=...)``: FAIL, with what was expected and what came back;
- ``Skipped(reason)``: SKIP, a prerequisite is missing (e.g. a function newer than the plugin);
- ``Unsupported(capability)``: UNSUPPORTED, the plugin answered UNIMPLEMENTED for an optional
  capability. A check marked ``mandatory=True`` turns UNIMPLEMENTED into FAIL instead.

Any other exception is a FAIL whose detail names the exception.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import Any

LAYERS = ("abi", "hooks", "jax")


class Outcome(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    UNSUPPORTED = "UNSUPPORTED"
    SKIP = "SKIP"


class Failed(AssertionError):
    def __init__(self, what: str, *, expected: Any = None, actual: Any = None):
        super().__init__(what)
        self.what = what
        self.expected = expected
        self.actual = actual


class Skipped(Exception):
    """A prerequisite is missing; the message says which."""


class Unsupported(Exception):
    """The plugin does not offer an optional capability (it answered UNIMPLEMENTED)."""

    def __init__(self, capability: str, detail: str = ""):
        super().__init__(detail or capability)
        self.capability = capability


def expect(condition: bool, what: str, *, expected: Any = None, actual: Any = None) -> None:
    """Raise ``Failed`` unless ``condition``."""
    if not condition:
        raise Failed(what, expected=expected, actual=actual)


def expect_equal(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise Failed(what, expected=expected, actual=actual)


@dataclasses.dataclass(frozen=True)
class Check:
    id: str
    layer: str
    function: Callable[[Any], str | None]
    mandatory: bool
    capability: str | None
    description: str


@dataclasses.dataclass
class CheckResult:
    id: str
    layer: str
    outcome: Outcome
    detail: str = ""
    expected: Any = None
    actual: Any = None
    capability: str | None = None
    description: str = ""

    def as_json(self) -> dict:
        return {"id": self.id, "layer": self.layer, "outcome": self.outcome.value,
                "detail": self.detail, "expected": _jsonable(self.expected),
                "actual": _jsonable(self.actual), "capability": self.capability,
                "description": self.description}


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


REGISTRY: dict[str, Check] = {}


def check(check_id: str, *, layer: str, mandatory: bool = True, capability: str | None = None):
    """Register a check. ``id`` is unique and stable (reports and reruns use it), e.g.
    ``abi.client.lookup_device_negative``. ``capability`` names the optional feature a check
    probes, for the report's capability table."""
    if layer not in LAYERS:
        raise ValueError(f"layer must be one of {LAYERS}")

    def register(fn):
        if check_id in REGISTRY:
            raise ValueError(f"duplicate conformance check id {check_id}")
        doc = (fn.__doc__ or "").strip().splitlines()
        REGISTRY[check_id] = Check(check_id, layer, fn, mandatory, capability,
                                   doc[0] if doc else check_id)
        return fn

    return register


def register_generated(checks: Iterable[Check]) -> None:
    """Register checks built from a table (layer 3's programs x dtypes x shapes)."""
    for c in checks:
        if c.id in REGISTRY:
            raise ValueError(f"duplicate conformance check id {c.id}")
        REGISTRY[c.id] = c


def run_check(c: Check, context: Any) -> CheckResult:
    from pjrtkit.errors import ErrorCode, PjrtError

    result = CheckResult(c.id, c.layer, Outcome.PASS, capability=c.capability,
                         description=c.description)
    try:
        detail = c.function(context)
        result.detail = detail or ""
    except Failed as exc:
        result.outcome, result.detail = Outcome.FAIL, exc.what
        result.expected, result.actual = exc.expected, exc.actual
    except Skipped as exc:
        result.outcome, result.detail = Outcome.SKIP, str(exc)
    except Unsupported as exc:
        if c.mandatory:
            result.outcome = Outcome.FAIL
            result.detail = f"mandatory capability answered UNIMPLEMENTED: {exc}"
        else:
            result.outcome, result.detail = Outcome.UNSUPPORTED, str(exc)
        result.capability = result.capability or exc.capability
    except PjrtError as exc:
        if exc.code == ErrorCode.UNIMPLEMENTED and not c.mandatory:
            result.outcome, result.detail = Outcome.UNSUPPORTED, str(exc)
        else:
            result.outcome = Outcome.FAIL
            result.detail = f"{exc.code.name}: {exc}"
            result.actual = exc.code.name
    except Exception as exc:  # noqa: BLE001 - a check must never take the suite down
        result.outcome = Outcome.FAIL
        result.detail = f"{type(exc).__name__}: {exc}"
    return result
