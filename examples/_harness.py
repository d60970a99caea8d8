"""Shared driver for the example training programs: run one jitted step on two backends.

Each example script builds an :class:`Experiment` (initial parameters and batches as NumPy
arrays, one training-step function written in plain JAX) and hands it to :func:`main`, which

1. enables XLA's reference platform (``--reference``: ``cpu`` by default, ``cuda`` for XLA's GPU
   backend) beside the backend under test (``jax_platforms``), before any backend is started,
   so that ``JAX_PLATFORMS=pjrtkit_cpu`` cannot remove the reference;
2. puts its own copy of the NumPy state and of every batch on each device (nothing computed on
   one backend is ever copied to the other);
3. calls the same ``jax.jit`` step on both, checks that every output stayed on the device it was
   meant for, and prints a per-step loss table;
4. exits 0 on PASS, 1 on FAIL (relative difference above tolerance, a non-finite loss, an output
   on the wrong device, or an exception from either backend), 2 when a backend cannot be started.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

REFERENCE_PLATFORM = "cpu"
DEFAULT_BACKEND = "pjrtkit_cpu"
# Denominator floor of the relative difference, so a loss near 0 does not divide by ~0.
RELATIVE_FLOOR = 1e-6

EXIT_PASS, EXIT_FAIL, EXIT_SETUP = 0, 1, 2

PyTree = Any


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One example: everything needed to run its training loop on any device.

    ``train_step(state, batch) -> (new_state, loss)`` must be a pure function of its arguments;
    ``state`` and every batch are pytrees of NumPy arrays made deterministically from the seed.
    """

    name: str
    state: PyTree
    batches: Sequence[PyTree]
    train_step: Callable[[PyTree, PyTree], tuple[PyTree, Any]]
    # Largest accepted |loss_backend - loss_cpu| / max(|loss_cpu|, RELATIVE_FLOOR), float32.
    tolerance: float


