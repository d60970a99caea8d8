"""Conformance checks of a named backend run in child processes, one report per child.

JAX fixes its platforms at the first backend use, so a process that must not start JAX itself
(the layers run here would see it), or that wants several cores, runs checks in children: each
is ``pjrtkit conformance <backend> --json <report> --check <ids>`` in a fresh interpreter. By
default a child stays in this process's process group, so a signal to the group (Ctrl-C, a CI
runner cancelling the job) reaches it too; with ``own_session`` each child gets a session of its
own, and stopping it at a deadline stops the processes it started (parser, partitioner) too.

``ShardRun`` runs shards of check ids, at most ``workers`` children at a time (a new one
started as one ends), optionally all stopped at one deadline. Its output: a ``Shard`` per shard
as it ends, with the child's JSON report, or none (the child ended without one, was stopped
at the deadline, or never started) and the tail of its output. ``pjrtkit conformance --jobs``
(runner.py) and the GPU device check's sharded conformance run (pjrtkit_tools) use it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

from pjrtkit.conformance.checks import CheckResult
from pjrtkit.conformance.results import results_from_json

POLL_S = 0.1
OUTPUT_TAIL_CHARS = 20000


def child_command(backend_name: str, path: str, layers: Sequence[str] | None,
                  check_ids: Sequence[str] | None, quiet: bool = True) -> list[str]:
    """``pjrtkit conformance`` on a named backend in a fresh interpreter, its report at ``path``
    (``layers`` None: the backend's layers)."""
    command = [sys.executable, "-m", "pjrtkit.cli", "conformance", backend_name, "--json", path]
    if layers:
        command += ["--layer", ",".join(layers)]
    if quiet:
        command.append("--quiet")
    return command + ["--check", *check_ids] if check_ids else command


def read_report(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def results_and_durations(data: dict) -> tuple[dict[str, CheckResult], dict[str, float]]:
    """A child's JSON report as its CheckResults and each check's duration, by check id."""
    return ({r.id: r for r in results_from_json(data)},
            {c["id"]: c.get("duration_seconds", 0.0) for c in data["checks"]})


@dataclasses.dataclass
class Shard:
    """One shard's end: ``report`` is the child's JSON report, None when there is none
    (``started`` False: the deadline came first; ``exit_status`` None: stopped at it)."""
    index: int
    check_ids: list[str]
    report: dict | None
    started: bool
    exit_status: int | None
    output_tail: str


class ShardRun:
    """Children over ``shards`` (lists of check ids), ``workers`` at a time (default: all at
    once), stopped at ``deadline_s`` seconds after ``start()`` if given. Use as a context
    manager: leaving it kills children still running and removes their folder."""

    def __init__(self, backend_name: str, shards: Sequence[Sequence[str]], *,
                 layers: Sequence[str] | None = None, workers: int | None = None,
                 deadline_s: float | None = None, env: dict | None = None,
                 quiet: bool = True, own_session: bool = False):
        self.backend_name, self.layers, self.env, self.quiet = backend_name, layers, env, quiet
        self.own_session = own_session
        self.shards = [list(ids) for ids in shards]
        self.workers = len(self.shards) if workers is None else max(1, workers)
        self.deadline_s = deadline_s
        self._folder = tempfile.TemporaryDirectory(prefix="pjrtkit-conformance-shards-")
        self._waiting = list(range(len(self.shards)))
        self._running: list[tuple[int, subprocess.Popen, object]] = []
        self._start_time: float | None = None

    def __enter__(self) -> ShardRun:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Start the first ``workers`` children (the deadline counts from now)."""
        self._start_time = time.monotonic()
        self._fill()

    def _past_deadline(self) -> bool:
        return self.deadline_s is not None and \
            time.monotonic() - self._start_time >= self.deadline_s

    def _path(self, index: int, ext: str) -> str:
        return os.path.join(self._folder.name, f"shard{index}.{ext}")

    def _fill(self) -> None:
        while self._waiting and len(self._running) < self.workers and not self._past_deadline():
            index = self._waiting.pop(0)
            # output to a file: a pipe nobody reads could fill and stop the child
            log = open(self._path(index, "log"), "w+")
            command = child_command(self.backend_name, self._path(index, "json"), self.layers,
                                    self.shards[index], quiet=self.quiet)
            child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=self.own_session)
            self._running.append((index, child, log))

    def _ended(self, index: int, child: subprocess.Popen | None, log, stopped: bool) -> Shard:
        tail = ""
        if log is not None:
            log.seek(0)
            tail = log.read()[-OUTPUT_TAIL_CHARS:]
            log.close()
        path = self._path(index, "json")
        report = read_report(path) if child is not None and not stopped \
            and os.path.exists(path) else None
        return Shard(index, self.shards[index], report, started=child is not None,
                     exit_status=None if stopped or child is None else child.returncode,
                     output_tail=tail)

    def finished(self) -> Iterator[Shard]:
        """Each shard as its child ends (or as the deadline ends or cancels it)."""
        if self._start_time is None:
            self.start()
        while self._running or self._waiting:
            ended = [entry for entry in self._running if entry[1].poll() is not None]
            for entry in ended:
                self._running.remove(entry)
                yield self._ended(*entry, stopped=False)
            if self._past_deadline():
                running, waiting = self._running, self._waiting
                self._running, self._waiting = [], []
                for index, child, log in running:
                    _stop(child, self.own_session)
                    yield self._ended(index, child, log, stopped=True)
                for index in waiting:
                    yield self._ended(index, None, None, stopped=True)
                return
            self._fill()
            if not ended:
                time.sleep(POLL_S)

    def close(self) -> None:
        """Kill children still running (their caller stopped early); remove the folder."""
        for _, child, log in self._running:
            _stop(child, self.own_session)
            log.close()
        self._running, self._waiting = [], []
        self._folder.cleanup()


def _stop(child: subprocess.Popen, own_session: bool) -> None:
    """End a child; in its own session, with the processes it started."""
    if child.poll() is not None:
        return
    if own_session:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    child.kill()
    child.wait()
