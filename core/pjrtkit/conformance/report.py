"""Conformance reports: JSON for machines, markdown for a plugin author.

The markdown report stands on its own for someone who has never seen pjrtkit: what was
measured, which optional features the plugin has, every FAIL with what was expected and what
came back, and the exact commands to rerun one check.
"""
from __future__ import annotations

import json
import os
import shlex
from typing import Any

from pjrtkit.conformance.checks import LAYERS, Outcome
from pjrtkit.conformance.results import SuiteResult, describe_surface

SECTIONS = ("Summary", "Capabilities", "Failures", "How to rerun one check", "All checks")

LAYER_TITLES = {
    "abi": "layer 1, C ABI (the PJRT_Api driven through cffi, as a framework does)",
    "hooks": "layer 2, hooks (the plugin's pjrtkit hook implementations)",
    "jax": "layer 3, JAX end to end (programs compared with XLA's CPU backend)",
}

OUTCOME_MEANING = {
    "PASS": "the plugin did what the contract asks",
    "FAIL": "the plugin broke the contract (or answered UNIMPLEMENTED for a mandatory "
            "function); fix these",
    "UNSUPPORTED": "the plugin answered UNIMPLEMENTED for an optional capability",
    "SKIP": "a prerequisite is missing (the reason is given); not a pass",
}


def write_json(result: SuiteResult, path: str | os.PathLike) -> None:
    _ensure_parent(path)
    with open(path, "w") as f:
        json.dump(result.as_json(), f, indent=2, sort_keys=False)
        f.write("\n")


def write_markdown(result: SuiteResult, path: str | os.PathLike) -> None:
    _ensure_parent(path)
    with open(path, "w") as f:
        f.write(to_markdown(result))


def _ensure_parent(path) -> None:
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)


