"""Where the time goes: per-op and per-C-function profiles, turned on with ``PJRTKIT_PROFILE``.

``PJRTKIT_PROFILE=1`` prints two sorted tables to stderr when the process exits;
``PJRTKIT_PROFILE=path.txt`` writes them to that file instead. Unset or ``0``: off, and nothing
here is on any hot path (the choice is made once, when plans are built and when the C callbacks
are registered).

- **ops**: every step a plan runs (``Plan`` picks :func:`run_plan` as its loop at build time),
  keyed by op name (``stablehlo.dot_general``...): calls, total (inclusive) time, self time
  (minus the nested ops of regions, e.g. the body of a ``stablehlo.while``) and mean.
  A second table splits the heaviest ops by signature (operand and result types).
- **C calls**: every PJRT C function served by pjrtkit (``abi.errors.pjrt_function`` wraps
  each callback with :func:`wrap_c_function`): calls, total time, mean. Profiling turns off
  the answers pjrtkit normally gives in C (handle facts, the completed event, queued buffer
  destroys, the C check of Execute's call shape; see ``abi/pjrtkit_handles.h``) so that every
  call shows here: those calls then cost a Python round trip they do not cost unprofiled.

Inclusive times of nested things add up more than once (a ``while`` contains its body's ops;
``PJRT_LoadedExecutable_Execute`` contains the ops of programs run inline), so compare self
times across ops, and C functions among themselves.

Programmatic use: :func:`report` returns the text, :func:`reset` clears the counters,
:func:`op_stats` / :func:`c_stats` give the raw numbers.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from time import perf_counter
from typing import Any, Callable

ENV = "PJRTKIT_PROFILE"
_STDERR_VALUES = frozenset({"1", "true", "yes", "on", "stderr"})


def _destination(value: str) -> str | None:
    """None when off, "" for stderr, else the path to write to."""
    value = value.strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return None
    if value.lower() in _STDERR_VALUES:
        return ""
    return value


_DEST = _destination(os.environ.get(ENV, ""))
ENABLED: bool = _DEST is not None

_lock = threading.Lock()
# name -> [calls, total seconds, self seconds]
_OPS: dict[str, list] = {}
# (name, signature) -> [calls, total seconds, self seconds]
_OP_SIGNATURES: dict[tuple[str, str], list] = {}
# C function name -> [calls, total seconds]
_C_CALLS: dict[str, list] = {}
_local = threading.local()


def _signature(op: Any) -> str:
    try:
        ins = ", ".join(str(v.type) for v in op.operands)
        outs = ", ".join(str(v.type) for v in op.results)
        return f"({ins}) -> ({outs})"
    except Exception:  # noqa: BLE001 - a profile must never break a program
        return "?"


def _children() -> list:
    """Per-thread stack of 'time spent in nested ops' accumulators."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def record_op(op: Any, total: float, self_time: float) -> None:
    name = getattr(op, "name", str(op))
    sig_cache = getattr(_local, "sigs", None)
    if sig_cache is None:
        sig_cache = _local.sigs = {}
    sig = sig_cache.get(id(op))
    if sig is None or sig[0] is not op:
        sig = sig_cache[id(op)] = (op, _signature(op))
    with _lock:
        entry = _OPS.get(name)
        if entry is None:
            entry = _OPS[name] = [0, 0.0, 0.0]
        entry[0] += 1
        entry[1] += total
        entry[2] += self_time
        key = (name, sig[1])
        entry = _OP_SIGNATURES.get(key)
        if entry is None:
            entry = _OP_SIGNATURES[key] = [0, 0.0, 0.0]
        entry[0] += 1
        entry[1] += total
        entry[2] += self_time


