"""The list of every op the loader can meet, and who handles each (``op_list.txt`` beside this).

The ops are read from jaxlib's own dialect modules (``jaxlib.mlir.dialects.stablehlo`` and
``sdy``), so a jaxlib upgrade that adds an op makes the list stale. Each op is one of:

  cpu        the cpu plugin has a lowering rule for it (asked through its registry)
  core       the core handles it before any plugin sees it: terminators; Shardy ops are
             "core (one device)": identities on one device (``pjrtkit.stablehlo.one_device``),
             left for the partitioner on several
  missing    knowingly not handled; the reason says why (``KNOWN_MISSING``)

CHLO ops never reach the loader: jaxlib legalizes them to StableHLO when it serializes the
portable artifact it hands a plugin (a test checks this). Regenerate the file with
``python -m pjrtkit.stablehlo.op_list --write``; ``tests/test_op_list.py`` fails when it is
stale or when an op is neither handled nor listed as knowingly missing.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys

from pjrtkit.stablehlo.one_device import HANDLED_OPS

LIST_PATH = os.path.join(os.path.dirname(__file__), "op_list.txt")

_COLLECTIVE = ("collective across devices with no rule yet (the rest are the reference's "
               "rules on the core's rendezvous, pjrtkit.collectives)")
_DYNAMIC = "dynamic shapes: pjrtkit supports static shapes only"
_NOT_EMITTED = "JAX does not emit it"

KNOWN_MISSING = {
    "stablehlo.cross-replica-sum": "legacy form of all_reduce; " + _NOT_EMITTED,
    "stablehlo.async_start": "XLA-internal asynchronous wrapper; " + _NOT_EMITTED,
    "stablehlo.async_done": "XLA-internal asynchronous wrapper; " + _NOT_EMITTED,
    "stablehlo.batch_norm_grad": "JAX lowers batch norm to elementwise ops; " + _NOT_EMITTED,
    "stablehlo.batch_norm_inference": "JAX lowers batch norm to elementwise ops; " + _NOT_EMITTED,
    "stablehlo.batch_norm_training": "JAX lowers batch norm to elementwise ops; " + _NOT_EMITTED,
    "stablehlo.broadcast": "legacy form of broadcast_in_dim; " + _NOT_EMITTED,
    "stablehlo.einsum": "legacy op; " + _NOT_EMITTED,
    "stablehlo.unary_einsum": "legacy op; " + _NOT_EMITTED,
    "stablehlo.torch_index_select": "PyTorch frontends' op; " + _NOT_EMITTED,
    "stablehlo.map": _NOT_EMITTED + " (vmap lowers to elementwise ops)",
    "stablehlo.rng": "lax.rng_uniform: no cpu kernel yet (jax.random uses threefry bits)",
    "stablehlo.infeed": "host infeed: not supported",
    "stablehlo.outfeed": "host outfeed: not supported",
    "stablehlo.send": "cross-host channels: not supported",
    "stablehlo.recv": "cross-host channels: not supported",
    "stablehlo.uniform_quantize": "quantized element types: not supported",
    "stablehlo.uniform_dequantize": "quantized element types: not supported",
    "stablehlo.dynamic_broadcast_in_dim": _DYNAMIC,
    "stablehlo.dynamic_conv": _DYNAMIC,
    "stablehlo.dynamic_gather": _DYNAMIC,
    "stablehlo.dynamic_iota": _DYNAMIC,
    "stablehlo.dynamic_pad": _DYNAMIC,
    "stablehlo.dynamic_reshape": _DYNAMIC,
    "stablehlo.real_dynamic_slice": _DYNAMIC,
    "stablehlo.get_dimension_size": _DYNAMIC,
    "stablehlo.set_dimension_size": _DYNAMIC,
}

# Ops that newer jaxlib releases' dialects add (the list file is jaxlib 0.10.2's).
NEWER_JAXLIB_MISSING = {
    "stablehlo.collective_reduce": _COLLECTIVE + " (jaxlib 0.12)",
}

# Ops the core consumes itself: block terminators (the plan hands their operands back) and
# the Shardy ops the one-device pass removes.
CORE_OPS = frozenset({"stablehlo.return", *HANDLED_OPS})


def dialect_ops() -> list[str]:
    """Every op name of jaxlib's StableHLO and Shardy dialects, sorted."""
    from jaxlib.mlir.dialects import sdy, stablehlo

    return sorted({cls.OPERATION_NAME for module in (stablehlo, sdy)
                   for _, cls in inspect.getmembers(module, inspect.isclass)
                   if hasattr(cls, "OPERATION_NAME")})


def status(op: str, lowered: frozenset[str] | set[str]) -> str:
    """``cpu``, ``core`` or ``missing: reason``; ``unknown`` if none applies."""
    if op in lowered:
        return "cpu"
    if op in CORE_OPS:
        return "core (one device)" if op.startswith("sdy.") else "core"
    if op in KNOWN_MISSING:
        return f"missing: {KNOWN_MISSING[op]}"
    if op in NEWER_JAXLIB_MISSING:
        return f"missing: {NEWER_JAXLIB_MISSING[op]}"
    return "unknown"


def cpu_lowered_ops() -> frozenset[str]:
    """The ops a cpu plugin plan runs (its public ``RULES.op_names``: rules and constants)."""
    from pjrtkit_cpu.lowering import RULES

    return RULES.op_names


def generate(lowered: frozenset[str] | None = None) -> str:
    import jaxlib

    lowered = cpu_lowered_ops() if lowered is None else lowered
    ops = dialect_ops()
    width = max(map(len, ops))
    lines = [f"# Every op of jaxlib {jaxlib.__version__}'s stablehlo and sdy dialects, and who "
             f"handles it.", "# Generated by `python -m pjrtkit.stablehlo.op_list --write`; "
             "do not edit (see op_list.py).", "# cpu: a pjrtkit_cpu lowering rule. core: "
             "handled before plugins. missing: why not."]
    lines += [f"{op:<{width}}  {status(op, lowered)}" for op in ops]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print, write or check op_list.txt.")
    parser.add_argument("--write", action="store_true", help=f"write {LIST_PATH}")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.write:
        with open(LIST_PATH, "w") as out:
            out.write(text)
    elif args.check:
        with open(LIST_PATH) as existing:
            if existing.read() != text:
                print(f"{LIST_PATH} is stale: run python -m pjrtkit.stablehlo.op_list --write")
                return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
