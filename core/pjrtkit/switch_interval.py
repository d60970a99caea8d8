"""CPython's GIL switch interval, shortened while threads of ours must not queue behind one that
interprets Python.

CPython hands the GIL to a waiting thread only when its holder blocks or has run for the switch
interval (5 ms by default). A thread that gives the GIL up often (each NumPy or BLAS call, each
file or pipe read) waits up to that long every time it wants it back while another thread runs
Python. Two places paid it: the devices of a launch (``collectives.launch``: a device released
from a rendezvous waited for a device thread interpreting Python, most of a 4-device training
step), and the cpu plugin's compile thread loading a kernel a compile child made while the
program runs interpreted (a 40-line native loop's load took 8.8 s beside an interpreted
``fori_loop``, 1.4 s at 0.2 ms).

While any ``short_switch_interval()`` is entered, on any thread, the interval is at most
``SHORT_SWITCH_INTERVAL_S``; the value the process had comes back when the last one exits.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

SHORT_SWITCH_INTERVAL_S = 0.0002
_lock = threading.Lock()
_users = 0
_saved: float | None = None


@contextlib.contextmanager
def short_switch_interval() -> Iterator[None]:
    global _users, _saved
    with _lock:
        if _users == 0:
            _saved = sys.getswitchinterval()
            if _saved > SHORT_SWITCH_INTERVAL_S:
                sys.setswitchinterval(SHORT_SWITCH_INTERVAL_S)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _saved is not None:
                sys.setswitchinterval(_saved)
                _saved = None
