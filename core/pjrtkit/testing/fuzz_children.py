"""Running fuzz cases in child processes, so that a case that aborts or hangs its process is
counted instead of ending the campaign; shared by the program fuzz harness (fuzz_programs.py)
and the C ABI fuzz harness (fuzz_abi.py).

The protocol: a child runs cases ``start..stop`` and prints one JSON line ``{"start": i}``
before case ``i`` and ``{"index": i, "outcome": "..."}`` after it. A child that dies (or stops
printing for ``CASE_TIMEOUT_S``) after a "start" line aborted on that case; the campaign goes on
with a new child from the next case. Outcomes are "ok", "error:CODE", "bug:<what>", or whatever
else a harness reports (counted by their first word).
"""
from __future__ import annotations

import collections
import json
import selectors
import subprocess
import time
from collections.abc import Callable

# A case that runs longer than this is a hang: its child is killed and the batch goes on.
CASE_TIMEOUT_S = 60.0


def run_batch(command: list[str], env: dict) -> tuple[list[dict], int | None, str]:
    """Run one child; its JSON records, its exit status (None: killed as hung), its stderr."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             text=True)
    records, status = [], None
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        while True:
            if not selector.select(timeout=CASE_TIMEOUT_S):
                child.kill()
                break
            line = child.stdout.readline()
            if not line:
                status = child.wait()
                break
            if line.startswith("{"):
                records.append(json.loads(line))
    _, stderr = child.communicate()
    return records, status, stderr


def run_in_children(command_for: Callable[[int, int], list[str]], cases: int, env: dict,
                    batch: int) -> tuple[dict[int, str], list[int]]:
    """Cases ``0..cases`` in children of ``command_for(start, stop)``, ``batch`` per child:
    (outcome per case, the cases whose child aborted or hung)."""
    outcomes: dict[int, str] = {}
    aborts: list[int] = []
    index = 0
    while index < cases:
        stop = min(cases, index + batch)
        records, status, stderr = run_batch(command_for(index, stop), env)
        started = None
        for record in records:
            if "outcome" in record:
                outcomes[record["index"]] = record["outcome"]
                started = None
            elif "start" in record:
                started = record["start"]
        if started is not None:
            aborts.append(started)
            outcomes[started] = "hang" if status is None else f"abort:{status}"
            index = started + 1
        elif status != 0:
            raise RuntimeError(f"fuzz child failed before its cases: {stderr[-2000:]}")
        else:
            index = stop
    return outcomes, aborts


def summarize(outcomes: dict[int, str], aborts: list[int], **facts) -> dict:
    """The campaign summary: ``facts``, cases, outcome counts, aborts, bugs with 5 cases each."""
    counts = collections.Counter(o.split(":")[0] if not o.startswith("error") else o
                                 for o in outcomes.values())
    bugs = collections.Counter(o for o in outcomes.values() if o.startswith("bug:"))
    return {**facts, "cases": len(outcomes), "outcomes": dict(counts), "aborts": aborts,
            "bugs": {text: [i for i, o in outcomes.items() if o == text][:5] for text in bugs}}


def print_summary(target: str, summary: dict) -> None:
    print(f"{target:10} {summary['cases']:6} cases  {summary['seconds']:7.1f} s  "
          f"aborts/hangs {len(summary['aborts'])}  bugs {len(summary['bugs'])}  "
          f"{json.dumps(summary['outcomes'], sort_keys=True)}", flush=True)
    for text, indices in summary["bugs"].items():
        print(f"    {text}  (cases {indices})")
    if summary["aborts"]:
        print(f"    aborted or hung at cases {summary['aborts'][:20]}")


def run_campaigns(targets: list[str], run_campaign: Callable[[str], dict],
                  json_path: str | None) -> int:
    """Each target's campaign in turn, its summary printed (and all of them written to
    ``json_path``); 1 when any target aborted or found a bug, else 0."""
    summaries, failed = [], False
    for target in targets:
        began = time.monotonic()
        summary = run_campaign(target)
        summary["seconds"] = round(time.monotonic() - began, 1)
        summaries.append(summary)
        failed |= bool(summary["aborts"] or summary["bugs"])
        print_summary(target, summary)
    if json_path:
        with open(json_path, "w") as out:
            json.dump(summaries, out, indent=2)
    return 1 if failed else 0