def run_plan(plan: Any, args: tuple) -> tuple:
    """The profiled twin of ``Plan.__call__``: the same loop, each step timed."""
    env = plan.template.copy()
    for slot, value in zip(plan.arg_slots, args):
        env[slot] = value
    stack = _children()
    for kernel, ins, outs, op in plan.steps:
        stack.append(0.0)
        start = perf_counter()
        try:
            results = kernel(*[env[i] for i in ins])
        finally:
            total = perf_counter() - start
            nested = stack.pop()
            if stack:
                stack[-1] += total
            record_op(op, total, total - nested)
        for slot, value in zip(outs, results):
            env[slot] = value
    return tuple(env[i] for i in plan.result_slots)


def wrap_c_function(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` timed and counted under ``name`` when profiling is on; else ``callback``."""
    if not ENABLED:
        return callback

    def profiled(*c_args):
        start = perf_counter()
        try:
            return callback(*c_args)
        finally:
            elapsed = perf_counter() - start
            with _lock:
                entry = _C_CALLS.get(name)
                if entry is None:
                    entry = _C_CALLS[name] = [0, 0.0]
                entry[0] += 1
                entry[1] += elapsed

    return profiled


def op_stats() -> dict[str, tuple[int, float, float]]:
    """{op name: (calls, total s, self s)}."""
    with _lock:
        return {k: tuple(v) for k, v in _OPS.items()}


def c_stats() -> dict[str, tuple[int, float]]:
    """{C function name: (calls, total s)}."""
    with _lock:
        return {k: tuple(v) for k, v in _C_CALLS.items()}


def reset() -> None:
    with _lock:
        _OPS.clear()
        _OP_SIGNATURES.clear()
        _C_CALLS.clear()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:10.1f}"


def report(top_signatures: int = 25) -> str:
    """The profile as text: ops by self time, heaviest op signatures, C functions by total time."""
    with _lock:
        ops = sorted(_OPS.items(), key=lambda kv: -kv[1][2])
        sigs = sorted(_OP_SIGNATURES.items(), key=lambda kv: -kv[1][2])[:top_signatures]
        calls = sorted(_C_CALLS.items(), key=lambda kv: -kv[1][1])
    lines = [f"pjrtkit profile (pid {os.getpid()}; {ENV})", ""]
    op_self = sum(v[2] for _, v in ops) or 1.0
    lines.append("ops by self time (self excludes nested region ops; total includes them)")
    lines.append(f"{'op':<40} {'calls':>9} {'self ms':>10} {'self %':>6} {'total ms':>10} "
                 f"{'mean us':>10}")
    for name, (n, total, self_time) in ops:
        lines.append(f"{name:<40} {n:>9} {_ms(self_time)} {100 * self_time / op_self:6.1f} "
                     f"{_ms(total)} {_us(total / n)}")
    if not ops:
        lines.append("(no ops ran)")
    lines += ["", f"heaviest op signatures by self time (top {top_signatures})",
              f"{'op':<40} {'calls':>9} {'self ms':>10} {'mean us':>10}  signature"]
    for (name, sig), (n, total, self_time) in sigs:
        lines.append(f"{name:<40} {n:>9} {_ms(self_time)} {_us(total / n)}  {sig}")
    lines += ["", "PJRT C functions by total time (calls made by jaxlib into pjrtkit)",
              f"{'function':<52} {'calls':>9} {'total ms':>10} {'mean us':>10}"]
    for name, (n, total) in calls:
        lines.append(f"{name:<52} {n:>9} {_ms(total)} {_us(total / n)}")
    if not calls:
        lines.append("(no C calls)")
    return "\n".join(lines) + "\n"


def _write_at_exit() -> None:
    if _DEST is None:
        return
    try:
        text = report()
        if _DEST == "":
            sys.stderr.write(text)
            sys.stderr.flush()
        else:
            with open(_DEST, "w", encoding="utf-8") as f:
                f.write(text)
    except Exception as exc:  # noqa: BLE001 - never turn a clean exit into a failure
        print(f"pjrtkit: could not write the profile: {exc}", file=sys.stderr)


if ENABLED:
    atexit.register(_write_at_exit)
