"""``summary.md``: the device check's results so far, stage by stage, for a person to read."""
from __future__ import annotations

import time


def _seconds(value) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} us"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.3f} s"


def markdown(run) -> str:
    r = run.results
    mode = "emulated (Triton's interpreter; reference XLA cpu)" if run.emulate else \
        "GPU (PJRTKIT_GPU_EMULATE=0; reference XLA cuda)"
    lines = ["# pjrtkit_cuda device check", "",
             f"Mode: {mode}. Elapsed {time.monotonic() - run.started:.0f} s of a "
             f"{run.budget_s:.0f} s budget. Written by `python -m "
             f"pjrtkit_tools.gpu_device_check` (`make gpu-device-check`).", "",
             "| stage | status | seconds | note |", "|---|---|---|---|"]
    for name, result in r.items():
        lines.append(f"| {name} | {result.get('status')} | {result.get('seconds', '-')} | "
                     f"{(result.get('why') or '')[:200]} |")
    device = r.get("device", {}).get("facts")
    if device:
        lines += ["", "## Device", "", f"- nvidia-smi: `{device.get('nvidia_smi')}`",
                  f"- target {device.get('target')}; python {device.get('python')}; jax "
                  f"{device.get('jax')}; triton {device.get('triton')}; cuda-bindings "
                  f"{device.get('cuda-bindings')}",
                  f"- pjrtkit list: {'; '.join(device.get('pjrtkit_list') or [])[:600]}",
                  f"- carried Triton cache made by this Triton build: "
                  f"{device.get('carried_cache_matches_triton_build')}",
                  f"- precompile here: {device.get('precompile')}"]
    c = r.get("conformance")
    if c:
        counts = ", ".join(f"{k.upper()} {v}" for k, v in (c.get("summary") or {}).items())
        lines += ["", "## Conformance (`pjrtkit conformance cuda`)", "",
                  f"{counts} in {c.get('seconds')} s: {c.get('shards')} chunks, "
                  f"{c.get('workers')} at a time."]
        if c.get("failed"):
            lines.append(f"FAIL: {', '.join(c['failed'][:50])}")
        if c.get("not_run"):
            lines.append(f"Not run (a shard did not finish): {len(c['not_run'])} checks")
        if c.get("passed_emulated_not_on_gpu"):
            lines.append("PASS emulated but not on the GPU: " + ", ".join(
                f"{k} ({v})" for k, v in list(c["passed_emulated_not_on_gpu"].items())[:50]))
        if c.get("not_run_on_gpu"):
            lines.append(f"In the baseline, not run on the GPU: {len(c['not_run_on_gpu'])}")
    t = r.get("training")
    if t and t.get("examples"):
        lines += ["", f"## Training steps (against XLA {t.get('reference')})", "",
                  "| example | exit | max rel diff | verdict |", "|---|---|---|---|"]
        for name, row in t["examples"].items():
            lines.append(f"| {name} | {row['exit']} | {row['max_rel_diff']} | "
                         f"{' '.join(row['verdict'])[:300]} |")
    b = r.get("bench")
    if b and b.get("workloads"):
        lines += ["", f"## Benchmarks (`--suite gpu`, {b.get('mode')}; pjrtkit_cuda / XLA "
                  f"{b.get('reference')})", "",
                  "| workload | pjrtkit | xla | ratio | bar | met | status |",
                  "|---|---|---|---|---|---|---|"]
        for w in b["workloads"]:
            ratio, bar, status = _times(w["ratio"]), _times(w["target"]), _status(w)
            met = {True: "yes", False: "NO", None: "-"}[w["met"]]
            lines.append(f"| {w['name']} | {_seconds(w['pjrtkit_s'])} | {_seconds(w['xla_s'])} "
                         f"| {ratio} | {bar} | {met} | {status} |")
        geomean = b.get("geomean_ratio")
        lines.append(f"\ngeomean {'-' if geomean is None else f'{geomean:.2f}x'}")
        lines += _profile(b.get("profile"))
    p = r.get("pallas")
    if p and p.get("kernels"):
        lines += ["", "## Pallas Triton kernels on pjrtkit_cuda", ""]
        for name, row in p["kernels"].items():
            if isinstance(row, dict):
                lines.append(f"- {name}: reference {row.get('reference')}; compiled "
                             f"{_pallas(row.get('compiled'))}; interpret "
                             f"{_pallas(row.get('interpret'))}")
    lines += _vendor(r.get("vendor"))
    return "\n".join(lines) + "\n"


def _times(ratio) -> str:
    """A ratio (or bar) for a table: ``1.36x``, ``-`` when there is none."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def _status(workload) -> str:
    """A benchmark workload's outcome: ok, ERROR (it raised) or MISMATCH (wrong numbers)."""
    return "ok" if workload["correct"] else ("ERROR" if workload["error"] else "MISMATCH")


def _cell(text, limit: int = 300) -> str:
    """``text`` on one line, for a markdown table's cell."""
    return " ".join(str(text or "").split())[:limit].replace("|", "\\|")


