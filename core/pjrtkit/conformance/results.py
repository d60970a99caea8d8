"""The outcome of one conformance run (``SuiteResult``): counts, the capability table and the
JSON form ``report`` writes and the pytest plugin reads back.

Its own module so that ``runner`` (which produces it) and ``report`` (which renders it) both
import it and neither imports the other's internals.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any

from pjrtkit.conformance.checks import LAYERS, CheckResult, Outcome


@dataclasses.dataclass
class SuiteResult:
    info: dict[str, Any]
    results: list[CheckResult]
    durations: dict[str, float]
    duration_seconds: float
    layers: tuple[str, ...]
    missing_layers: dict[str, str] = dataclasses.field(default_factory=dict)
    rerun_name: str | None = None

    def count(self, outcome: Outcome, layer: str | None = None) -> int:
        return sum(r.outcome == outcome and (layer is None or r.layer == layer)
                   for r in self.results)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome == Outcome.FAIL]

    @property
    def exit_status(self) -> int:
        return 1 if self.failed else 0

    def summary(self) -> dict[str, int]:
        return {"pass": self.count(Outcome.PASS), "fail": self.count(Outcome.FAIL),
                "unsupported": self.count(Outcome.UNSUPPORTED), "skip": self.count(Outcome.SKIP),
                "total": len(self.results)}

    def jax_surface(self) -> dict[str, Any] | None:
        """How much of JAX's surface the plugin covers: layer 3's checks that PASS out of those
        measured (SKIP, where XLA's CPU backend itself cannot run a case, is left out), and
        the UNSUPPORTED checks per capability. None when layer 3 did not run."""
        rows = [r for r in self.results if r.layer == "jax"]
        if not rows:
            return None
        measured = [r for r in rows if r.outcome != Outcome.SKIP]
        passed = sum(r.outcome == Outcome.PASS for r in measured)
        unsupported = collections.Counter(r.capability or "JAX" for r in measured
                                          if r.outcome == Outcome.UNSUPPORTED)
        return {"checks": len(measured), "pass": passed,
                "percent": _floor_percent(passed, len(measured)),
                "fail": sum(r.outcome == Outcome.FAIL for r in measured),
                "skip": len(rows) - len(measured),
                "unsupported": dict(sorted(unsupported.items(), key=lambda kv: (-kv[1], kv[0])))}

    def capabilities(self) -> list[dict[str, Any]]:
        """One row per optional capability: present, absent (UNSUPPORTED), broken (FAIL) or
        unknown (only skipped)."""
        rows: dict[str, dict[str, Any]] = {}
        for r in self.results:
            if not r.capability:
                continue
            row = rows.setdefault(r.capability, {"capability": r.capability, "layer": r.layer,
                                                 "checks": 0, "pass": 0, "fail": 0,
                                                 "unsupported": 0, "skip": 0})
            row["checks"] += 1
            row[r.outcome.value.lower()] += 1
        for row in rows.values():
            if row["fail"]:
                row["status"] = "broken"
            elif row["unsupported"] and not row["pass"]:
                row["status"] = "absent"
            elif row["unsupported"]:
                row["status"] = "partial"
            elif row["pass"]:
                row["status"] = "present"
            else:
                row["status"] = "unknown"
            row["present"] = {"present": True, "absent": False}.get(row["status"])
        order = {layer: i for i, layer in enumerate(LAYERS)}
        return sorted(rows.values(), key=lambda row: (order[row["layer"]], row["capability"]))

    def as_json(self) -> dict[str, Any]:
        checks = []
        for r in self.results:
            entry = r.as_json()
            entry["duration_seconds"] = round(self.durations.get(r.id, 0.0), 4)
            checks.append(entry)
        by_layer = {layer: {"pass": self.count(Outcome.PASS, layer),
                            "fail": self.count(Outcome.FAIL, layer),
                            "unsupported": self.count(Outcome.UNSUPPORTED, layer),
                            "skip": self.count(Outcome.SKIP, layer)} for layer in self.layers}
        return {"summary": self.summary(), "layers": by_layer, "target": self.info,
                "jax_surface": self.jax_surface(), "capabilities": self.capabilities(),
                "missing_layers": self.missing_layers,
                "rerun_name": self.rerun_name,
                "duration_seconds": round(self.duration_seconds, 3), "checks": checks}


def _floor_percent(part: int, whole: int) -> float:
    """Percent with one decimal, rounded down: 99.96% of the surface never reads 100%."""
    return math.floor(1000 * part / whole) / 10 if whole else 0.0


def describe_surface(surface: dict[str, Any] | None) -> str:
    """One sentence for summaries: "covers 71.3% of the JAX surface (512 of 718 checks);
    unsupported: JAX complex (42 checks), ..."."""
    if surface is None:
        return "the JAX surface was not measured (layer 3 did not run)"
    text = (f"covers {surface['percent']:g}% of the JAX surface ({surface['pass']} of "
            f"{surface['checks']} checks)")
    if surface["unsupported"]:
        text += "; unsupported: " + ", ".join(f"{name} ({count} check{'s' * (count != 1)})"
                                              for name, count in surface["unsupported"].items())
    return text


def results_from_json(data: dict[str, Any]) -> list[CheckResult]:
    """CheckResults read back from a report (the pytest plugin's subprocess runs)."""
    return [CheckResult(id=c["id"], layer=c["layer"], outcome=Outcome(c["outcome"]),
                        detail=c.get("detail", ""), expected=c.get("expected"),
                        actual=c.get("actual"), capability=c.get("capability"),
                        description=c.get("description", "")) for c in data["checks"]]
