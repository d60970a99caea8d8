"""Naming a lost process: each process publishes who it is (host, pid, start time); after an
engine failure, a peer on the same host whose pid no longer runs (or is a zombie, or a new
process with the same pid) is the one that was lost."""
from __future__ import annotations

import os
import socket


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # After the command: state is field 3, starttime field 22 (1-based, as proc(5) counts).
    if fields[0] == b"Z":
        return None  # a zombie has ended
    return fields[19].decode()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def identity() -> dict:
    pid = os.getpid()
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": pid,
            "start": _start_time(pid)}


def same_host(a: dict, b: dict) -> bool:
    return a.get("host") == b.get("host") and a.get("boot_id") == b.get("boot_id") != ""


def running(who: dict) -> bool:
    start = _start_time(int(who["pid"]))
    return start is not None and start == who.get("start")
