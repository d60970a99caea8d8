"""One launch over several devices on one thread: every device's plan step by step, in
lockstep.

The devices of a launch run the same per-device program (SPMD), so when every collective of
the plan is one of its own steps (none inside a loop body, a branch or a called function),
the launch needs no thread per device: step k runs for device 0, 1, ..., n-1, then step k+1.
A collective step runs each member's kernel twice: first every device deposits its operands
(``LockstepDevice.exchange`` records them and stops the kernel), then every device runs its
kernel again and finds every member's operands there, and a result common to the group
(``combine``) is computed once. Nothing waits, no thread is started, and no Python thread
competes for the GIL with another device's: on a small machine, the 4-device MLP step spent
most of its time in those waits (ARCHITECTURE.md, "Many devices").

A kernel must do nothing before its ``exchange``/``combine`` that it cannot do twice; the
core's collective rules (``pjrtkit.reference.collectives``) only find their group. Plans that
do not fit (``LockstepProgram.of`` answers None) run on threads (``launch.launch_on_threads``).

This is the seam to processes (``pjrtkit.distributed``): a collective step sees, at once,
every local member's operands (``exchange``) and computes a group's common result once
(``combine``); a group that spans processes would hand the local members' part to the engine
there, once per process instead of once per device.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import os
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

from pjrtkit import profiling
from pjrtkit.collectives.launch import DeviceContext, Launch, set_current_device
from pjrtkit.errors import Internal
from pjrtkit.kernel_threads import kernel_thread_start
from pjrtkit.semantics.ops import EFFECTFUL
from pjrtkit.stablehlo.inline import inline_calls
from pjrtkit.stablehlo.ir import Program, Region

# Ops whose kernels meet the other devices of the launch (through DeviceContext).
COLLECTIVES = frozenset({
    "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter",
    "stablehlo.all_to_all", "stablehlo.collective_permute", "stablehlo.collective_broadcast",
})
# Ops whose kernels read which device runs them (current_device) without meeting anyone.
_DEVICE_AWARE = frozenset({"stablehlo.partition_id", "stablehlo.replica_id"})
# Ops that may call other functions of the program.
_CALLS = frozenset({"func.call"})


class _Deposited(Exception):
    """Stops a collective's kernel once it handed over its operands (the first pass)."""


class LockstepDevice(DeviceContext):
    """A device of a lockstep launch: ``exchange``/``combine`` record the operands in the
    first pass and answer from every member's in the second."""

    __slots__ = ()

    def exchange(self, group: tuple[int, ...], payload: Any) -> list[Any]:
        key = (self.next_ordinal(), group)
        meetings = self.launch.lockstep_meetings
        if self.launch.lockstep_depositing:
            meetings.setdefault(key, [{}, _NONE])[0][self.position] = payload
            raise _Deposited
        values = meetings[key][0]
        try:
            return [values[p] for p in group]
        except KeyError:
            raise Internal(f"{self.launch.name}: a member of group {list(group)} did not reach "
                           f"collective #{key[0]}; the devices disagree about the program's "
                           f"collectives") from None

    def combine(self, group: tuple[int, ...], payload: Any,
                combine: Callable[[list[Any]], Any]) -> Any:
        ordinal = self.collectives_run
        values = self.exchange(group, payload)
        meeting = self.launch.lockstep_meetings[(ordinal, group)]
        if meeting[1] is _NONE:
            meeting[1] = combine(values)
        return meeting[1]


_NONE = object()


