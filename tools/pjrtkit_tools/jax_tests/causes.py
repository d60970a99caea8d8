"""A failure message -> the cause it is grouped under.

Hundreds of failures usually have a handful of causes: one missing op fails every test that uses
it, at every shape. The cause is the message's first line with what varies per test taken out:
numbers (sizes, values, tolerances, counts) become ``N``, the dimensions of a tensor type go
(``tensor<3x4xf32>`` -> ``tensor<f32>``), source locations and memory addresses go. Words stay,
including dtype names with digits (``float32``, ``bf16``), so an UNIMPLEMENTED message still says
which op on which dtype.
"""
from __future__ import annotations

import re

MAX_CAUSE_LENGTH = 240

_REWRITES: tuple[tuple[re.Pattern, str], ...] = (
    # xdist's message names the test the dead worker ran; the cause is the death
    (re.compile(r"^worker '\w+' crashed while running .*"),
     "worker crashed while running the test (the process died)"),
    # jax.errors.JaxRuntimeError -> JaxRuntimeError
    (re.compile(r"^(?:[a-z_][a-z0-9_]*\.)+(?=[A-Z]\w*(?:Error|Exception|Warning)\b)"), ""),
    # an op's source location runs to the end of the line: at "jit(f)"(callsite(... or
    # at "triangular_solve")
    (re.compile(r' at "[^"]*".*'), ""),
    # MLIR locations: loc("file.py":12:3) or loc(callsite(...)) (one level of nesting)
    (re.compile(r"\s*(?:at\s+)?loc\((?:[^()]|\([^()]*\))*\)"), ""),
    # pjrtkit's dtype errors list every supported dtype; the unsupported one is the cause
    # pjrtkit's dtype errors list every supported dtype and the op's types; the op and the
    # unsupported dtype are the cause
    (re.compile(r"(on dtype \S+ is not supported); supported dtypes: .*"), r"\1"),
    # tensor<3x4xf32> -> tensor<f32>; tensor<?x4xi8> and tensor<10x3xfloat32> likewise
    (re.compile(r"tensor<(?:[0-9?]+x)+"), "tensor<"),
    (re.compile(r"(?<![A-Za-z0-9_])0x[0-9a-fA-F]+"), "ADDR"),
    # jaxpr-style shaped types: f32[3,4] -> f32[...]
    (re.compile(r"\b([a-z]+[0-9]*)\[[0-9, ]*\]"), r"\1[...]"),
    # a number not glued to a word (keeps float32, bf16, x64, gw0)
    (re.compile(r"(?<![A-Za-z0-9_.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z0-9_])"),
     "N"),
    (re.compile(r"\((?:N, )+N?\)|\(N,\)"), "(N...)"),
    (re.compile(r"\[(?:N, ?)+N\]"), "[N...]"),
    (re.compile(r"'[^']{60,}'"), "'...'"),  # long quoted values (arrays, programs)
    (re.compile(r"\s+"), " "),
)


def cause_of(message: str) -> str:
    """The normalised first line of ``message`` (see the module docstring)."""
    line = next((line for line in message.splitlines() if line.strip()), "").strip()
    if not line:
        return "(no message)"
    for pattern, replacement in _REWRITES:
        line = pattern.sub(replacement, line)
    line = line.strip()
    if len(line) > MAX_CAUSE_LENGTH:
        line = line[:MAX_CAUSE_LENGTH - 3] + "..."
    return line
