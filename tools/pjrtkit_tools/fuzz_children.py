"""Running fuzz cases in child processes, so that a case that aborts or hangs its process is
counted instead of ending the campaign; shared by the program fuzz harness (fuzz_programs.py)
and the C ABI fuzz harness (fuzz_abi.py).

The protocol: a child runs cases ``start..stop`` and prints one JSON line ``{"start": i}``
before case ``i`` and ``{"index": i, "outcome": "..."}`` after it. A child that dies (or stops
printing for ``CASE_TIMEOUT_S``) after a "start" line aborted on that case; the campaign goes on
with a new child from the next case. Outside a case (starting up, which imports JAX, and exiting)
a child may be silent for ``IDLE_TIMEOUT_S``: on a loaded machine a niced child takes minutes to
start. A child that answered its cases and then dies or hangs on its way out is an exit failure
(counted per batch, the campaign goes on); one that dies before its first case ends the campaign.
Outcomes are "ok", "error:CODE", "bug:<what>", or whatever else a harness reports (counted by
their first word).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import selectors
import subprocess
import time
from collections.abc import Callable

# A case that runs longer than this is a hang: its child is killed and the batch goes on.
CASE_TIMEOUT_S = 60.0
# Silence allowed outside a case: a child starting (importing JAX) or exiting.
IDLE_TIMEOUT_S = 600.0


def run_batch(command: list[str], env: dict) -> tuple[list[dict], int | None, str]:
    """Run one child; its JSON records, its exit status (None: killed as hung), the end of its
    stderr.

    Both pipes are read as they fill, unbuffered: a line Python's buffered reader had already
    taken in would not wake the selector (a case's "start" unseen, timed as idle), and a full
    stderr pipe would stop a chatty child until it was killed as hung."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             bufsize=0)
    records: list[dict] = []
    status, in_case = None, False
    pending = b""
    stderr = collections.deque(maxlen=64)  # the last chunks
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        selector.register(child.stderr, selectors.EVENT_READ)
        open_pipes = 2
        while open_pipes:
            ready = selector.select(timeout=CASE_TIMEOUT_S if in_case else IDLE_TIMEOUT_S)
            if not ready:
                child.kill()
                break
            for key, _ in ready:
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_pipes -= 1
                elif key.fileobj is child.stderr:
                    stderr.append(chunk)
                else:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        if line.startswith(b"{"):
                            records.append(json.loads(line))
                            in_case = "start" in records[-1]
    if not open_pipes:  # both pipes closed: the child is exiting
        try:
            status = child.wait(timeout=IDLE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
    child.wait()
    child.stdout.close()
    child.stderr.close()
    return records, status, b"".join(stderr).decode(errors="replace")


@dataclasses.dataclass
class Campaign:
    """What ``run_in_children`` saw: the outcome per case, the cases whose child aborted or
    hung, and the children that died or hung after their last case ("cases A..B: why")."""

    outcomes: dict[int, str]
    aborts: list[int]
    exit_failures: list[str]


def run_in_children(command_for: Callable[[int, int], list[str]], cases: int, env: dict,
                    batch: int) -> Campaign:
    """Cases ``0..cases`` in children of ``command_for(start, stop)``, ``batch`` per child."""
    campaign = Campaign({}, [], [])
    index = 0
    while index < cases:
        stop = min(cases, index + batch)
        records, status, stderr = run_batch(command_for(index, stop), env)
        started, answered = None, None
        for record in records:
            if "outcome" in record:
                campaign.outcomes[record["index"]] = record["outcome"]
                started, answered = None, record["index"]
            elif "start" in record:
                started = record["start"]
        if started is not None:
            campaign.aborts.append(started)
            campaign.outcomes[started] = "hang" if status is None else f"abort:{status}"
            index = started + 1
        elif status != 0 and answered is None:
            why = "hung" if status is None else f"exit status {status}"
            raise RuntimeError(f"fuzz child failed before its cases ({why}): {stderr[-2000:]}")
        elif status != 0:
            why = (f"no exit within {IDLE_TIMEOUT_S:g} s" if status is None
                   else f"exit status {status}")
            campaign.exit_failures.append(f"cases {index}..{answered}: {why}; "
                                          f"stderr {stderr[-300:]!r}")
            index = answered + 1
        else:
            index = stop
    return campaign


def summarize(campaign: Campaign, **facts) -> dict:
    """The campaign summary: ``facts``, cases, outcome counts, aborts, exit failures, bugs
    with 5 cases each."""
    outcomes = campaign.outcomes
    counts = collections.Counter(o.split(":")[0] if not o.startswith("error") else o
                                 for o in outcomes.values())
    bugs = collections.Counter(o for o in outcomes.values() if o.startswith("bug:"))
    return {**facts, "cases": len(outcomes), "outcomes": dict(counts), "aborts": campaign.aborts,
            "exit_failures": campaign.exit_failures,
            "bugs": {text: [i for i, o in outcomes.items() if o == text][:5] for text in bugs}}


def print_summary(target: str, summary: dict) -> None:
    print(f"{target:10} {summary['cases']:6} cases  {summary['seconds']:7.1f} s  "
          f"aborts/hangs {len(summary['aborts'])}  exit failures "
          f"{len(summary['exit_failures'])}  bugs {len(summary['bugs'])}  "
          f"{json.dumps(summary['outcomes'], sort_keys=True)}", flush=True)
    for text, indices in summary["bugs"].items():
        print(f"    {text}  (cases {indices})")
    if summary["aborts"]:
        print(f"    aborted or hung at cases {summary['aborts'][:20]}")
    for failure in summary["exit_failures"][:20]:
        print(f"    died or hung after its cases: {failure}")


def run_campaigns(targets: list[str], run_campaign: Callable[[str], dict],
                  json_path: str | None) -> int:
    """Each target's campaign in turn, its summary printed (and all of them written to
    ``json_path``); 1 when any target aborted, had an exit failure or found a bug, else 0."""
    summaries, failed = [], False
    for target in targets:
        began = time.monotonic()
        summary = run_campaign(target)
        summary["seconds"] = round(time.monotonic() - began, 1)
        summaries.append(summary)
        failed |= bool(summary["aborts"] or summary["bugs"] or summary["exit_failures"])
        print_summary(target, summary)
    if json_path:
        with open(json_path, "w") as out:
            json.dump(summaries, out, indent=2)
    return 1 if failed else 0