class LockstepProgram:
    """A plan prepared for lockstep launches: its steps, each with the slots that die after
    it and whether it is a collective. Made once per executable (``of``)."""

    __slots__ = ("plan", "segments", "sizes", "results")

    def __init__(self, plan: Any, steps: list, results: tuple[int, ...]):
        self.plan = plan
        # ("steps", [step, ...]) between collectives, ("collectives", [step, ...]) for each
        # run of consecutive collectives none of which reads another's result
        self.segments: list[tuple[str, list]] = []
        made: set[int] = set()  # the slots the last segment of collectives writes
        for step in steps:
            kind = "collectives" if step[4] else "steps"
            last = self.segments[-1] if self.segments else None
            if last is not None and last[0] == kind \
                    and not (step[4] and made.intersection(step[1])):
                last[1].append(step)
            else:
                self.segments.append((kind, [step]))
                made = set()
            if step[4]:
                made.update(step[2])
        # per segment: each collective's operand elements (how a run spreads over threads)
        self.sizes = [_sizes(run) if kind == "collectives" else () for kind, run in self.segments]
        self.results = results

    @classmethod
    def of(cls, plan: Any, program: Any) -> "LockstepProgram | None":
        """The lockstep form of ``plan`` (a ``pjrtkit.lowering.plan.Plan`` of ``program``'s
        entry function), or None when a collective or a device id is read inside a nested
        region or a called function of a step, where lockstep cannot stop and resume it."""
        if any(_meets_inside(op, program, set()) for _k, _i, _o, op in plan.steps):
            return None
        ordered = [plan.steps[i] for i in collectives_late(plan.steps)]
        last_read: dict[int, int] = {}
        for index, (_kernel, ins, _outs, _op) in enumerate(ordered):
            for slot in ins:
                last_read[slot] = index
        keep = set(plan.result_slots)
        steps = []
        for index, (kernel, ins, outs, op) in enumerate(ordered):
            dead = tuple(s for s in dict.fromkeys((*ins, *outs))
                         if s not in keep and last_read.get(s, -1) <= index)
            steps.append((kernel, ins, outs, dead, op.name in COLLECTIVES, op))
        return cls(plan, steps, tuple(plan.result_slots))

    def run(self, arguments: list[list[Any]], launch: Launch,
            around: Callable[[], Any] | None = None) -> list[tuple]:
        """Every device's results (``arguments[position]`` its arguments). The steps between
        two collectives run for every device, the devices spread over the threads of a pool
        kept between launches (one per device, at most one per usable core and
        ``MAX_WORKERS``; kernels that release the GIL, BLAS and compiled loops, run side by
        side);
        a collective step runs on this thread. ``around()``: a context manager each worker
        thread enters while it runs kernels (the plugin's per-thread settings, e.g. NumPy's
        errstate). A kernel that raises ends the launch with its exception."""
        plan = self.plan
        devices = [LockstepDevice(launch, position) for position in range(len(arguments))]
        envs = []
        for args in arguments:
            env = dict(plan.constants)
            env.update(zip(plan.arg_slots, args))
            envs.append(env)
        workers = min(MAX_WORKERS, len(devices), usable_cores())
        try:
            for (kind, steps), sizes in zip(self.segments, self.sizes):
                if kind == "collectives":
                    _run_collectives(steps, sizes, devices, envs, launch, around, workers)
                else:
                    _run_parallel(steps, devices, envs, around, workers)
        finally:
            set_current_device(None)
            launch.lockstep_meetings = {}
        return [tuple(env[s] for s in self.results) for env in envs]


def collectives_late(steps: list) -> list[int]:
    """The positions of a plan's ``steps`` ((kernel, operand slots, result slots, op), slots
    written once) in the order a lockstep launch runs them: by phase, the most collectives on
    any chain of steps that leads to a step; in each phase first the steps that are no
    collective, then its collectives, each in program order. Every step still follows what
    it reads, and ops whose order is observable (``semantics.ops.EFFECTFUL``: callbacks,
    loops, calls) keep their order among themselves.

    Every collective is a barrier of the launch (every device reaches it before any goes on),
    and JAX places each gradient's all-reduce right after the gradient: the 4-device MLP
    step had 7 collectives between slivers of 2 to 4 steps. Late, they meet in one phase: one
    barrier between the backward pass and the update instead of seven."""
    producer: dict[int, int] = {}
    phase: list[int] = []
    meets: list[bool] = []
    last_effect = None
    for index, (_kernel, ins, outs, op) in enumerate(steps):
        before = [producer[slot] for slot in ins if slot in producer]
        if op.name in EFFECTFUL:
            if last_effect is not None:
                before.append(last_effect)
            last_effect = index
        phase.append(max((phase[b] + meets[b] for b in before), default=0))
        meets.append(op.name in COLLECTIVES)
        for slot in outs:
            producer[slot] = index
    return sorted(range(len(steps)), key=lambda i: (phase[i], meets[i], i))


