"""``pjrtkit conformance <backend>`` split into shards run as parallel processes, one report.

The checks are dealt round-robin to ``shards`` chunks, each run by a child process with its own
JAX and driver (the core's ``pjrtkit.conformance.children.ShardRun``), at most ``workers`` of
them at a time, all stopped at one deadline. Their JSON reports are merged into one
``SuiteResult`` (checks in suite order) and written as JSON and markdown. The checks of a chunk
that did not finish in time (stopped, or never started) are left out of the report and listed
as not run; with more chunks than workers, a deadline costs only the chunks in flight.
"""
from __future__ import annotations

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
                markdown_path: Path, log, env=None, check_ids=None,
                workers: int | None = None) -> dict:
    """Run the suite (or ``check_ids``) on ``backend`` in ``shards`` chunks, ``workers``
    processes at a time (default: all at once); write the merged reports; return
    ``{"summary", "not_run", "failed", "shards", "seconds"}``. ``log(text)`` receives each
    chunk's output."""
    from pjrtkit.conformance import report
    from pjrtkit.conformance.checks import LAYERS
    from pjrtkit.conformance.children import ShardRun, results_and_durations
    from pjrtkit.conformance.results import SuiteResult

    ids = list(check_ids) if check_ids is not None else all_check_ids()
    shards = max(1, min(shards, len(ids)))
    workers = shards if workers is None else max(1, workers)
    start = time.monotonic()
    finished, not_run = [], []
    with ShardRun(backend, [ids[k::shards] for k in range(shards)], workers=workers,
                  deadline_s=deadline_s, env=env, quiet=False, own_session=True) as run:
        for shard in run.finished():
            if shard.started:
                log(f"--- conformance shard {shard.index} ({len(shard.check_ids)} checks, "
                    f"exit {shard.exit_status}):\n" + shard.output_tail)
            if shard.report is not None:
                finished.append(shard.report)
            else:
                not_run += shard.check_ids
    results, durations, info = [], {}, {}
    for data in finished:
        info = info or data.get("target", {})
        shard_results, shard_durations = results_and_durations(data)
        results += shard_results.values()
        durations.update(shard_durations)
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
            "workers": workers, "seconds": round(suite.duration_seconds, 1),
            "failed": [r.id for r in suite.failed]}
