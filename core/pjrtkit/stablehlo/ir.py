"""A plain-Python program IR for StableHLO, free of MLIR objects.

The loader (``pjrtkit.stablehlo.loader``) walks a deserialized StableHLO module once and builds
these records; everything after compile (plans, kernels, execute) sees only them. Attributes are
decoded to Python values (see ``pjrtkit.stablehlo.attributes`` for the decoding table), so no
MLIR handle outlives compilation.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # dtypes are NumPy's, but the records need no NumPy (pjrtkit.lowering uses them)
    import numpy as np


@dataclasses.dataclass(frozen=True)
class TensorType:
    """A ranked tensor type: static shape and a NumPy dtype (ml_dtypes for bf16/fp8/...)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    @functools.cached_property  # types are shared by the values of one program; asked often
    def size(self) -> int:
        return int(math.prod(self.shape))

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype.name}>"


@dataclasses.dataclass(frozen=True)
class TokenType:
    """``!stablehlo.token``: carries ordering only; at run time it is an empty array."""

    def __str__(self) -> str:
        return "!stablehlo.token"


@dataclasses.dataclass(frozen=True)
class TupleType:
    elements: tuple[Any, ...]


@dataclasses.dataclass(eq=False)
class Value:
    """An SSA value. ``id`` is unique within one Program; identity is by object."""

    id: int
    type: TensorType | TokenType | TupleType

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type}"


@dataclasses.dataclass(eq=False)
class Op:
    """One operation. ``name`` is the MLIR operation name, e.g. ``"stablehlo.add"``.

    ``attributes`` holds decoded attributes keyed by their MLIR name (``"comparison_direction"``,
    ``"dot_dimension_numbers"``, ``"broadcast_dimensions"``, ...). ``regions`` keep MLIR order
    (``while``: cond then body; ``if``: true then false; ``case``: branches in order).
    ``location`` is a short human-readable source location for error messages.
    """

    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attributes: dict[str, Any]
    regions: tuple["Region", ...] = ()
    location: str = ""

    def describe(self) -> str:
        ins = ", ".join(str(v.type) for v in self.operands)
        outs = ", ".join(str(v.type) for v in self.results)
        where = f" at {self.location}" if self.location else ""
        return f"{self.name}({ins}) -> ({outs}){where}"


@dataclasses.dataclass(eq=False)
class Block:
    arguments: tuple[Value, ...]
    ops: list[Op]  # the terminator (stablehlo.return / func.return) is the last op


@dataclasses.dataclass(eq=False)
class Region:
    blocks: list[Block]

    @property
    def entry(self) -> Block:
        return self.blocks[0]


@dataclasses.dataclass(eq=False)
class Function:
    """A ``func.func``. ``arg_attributes``/``result_attributes`` are decoded per position
    (e.g. ``{"tf.aliasing_output": 0}``, ``{"jax.buffer_donor": True}``, ``{"sdy.sharding": ...}``).
    """

    name: str
    arguments: tuple[Value, ...]
    result_types: tuple[Any, ...]
    body: Region
    arg_attributes: tuple[dict[str, Any], ...] = ()
    result_attributes: tuple[dict[str, Any], ...] = ()
    visibility: str = "public"


@dataclasses.dataclass(eq=False)
class Program:
    """A whole module: its functions by name, the entry point, and module attributes
    (``mhlo.num_partitions``, ``mhlo.num_replicas``, ``sdy`` meshes as text, ...)."""

    functions: dict[str, Function]
    entry: str
    attributes: dict[str, Any]

    @property
    def main(self) -> Function:
        return self.functions[self.entry]


def walk_ops(program: Program):
    """Every op of every function of ``program``, nested regions included."""

    def walk_region(region: Region):
        for block in region.blocks:
            for op in block.ops:
                yield op
                for inner in op.regions:
                    yield from walk_region(inner)

    for function in program.functions.values():
        yield from walk_region(function.body)