# Most threads a lockstep launch spreads its devices over (the calling one included): one per
# device, at most one per core this process may run on (``usable_cores``), kept between
# launches. More threads than cores only take turns: on 2 cores the 4-device MLP step
# (benchmarks, mlp_train_step_dp4) measured 2.0-2.7x XLA's with 4 threads and 1.4-2.4x with 2
# (eight runs each, one sitting; mean 2.32 against 1.93).
MAX_WORKERS = 64


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _workers(count: int) -> concurrent.futures.ThreadPoolExecutor:
    """A pool of at least ``count`` threads (grown, never shrunk; idle threads sleep)."""
    global _pool, _pool_size
    if _pool_size < count:
        with _pool_lock:
            if _pool_size < count:
                old, _pool = _pool, concurrent.futures.ThreadPoolExecutor(
                    count, thread_name_prefix="pjrtkit-lockstep", initializer=kernel_thread_start)
                _pool_size = count
                if old is not None:
                    old.shutdown(wait=False)
    return _pool


def _run_steps(steps: list, device: "LockstepDevice", env: dict) -> None:
    set_current_device(device)
    profiled = profiling.ENABLED
    for kernel, ins, outs, dead, _collective, op in steps:
        if profiled:
            start = perf_counter()
            results = kernel(*[env[s] for s in ins])
            elapsed = perf_counter() - start
            profiling.record_op(op, elapsed, elapsed)
        else:
            results = kernel(*[env[s] for s in ins])
        for slot, value in zip(outs, results):
            env[slot] = value
        for slot in dead:
            del env[slot]


def _run_share(steps: list, devices: list, envs: list, share: range,
               around: Callable[[], Any] | None) -> None:
    if around is None:
        for d in share:
            _run_steps(steps, devices[d], envs[d])
        return
    with around():
        for d in share:
            _run_steps(steps, devices[d], envs[d])
    set_current_device(None)


def _run_parallel(steps: list, devices: list, envs: list,
                  around: Callable[[], Any] | None, workers: int) -> None:
    """``steps`` (no collective among them) for every device, spread over ``workers``
    threads (this one included)."""
    count = len(devices)
    if workers <= 1:
        _run_share(steps, devices, envs, range(count), around)
        return
    shares = [range(w, count, workers) for w in range(workers)]
    pool = _workers(workers - 1)
    futures = [pool.submit(_run_share, steps, devices, envs, share, around)
               for share in shares[1:]]
    _finish(futures, lambda: _run_share(steps, devices, envs, shares[0], around))


def _finish(futures: list, here: Callable[[], None]) -> None:
    """Runs ``here()`` on this thread, then waits for ``futures``; raises the first error of
    any of them once all are done."""
    error = None
    try:
        here()
    except BaseException as exc:  # noqa: BLE001 - the others finish first, then it is raised
        error = exc
    for future in futures:
        try:
            future.result()
        except BaseException as exc:  # noqa: BLE001
            error = error or exc
    if error is not None:
        raise error


