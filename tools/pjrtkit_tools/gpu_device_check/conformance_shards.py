"""``pjrtkit conformance <backend>`` split into shards run as parallel processes, one report.

The checks are dealt round-robin to ``shards`` processes (``python -m pjrtkit.cli conformance
BACKEND --check ID ...``, each with its own JAX and driver), all started at once and stopped at
one deadline. Their JSON reports are merged into one ``SuiteResult`` (checks in suite order)
and written as JSON and markdown. A shard that does not finish in time leaves its checks out of
the report; they are listed as not run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def all_check_ids(layers=None) -> list[str]:
    """Every check id of the suite's layers, in suite order."""
    from pjrtkit.conformance.checks import LAYERS
    from pjrtkit.conformance.runner import import_layer, select_checks

    layers = tuple(layers or LAYERS)
    for layer in layers:
        import_layer(layer)
    return [c.id for c in select_checks(layers)]


def run_sharded(backend: str, shards: int, deadline_s: float, json_path: Path,
                markdown_path: Path, log, env=None, check_ids=None) -> dict:
    """Run the suite (or ``check_ids``) on ``backend`` in ``shards`` processes; write the merged
    reports; return ``{"summary", "not_run", "shards", "seconds"}``. ``log(text)`` receives
    each shard's output."""
    from pjrtkit.conformance import report
    from pjrtkit.conformance.checks import LAYERS
    from pjrtkit.conformance.results import SuiteResult, results_from_json

    ids = list(check_ids) if check_ids is not None else all_check_ids()
    shards = max(1, min(shards, len(ids)))
    parts = [ids[k::shards] for k in range(shards)]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pjrtkit-conformance-shards-") as tmp:
        running = []
        for k, part in enumerate(parts):
            path = os.path.join(tmp, f"shard{k}.json")
            out = open(os.path.join(tmp, f"shard{k}.out"), "w+")
            command = [sys.executable, "-m", "pjrtkit.cli", "conformance", backend, "--json",
                       path, "--check", *part]
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
            running.append((k, part, path, out, process))
        finished, not_run = [], []
        for k, part, path, out, process in running:
            left = deadline_s - (time.monotonic() - start)
            try:
                if left <= 0:
                    raise subprocess.TimeoutExpired(process.args, 0)
                process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                _stop(process)
            out.seek(0)
            log(f"--- conformance shard {k} ({len(part)} checks, exit {process.returncode}):\n"
                + out.read()[-20000:])
            out.close()
            if os.path.exists(path):
                with open(path) as f:
                    finished.append(json.load(f))
            else:
                not_run += part
        results, durations, info = [], {}, {}
        for data in finished:
            info = info or data.get("target", {})
            results += results_from_json(data)
            durations.update({c["id"]: c.get("duration_seconds", 0.0) for c in data["checks"]})
    order = {check_id: n for n, check_id in enumerate(ids)}
    results.sort(key=lambda r: order.get(r.id, len(order)))
    suite = SuiteResult(info=info, results=results, durations=durations,
                        duration_seconds=time.monotonic() - start,
                        layers=tuple(layer for layer in LAYERS
                                     if any(r.layer == layer for r in results)),
                        rerun_name=backend)
    report.write_json(suite, json_path)
    report.write_markdown(suite, markdown_path)
    return {"summary": suite.summary(), "not_run": not_run, "shards": shards,
            "seconds": round(suite.duration_seconds, 1),
            "failed": [r.id for r in suite.failed]}


def _stop(process) -> None:
    """End a shard that ran past the deadline, with the processes it started."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()