def _cell(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text.replace("|", "\\|") or " "


def _code(value: Any, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    text = str(text)
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text.replace("```", "'''")


def rerun_commands(result: SuiteResult, check_id: str) -> list[str]:
    quoted = shlex.quote(check_id)
    if result.info.get("library"):
        library = shlex.quote(result.info["library"])
        return [f"pjrtkit conformance --library {library} --check {quoted}",
                f"pytest --pjrtkit-library={library} -k {quoted}"]
    name = result.rerun_name
    if name is None:
        return [f"(this backend is not installed under a name; run the suite on it again with "
                f"--check {quoted})"]
    return [f"pjrtkit conformance {name} --check {quoted}",
            f"pytest --pjrtkit-backend={name} -k {quoted}"]


def verdict(result: SuiteResult) -> str:
    """The summary's first line. "Conformant" alone only when nothing failed and the plugin has
    all of the JAX surface the suite measures; otherwise it says how much it covers and what is
    missing (a plugin without complex numbers never reads as plainly conformant)."""
    surface = result.jax_surface()
    coverage = describe_surface(surface)
    if result.failed:
        return (f"**Not conformant**: {len(result.failed)} check(s) failed; see Failures "
                f"below. The plugin {coverage}.")
    if surface is None:
        return f"**Conformant** in the layers that ran: no check failed; {coverage}."
    if surface["pass"] < surface["checks"]:
        return (f"**Conformant on what it supports, not on all of JAX**: no check failed, and "
                f"the plugin {coverage}.")
    return f"**Conformant**: no check failed, and the plugin {coverage}."


def to_markdown(result: SuiteResult) -> str:
    info = result.info
    summary = result.summary()
    lines: list[str] = []
    title = info.get("platform") or info.get("library") or info.get("target")
    lines += [f"# PJRT plugin conformance report: {title}", ""]
    lines += ["This report measures one PJRT plugin against the contract a framework (JAX) relies "
              "on. Each check has one outcome:", ""]
    for outcome, meaning in OUTCOME_MEANING.items():
        lines.append(f"- **{outcome}**: {meaning}.")
    lines.append("")

    # -- Summary -----------------------------------------------------------------------------
    lines += ["## Summary", ""]
    lines += [verdict(result), ""]
    lines += ["| outcome | count |", "|---|---|"]
    for key in ("pass", "fail", "unsupported", "skip"):
        lines.append(f"| {key.upper()} | {summary[key]} |")
    lines.append(f"| total | {summary['total']} |")
    lines += ["", "| layer | PASS | FAIL | UNSUPPORTED | SKIP |", "|---|---|---|---|---|"]
    for layer in result.layers:
        counts = [result.count(o, layer) for o in Outcome]
        lines.append(f"| {LAYER_TITLES[layer]} | " + " | ".join(map(str, counts)) + " |")
    for layer, reason in result.missing_layers.items():
        lines.append(f"\nLayer `{layer}` was not run: {reason}.")
    lines += ["", "| about the target | |", "|---|---|"]
    for key, value in info.items():
        lines.append(f"| {key} | {_cell(value)} |")
    lines.append(f"| suite duration | {result.duration_seconds:.1f} s |")
    lines.append("")

    # -- Capabilities ------------------------------------------------------------------------
    lines += ["## Capabilities", ""]
    capabilities = result.capabilities()
    if capabilities:
        lines += ["Optional features, as the plugin answered them. *present*: every check of the "
                  "feature passed; *absent*: the plugin answered UNIMPLEMENTED; *partial*: some "
                  "checks UNIMPLEMENTED, the others passed; *broken*: a check failed; "
                  "*unknown*: only skipped.", "",
                  "| capability | layer | present | PASS | FAIL | UNSUPPORTED | SKIP |",
                  "|---|---|---|---|---|---|---|"]
        for row in capabilities:
            lines.append(f"| {_cell(row['capability'])} | {row['layer']} | {row['status']} | "
                         f"{row['pass']} | {row['fail']} | {row['unsupported']} | "
                         f"{row['skip']} |")
    else:
        lines.append("No optional capability was probed by the checks that ran.")
    lines.append("")

    # -- Failures ----------------------------------------------------------------------------
    lines += ["## Failures", ""]
    if not result.failed:
        lines += ["None: no check failed.", ""]
    for r in result.failed:
        lines += [f"### `{r.id}`", "",
                  f"- **Layer**: {LAYER_TITLES[r.layer]}",
                  f"- **What it checks**: {r.description or r.id}",
                  f"- **Detail**: {_cell(r.detail, 1000)}",
                  "- **Expected**:", "", "```", _code(r.expected), "```", "",
                  "- **Actual**:", "", "```", _code(r.actual), "```", "",
                  "- **Rerun**: " + " or ".join(f"`{c}`" for c in rerun_commands(result, r.id)),
                  ""]

    # -- How to rerun ------------------------------------------------------------------------
    lines += ["## How to rerun one check", ""]
    example = (result.failed[0] if result.failed else (result.results[0] if result.results
                                                       else None))
    example_id = example.id if example else "hooks.topology.unique_ids"
    lines += ["Every check has a stable id (the tables below). Rerun one, after a fix, with "
              "either command (`--check` also takes several ids and `*` wildcards):", "",
              "```sh"]
    lines += rerun_commands(result, example_id)
    lines += ["```", "",
              "The JSON report (`--json PATH`) holds the same results for tools: a `summary` "
              "with counts and one entry per check with `id`, `layer`, `outcome`, `detail`, "
              "`expected` and `actual`.", ""]

    # -- All checks --------------------------------------------------------------------------
    lines += ["## All checks", ""]
    for layer in LAYERS:
        rows = [r for r in result.results if r.layer == layer]
        if not rows:
            continue
        lines += [f"### {LAYER_TITLES[layer]}", "", "| check | outcome | what it checks | detail |",
                  "|---|---|---|---|"]
        for r in rows:
            lines.append(f"| `{r.id}` | {r.outcome.value} | {_cell(r.description, 160)} | "
                         f"{_cell(r.detail, 200)} |")
        lines.append("")
    return "\n".join(lines)
