"""The layouts of a program's parameters and results (``jax.experimental.layout``).

A layout is the order of an array's elements in memory, ``minor_to_major`` as XLA writes it
(``(1, 0)`` is row-major for a matrix, ``(0, 1)`` column-major); it never changes a value.
JAX asks for one per entry parameter and result with ``mhlo.layout_mode``: ``"default"`` (or
no attribute), ``"auto"`` (the compiler picks) or a concrete ``"{0,1}"``. pjrtkit honours a
concrete layout without tiles: the compiled program reports it (JAX checks that it got what it
asked for), an argument transferred for it is stored with it and outputs are made with it; the
payloads stay logical arrays, so a plugin's kernels never see a layout. ``auto`` and
``default`` are row-major. A tiled layout (``"{1,0:T(8,128)}"``, a TPU's) is UNIMPLEMENTED.

jaxlib learns the compiled program's layouts from ``PJRT_Executable_OptimizedProgram``: the
module attributes ``mhlo.xla_entry_computation_parameter_layouts`` and
``mhlo.xla_entry_computation_result_layout`` (``layout_attributes``; setting them needs MLIR, so
``isolation.with_module_attributes_isolated`` does it in the parser's child).
"""
from __future__ import annotations

import re

from pjrtkit.errors import Unimplemented

LAYOUT_MODE = "mhlo.layout_mode"
PARAMETER_LAYOUTS = "mhlo.xla_entry_computation_parameter_layouts"
RESULT_LAYOUT = "mhlo.xla_entry_computation_result_layout"

MinorToMajor = tuple[int, ...]

_CONCRETE = re.compile(r"^\{\s*(\d+(?:\s*,\s*\d+)*)?\s*\}$")


def row_major(rank: int) -> MinorToMajor:
    return tuple(range(rank - 1, -1, -1))


def parse_layout_mode(text, rank: int, what: str) -> MinorToMajor | None:
    """``mhlo.layout_mode`` -> a concrete minor_to_major, or None for row-major (``default``,
    ``auto``, absent, or a concrete layout that is row-major anyway)."""
    if text is None or text in ("default", "auto"):
        return None
    match = _CONCRETE.match(str(text))
    if match is None:
        raise Unimplemented(f"{what}: layout {text!r} is not supported; pjrtkit honours "
                            f"concrete layouts without tiles (e.g. '{{0,1}}'), 'default' and "
                            f"'auto'")
    order = tuple(int(d) for d in match.group(1).split(",")) if match.group(1) else ()
    if sorted(order) != list(range(rank)):
        raise Unimplemented(f"{what}: layout {text!r} is not a permutation of the {rank} "
                            f"dimension(s)")
    return None if order == row_major(rank) else order


def entry_layouts(program) -> tuple[tuple[MinorToMajor | None, ...],
                                    tuple[MinorToMajor | None, ...]]:
    """(parameters', results') concrete layouts of ``program``'s entry function: None where
    row-major."""
    main = program.main
    parameters = tuple(
        parse_layout_mode(attrs.get(LAYOUT_MODE), len(getattr(value.type, "shape", ())),
                          f"parameter {i} of {main.name}")
        for i, (value, attrs) in enumerate(zip(main.arguments, main.arg_attributes)))
    result_attributes = main.result_attributes or [{}] * len(main.result_types)
    results = tuple(
        parse_layout_mode(attrs.get(LAYOUT_MODE), len(getattr(kind, "shape", ())),
                          f"result {i} of {main.name}")
        for i, (kind, attrs) in enumerate(zip(main.result_types, result_attributes)))
    return parameters, results


def layout_modes_of(function, which: str) -> tuple[str | None, ...]:
    """Each ``mhlo.layout_mode`` of a ``func.func`` MLIR op's ``arg_attrs`` / ``res_attrs``
    (what XLA's partitioner drops; ``loader.entry_marks`` reads them from the global program)."""
    from jaxlib.mlir import ir

    if which not in function.attributes:
        return ()
    modes = []
    for attrs in ir.ArrayAttr(function.attributes[which]):
        attrs = ir.DictAttr(attrs)
        modes.append(ir.StringAttr(attrs[LAYOUT_MODE]).value if LAYOUT_MODE in attrs else None)
    return tuple(modes)


def _dense_index(order: MinorToMajor) -> str:
    return f"dense<[{', '.join(str(d) for d in order)}]> : tensor<{len(order)}xindex>"


def layout_attributes(parameters: tuple[MinorToMajor, ...],
                      results: tuple[MinorToMajor, ...]) -> dict[str, str]:
    """The two module attributes jaxlib reads the entry layouts from, as MLIR text."""
    return {PARAMETER_LAYOUTS: "[" + ", ".join(_dense_index(o) for o in parameters) + "]",
            RESULT_LAYOUT: "[" + ", ".join(_dense_index(o) for o in results) + "]"}
