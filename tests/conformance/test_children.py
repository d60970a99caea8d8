"""Conformance checks run in child processes (pjrtkit.conformance.children.ShardRun): each shard
a real ``pjrtkit conformance cpu`` child, at most ``workers`` at once, a child without a report
or stopped at the deadline reported as such, and ``--jobs`` failing the checks of a child that
wrote no report."""
from __future__ import annotations

import os

import pytest

from pjrtkit.conformance.checks import Outcome
from pjrtkit.conformance.children import ShardRun
from pjrtkit.conformance.runner import import_layer, select_checks

import_layer("hooks")
HOOK_CHECKS = [c.id for c in select_checks(("hooks",))]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("JAX_PLATFORMS", "PJRTKIT_BACKENDS", "PJRTKIT_CPU_DEVICES")}


def test_shards_run_workers_at_a_time_and_one_without_a_report_says_so():
    shards = [HOOK_CHECKS[:2], ["hooks.no_such_check"], HOOK_CHECKS[2:4]]
    with ShardRun("cpu", shards, workers=1, env=_env()) as run:
        ended = list(run.finished())
        assert len(run._running) == 0  # noqa: SLF001 - nothing left running
    # one worker: the shards end in the order they were dealt
    assert [s.index for s in ended] == [0, 1, 2]
    good, bad = ended[0], ended[1]
    assert good.started and good.exit_status == 0
    assert [c["id"] for c in good.report["checks"]] == HOOK_CHECKS[:2]
    assert ended[2].report is not None and ended[2].exit_status == 0
    # a selection naming nothing: the child exits with status 2 and writes no report
    assert bad.started and bad.report is None and bad.exit_status == 2
    assert "no_such_check" in bad.output_tail


@pytest.mark.parametrize("own_session", [False, True])
def test_the_deadline_stops_running_children_and_starts_no_more(own_session):
    with ShardRun("cpu", [HOOK_CHECKS[:1], HOOK_CHECKS[1:2]], workers=1, deadline_s=0.3,
                  env=_env(), own_session=own_session) as run:
        run.start()
        child = run._running[0][1]  # noqa: SLF001 - the child just started
        # by default in this process's group (a signal to the group reaches it); else its own
        assert (os.getpgid(child.pid) == child.pid) is own_session
        assert (os.getpgid(child.pid) == os.getpgrp()) is not own_session
        ended = list(run.finished())
    # a child takes longer than 0.3 s just to import JAX and start the backend
    first, second = ended
    assert first.started and first.exit_status is None and first.report is None
    assert not second.started and second.report is None


def test_jobs_fail_the_checks_of_a_child_that_wrote_no_report(monkeypatch):
    """--jobs: a child that ends without a report fails each of its checks, naming its exit
    status (here the child's interpreter refuses a bad option before running anything)."""
    from pjrtkit.conformance import children
    from pjrtkit.conformance.runner import Target, run_suite

    real = children.child_command
    monkeypatch.setattr(children, "child_command",
                        lambda *a, **k: [real(*a, **k)[0], "--no-such-option"])
    import_layer("jax")
    jax_ids = [c.id for c in select_checks(("jax",))][:2]
    result = run_suite(Target.backend_named("cpu"), check_ids=jax_ids, jobs=2)
    assert [r.id for r in result.results] == jax_ids
    for r in result.results:
        assert r.outcome is Outcome.FAIL
        assert "ended without a report (exit status 2)" in r.detail, r.detail