def _vendor(v) -> list[str]:
    """The vendor stage: cuBLAS through nvmath-python under ``require``."""
    if not v or v.get("status") == "not run":
        return []
    lines = ["", "## Vendor libraries (cuBLAS through nvmath-python, "
             "`PJRTKIT_GPU_VENDOR_LIBRARIES=require`)", ""]
    probe = v.get("probe") or {}
    nvmath = probe.get("nvmath") or {}
    errors = [nvmath[k] for k in ("import_error", "cublas_import_error") if nvmath.get(k)]
    lines.append(f"Probe (`vendor_check`): nvmath-python {nvmath.get('version', '-')}"
                 + "".join(f" ({e[:600]})" for e in errors)
                 + f"; cuBLAS {probe.get('cublas_version', '-')}; libcublas "
                 f"{', '.join(probe.get('libcublas') or []) or '-'}; "
                 f"{probe.get('library_gemms', 0)} gemms through cuBLAS")
    if probe.get("error"):
        lines.append(f"\nThe probe raised: {_cell(probe['error'], 1500)}")
    else:
        lines += ["", "| dot | ran | max rel diff from NumPy | gemms through cuBLAS | error |",
                  "|---|---|---|---|---|"]
        for name, row in (probe.get("cases") or {}).items():
            lines.append(f"| {name} | {'no' if row.get('error') else 'yes'} | "
                         f"{row.get('max_rel_diff', '-')} | {row.get('library_gemms')} | "
                         f"{_cell(row.get('error'))} |")
    if v.get("problems"):
        lines += [""] + [f"- problem: {_cell(p, 400)}" for p in v["problems"][:20]]
    c = v.get("conformance") or {}
    if c.get("summary"):
        counts = ", ".join(f"{k.upper()} {n}" for k, n in c["summary"].items())
        lines += ["", f"Conformance, the {c.get('selected')} checks holding dots: {counts} in "
                  f"{c.get('seconds')} s (the Triton path's outcomes: "
                  f"{c.get('triton_outcomes_from')}).", ""]
        causes = "; ".join(c.get("refusal_causes") or [])[:400]
        if "library_checks" in c:
            lines.append(f"- refused by `require` (their float dots are cuBLAS's): "
                         f"{len(c['library_checks'])}; the cause named: {causes}")
        if "library_checks_expected" in c:
            lines.append(f"- of the {c['library_checks_expected']} checks whose dots the "
                         f"baseline found cuBLAS takes, {c['library_checks_passed']} PASS "
                         f"through cuBLAS")
        if c.get("refused"):
            lines.append(f"- refused by `require` on the GPU: {len(c['refused'])}; the cause "
                         f"named: {causes}")
        for cid, d in list((c.get("differs") or {}).items())[:30]:
            lines.append(f"- {cid}: Triton path {d['triton']}, cuBLAS path {d['library']}: "
                         f"{_cell(d['actual'])}")
        if c.get("not_run"):
            lines.append(f"- not run (the time limit): {len(c['not_run'])} checks")
    b = v.get("bench") or {}
    if b.get("workloads"):
        lines += ["", f"Matmul benchmarks through cuBLAS (pjrtkit_cuda / XLA "
                  f"{b.get('reference')}; the Triton path's ratio from the bench stage):", "",
                  "| workload | pjrtkit (cuBLAS) | xla | ratio | Triton path | status |",
                  "|---|---|---|---|---|---|"]
        for w in b["workloads"]:
            ratio, triton, status = _times(w["ratio"]), _times(w.get("triton_ratio")), _status(w)
            lines.append(f"| {w['name']} | {_seconds(w['pjrtkit_s'])} | {_seconds(w['xla_s'])} "
                         f"| {ratio} | {triton} | {status} |")
    elif b.get("status"):
        lines.append(f"\nMatmul benchmarks: {b['status']} ({b.get('why')})")
    return lines


def _profile(profile) -> list[str]:
    """The bench stage's launch profile of its slowest workloads (``profile_workloads``)."""
    if not profile:
        return []
    if profile.get("error"):
        return ["", f"Launch profile: {profile['error']}"]
    lines = ["", f"### Where the time goes ({profile.get('size')} sizes; each launch waits for "
             f"the device, so the seconds are an upper bound)", "",
             "| workload | launches per call | seconds per call | kernels (launches, share) |",
             "|---|---|---|---|"]
    for name, row in profile.get("workloads", {}).items():
        if row.get("error"):
            lines.append(f"| {name} | - | - | {row['error'][:200]} |")
            continue
        kernels = ", ".join(f"{k['name']} x{k['launches_per_call']:.0f} {k['share']:.0%}"
                            for k in row["kernels"][:4])
        lines.append(f"| {name} | {row['launches_per_call']:.0f} | "
                     f"{_seconds(row['seconds_per_call'])} | {kernels} |")
    return lines


def _pallas(row) -> str:
    if not row:
        return "-"
    if row.get("ran"):
        return f"ran, max abs diff {row.get('max_abs_diff')}, match {row.get('match')}"
    return f"did not run: {row.get('error', '')[:300]}"