def parse_args(description: str, default_steps: int,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=DEFAULT_BACKEND,
                        help="JAX platform under test (default: %(default)s); "
                             "'cpu' compares XLA's CPU backend with itself")
    parser.add_argument("--reference", default=REFERENCE_PLATFORM,
                        help="XLA's platform the backend is compared with (default: "
                             "%(default)s; 'cuda' for XLA's GPU backend)")
    parser.add_argument("--steps", type=int, default=default_steps,
                        help="training steps (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the NumPy generator for parameters and data "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    return args


def enable_platforms(backend: str, reference: str = REFERENCE_PLATFORM) -> None:
    """Start ``backend`` and XLA's ``reference`` side by side, overriding the user's
    JAX_PLATFORMS.

    Must run before anything starts a backend: JAX ignores ``jax_platforms`` afterwards.
    """
    from pjrtkit import jax_compat

    if jax_compat.backends_are_initialized():
        raise RuntimeError("JAX backends were started before enable_platforms(); "
                           "call it before any jax.devices(), jnp array or jit call")
    platforms = [backend] if backend == reference else [backend, reference]
    jax.config.update("jax_platforms", ",".join(platforms))


def first_device(platform: str) -> jax.Device:
    try:
        return jax.devices(platform)[0]
    except RuntimeError as e:
        raise SetupError(
            f"cannot start JAX platform {platform!r}: {e}\n"
            f"If {platform!r} is a pjrtkit backend, is its plugin installed "
            f"(e.g. `pip install -e plugins/cpu`)? `--backend cpu` runs the example against "
            f"XLA's CPU backend alone, as a self-check of the example.") from e


class SetupError(Exception):
    """A backend could not be started; nothing was compared."""


def describe(device: jax.Device) -> str:
    return f"{device.platform}:{device.id} ({device!r}, kind {device.device_kind!r})"


def check_on_device(tree: PyTree, device: jax.Device, *, what: str) -> None:
    """Raise if any array in ``tree`` does not live (only) on ``device``."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if leaf.devices() != {device}:
            raise WrongDeviceError(
                f"{what}{jax.tree_util.keystr(path)} is on {sorted(map(str, leaf.devices()))}, "
                f"expected only {device}")


class WrongDeviceError(Exception):
    """A step output was not on the device its inputs were committed to."""


def relative_difference(actual: float, expected: float) -> float:
    return abs(actual - expected) / max(abs(expected), RELATIVE_FLOOR)


@dataclasses.dataclass
class _Side:
    """The state of the training run on one device."""

    label: str
    device: jax.Device
    state: PyTree = None
    steps_done: int = 0
    first_step_seconds: float = 0.0
    later_steps_seconds: float = 0.0

    def step(self, train_step, batch_np: PyTree) -> float:
        # The batch goes from host NumPy straight to this side's device.
        batch = jax.device_put(batch_np, self.device)
        start = time.perf_counter()
        self.state, loss = train_step(self.state, batch)
        jax.block_until_ready((self.state, loss))
        elapsed = time.perf_counter() - start
        check_on_device((self.state, loss), self.device, what=f"{self.label} step output")
        if self.steps_done == 0:
            self.first_step_seconds = elapsed
        else:
            self.later_steps_seconds += elapsed
        self.steps_done += 1
        return float(np.asarray(loss))

    def timing(self) -> str:
        if self.steps_done == 0:
            return "no step completed"
        text = f"first step {self.first_step_seconds:.3f} s (includes compile)"
        if self.steps_done > 1:
            text += (f", then {1e3 * self.later_steps_seconds / (self.steps_done - 1):.2f} "
                     f"ms/step")
        return text


def run(experiment: Experiment, backend: str, *, reference_platform: str = REFERENCE_PLATFORM,
        out=sys.stdout) -> int:
    """Run ``experiment`` on ``backend`` and on XLA's ``reference_platform``; print the table;
    return exit status."""

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    tested = _Side(label=backend, device=first_device(backend))
    reference = _Side(label=f"{reference_platform} (XLA)",
                      device=first_device(reference_platform))
    xla = f"xla {reference_platform}"
    say(f"{experiment.name}: {len(experiment.batches)} steps, float32, "
        f"tolerance {experiment.tolerance:g}")
    say(f"backend under test: {describe(tested.device)}")
    say(f"reference:          {describe(reference.device)}")
    if tested.device == reference.device:
        say("note: both sides are the same device; this is a self-check of the example")

    # Each side gets its own copy of the host state; one jit object compiles once per backend.
    for side in (tested, reference):
        side.state = jax.device_put(experiment.state, side.device)
    train_step = jax.jit(experiment.train_step)

    width = max(len(f"loss[{backend}]"), 16)
    say()
    say(f"{'step':>4}  {f'loss[{backend}]':>{width}}  {f'loss[{xla}]':>{width}}  "
        f"{'rel diff':>9}")
    worst, worst_step, problems = 0.0, 0, []  # worst_step 0: nothing compared yet
    for step, batch in enumerate(experiment.batches, start=1):
        try:
            losses = [side.step(train_step, batch) for side in (tested, reference)]
        except Exception as e:  # noqa: BLE001 - a backend failed: say where (traceback on stderr)
            traceback.print_exc()
            side = tested if tested.steps_done < step else reference
            problems.append(f"step {step} on {side.label} raised {type(e).__name__}: {e}")
            break
        loss_tested, loss_reference = losses
        difference = relative_difference(loss_tested, loss_reference)
        say(f"{step:>4}  {loss_tested:>{width}.9g}  {loss_reference:>{width}.9g}  "
            f"{difference:>9.2e}")
        if not (math.isfinite(loss_tested) and math.isfinite(loss_reference)):
            problems.append(f"step {step}: loss is not finite "
                            f"({backend} {loss_tested}, {reference_platform} {loss_reference})")
            break
        if difference > worst or step == 1:
            worst, worst_step = difference, step

    say()
    say(f"step outputs checked on: {backend} -> {tested.device}, "
        f"{reference_platform} -> {reference.device}")
    say(f"time on {backend}: {tested.timing()}")
    say(f"time on {xla} (reference): {reference.timing()}")
    if worst_step:
        say(f"max rel diff: {worst:.2e} at step {worst_step} "
            f"(tolerance {experiment.tolerance:g})")
    if worst > experiment.tolerance:
        problems.append(f"max rel diff {worst:.2e} at step {worst_step} "
                        f"exceeds tolerance {experiment.tolerance:g}")
    if problems:
        for problem in problems:
            say(f"FAIL: {experiment.name} on {backend}: {problem}")
        return EXIT_FAIL
    say(f"PASS: {experiment.name} on {backend} matches XLA {reference_platform} for "
        f"{len(experiment.batches)} steps (max rel diff {worst:.2e} <= {experiment.tolerance:g})")
    return EXIT_PASS


def main(build: Callable[[int, int], Experiment], *, description: str, default_steps: int,
         argv: Sequence[str] | None = None) -> int:
    """Entry point of an example script: ``build(seed, steps)`` makes its :class:`Experiment`."""
    args = parse_args(description, default_steps, argv)
    enable_platforms(args.backend, args.reference)
    experiment = build(args.seed, args.steps)
    try:
        return run(experiment, args.backend, reference_platform=args.reference)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