def _run_collectives(steps: list, sizes: tuple[int, ...], devices: list, envs: list,
                     launch: Launch, around: Callable[[], Any] | None, workers: int) -> None:
    """Consecutive collective steps: every device deposits its operands for each of them, in
    order; then every device's kernel of each finds every member's operands there
    (``LockstepDevice``) and one of them combines. The collectives spread over ``workers``
    threads (this one included), as ``_balanced`` shares ``sizes`` out: each runs all its
    devices on one thread, so it combines once; they share nothing but the meetings, one
    entry each."""
    launch.lockstep_meetings = {}
    launch.lockstep_depositing = True
    tasks = []  # per collective: (step, [(a device of it, ready to run again, env), ...])
    try:
        for step in steps:
            kernel, ins = step[0], step[1]
            runs = []
            for device, env in zip(devices, envs):
                again = LockstepDevice(launch, device.position)
                again.collectives_run = device.collectives_run
                runs.append((again, env))
                set_current_device(device)
                try:
                    kernel(*[env[s] for s in ins])
                except _Deposited:
                    continue
                raise Internal(f"{launch.name}: the kernel of {step[5].describe()} returned "
                               f"without meeting the other devices")
            tasks.append((step, runs))
    finally:
        launch.lockstep_depositing = False
    try:
        shares = [[tasks[i] for i in share]
                  for share in _balanced(sizes, min(workers, len(tasks)))]
        if len(shares) == 1:
            _combine_share(shares[0], around)
        else:
            pool = _workers(len(shares) - 1)
            futures = [pool.submit(_combine_share, share, around) for share in shares[1:]]
            _finish(futures, lambda: _combine_share(shares[0], around))
        for step in steps:
            for env in envs:
                for slot in step[3]:
                    del env[slot]
    finally:
        launch.lockstep_meetings = {}


def _sizes(steps: list) -> tuple[int, ...]:
    """Operand elements of each collective step (what ``_balanced`` weighs)."""
    return tuple(sum(math.prod(v.type.shape) for v in step[5].operands) for step in steps)


@functools.lru_cache(maxsize=256)
def _balanced(sizes: tuple[int, ...], count: int) -> tuple[tuple[int, ...], ...]:
    """The positions of collectives of operand ``sizes`` in ``count`` shares of about equal
    elements, the largest first to the least loaded, each share in program order (computed
    once per run of collectives and thread count, not per launch)."""
    loads = [0] * max(1, count)
    chosen: list[list[int]] = [[] for _ in loads]
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        lightest = loads.index(min(loads))
        chosen[lightest].append(index)
        loads[lightest] += sizes[index]
    return tuple(tuple(sorted(share)) for share in chosen if share)


def _combine_share(share: list, around: Callable[[], Any] | None) -> None:
    if around is None:
        _combine_tasks(share)
        return
    with around():
        _combine_tasks(share)


def _combine_tasks(share: list) -> None:
    profiled = profiling.ENABLED
    try:
        for (kernel, ins, outs, _dead, _collective, op), runs in share:
            for device, env in runs:
                set_current_device(device)
                start = perf_counter() if profiled else 0.0
                results = kernel(*[env[s] for s in ins])
                if profiled:
                    elapsed = perf_counter() - start
                    profiling.record_op(op, elapsed, elapsed)
                for slot, value in zip(outs, results):
                    env[slot] = value
    finally:
        set_current_device(None)


def with_collectives_on_top(program: Program) -> Program:
    """``program`` with the calls of its entry block that hold collectives inlined
    (``stablehlo.inline``), so that ``LockstepProgram.of`` finds them as steps: shard_map's
    body arrives as a called function. Returned as is when there is nothing to inline (or the
    callee is too big to inline: it then stays a call and runs on threads)."""
    function = program.functions.get(program.entry)
    if function is None or len(function.body.blocks) != 1:
        return program
    block = function.body.entry
    if not any(op.name in _CALLS and _meets_inside(op, program, set()) for op in block.ops):
        return program
    inlined = inline_calls(block, program)
    if inlined is block:
        return program
    body = Region([inlined])
    return dataclasses.replace(program, functions={
        **program.functions, program.entry: dataclasses.replace(function, body=body)})


def _meets_inside(op: Any, program: Any, seen: set[str]) -> bool:
    """Whether ``op``'s regions (or the functions it calls) hold a collective or read the
    device's id."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                if inner.name in COLLECTIVES or inner.name in _DEVICE_AWARE:
                    return True
                if _meets_inside(inner, program, seen):
                    return True
    if op.name in _CALLS:
        callee = str(op.attributes.get("callee", "")).lstrip("@")
        function = program.functions.get(callee)
        if function is None:
            return True  # unknown: do not guess
        if callee in seen:
            return False
        seen.add(callee)
        for block in function.body.blocks:
            for inner in block.ops:
                if inner.name in COLLECTIVES or inner.name in _DEVICE_AWARE:
                    return True
                if _meets_inside(inner, program, seen):
                    return True
    return False
