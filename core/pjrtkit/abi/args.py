"""Reading and writing Args structs by the caller's ``struct_size``.

A caller built against a newer PJRT header passes larger structs (their extra fields are simply
not read); an older caller passes smaller ones. A field that ends beyond the caller's
struct_size does not exist for that caller: ``opt`` reads it as absent, ``req`` and ``set``
raise INVALID_ARGUMENT naming the struct and the field instead of touching memory the caller
does not own.
"""
from __future__ import annotations

from typing import Any

from pjrtkit.abi._cffi import ffi
from pjrtkit.errors import InvalidArgument

_MISSING = object()
_layouts: dict[Any, tuple[str, dict[str, int]]] = {}


def _layout(struct_type: Any) -> tuple[str, dict[str, int]]:
    """(struct name, field -> end offset) computed once per struct type."""
    try:
        return _layouts[struct_type]
    except KeyError:
        ends = {name: f.offset + ffi.sizeof(f.type) for name, f in struct_type.fields}
        return _layouts.setdefault(struct_type, (struct_type.cname.removeprefix("struct "), ends))


class Args:
    """A view of one incoming struct that honours its ``struct_size``."""

    __slots__ = ("p", "name", "size", "_ends")

    def __init__(self, p: Any, what: str | None = None):
        ctype = ffi.typeof(p)
        struct_type = ctype.item if ctype.kind == "pointer" else ctype
        self.name, self._ends = _layout(struct_type)
        if ctype.kind == "pointer" and p == ffi.NULL:
            raise InvalidArgument(f"{what or self.name} is NULL")
        self.p = p
        self.size = p.struct_size
        if self.size < self._ends["struct_size"]:
            raise InvalidArgument(
                f"{self.name}.struct_size is {self.size}, too small for any field")

    def has(self, field: str) -> bool:
        return self._ends[field] <= self.size

    def _missing(self, field: str) -> InvalidArgument:
        return InvalidArgument(
            f"{self.name}.{field} is missing: the caller's struct_size is {self.size} but the "
            f"field needs {self._ends[field]} bytes (caller built against an older PJRT header?)")

    def req(self, field: str) -> Any:
        if self._ends[field] > self.size:
            raise self._missing(field)
        return getattr(self.p, field)

    def opt(self, field: str, default: Any = None) -> Any:
        if self._ends[field] > self.size:
            return default
        return getattr(self.p, field)

    def set(self, field: str, value: Any) -> None:
        if self._ends[field] > self.size:
            raise self._missing(field)
        setattr(self.p, field, value)

    def set_outputs(self, **fields: Any) -> None:
        """Set several output fields, checking first that the caller's struct has all of them
        (so a too-small struct fails before any field is written)."""
        self.require_outputs(*fields)
        for field, value in fields.items():
            setattr(self.p, field, value)

    def require_outputs(self, *fields: str) -> None:
        """Check every output field first, so a too-small struct fails before any side effect."""
        for field in fields:
            if self._ends[field] > self.size:
                raise self._missing(field)


def struct_array(base: Any, count: int, what: str) -> list[Args]:
    """Views of ``count`` structs at ``base`` (arrays are indexed by our sizeof, as in PJRT)."""
    if count and base == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL but its count is {count}")
    return [Args(base + i, f"{what}[{i}]") for i in range(count)]


def string(ptr: Any, size: int, what: str) -> str:
    if size == 0:
        return ""
    if ptr == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL but its size is {size}")
    return ffi.unpack(ptr, size).decode("utf-8", errors="replace")


def data(ptr: Any, size: int, what: str) -> bytes:
    if size == 0:
        return b""
    if ptr == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL but its size is {size}")
    return ffi.buffer(ptr, size)[:]


def int_list(ptr: Any, count: int, what: str) -> list[int]:
    if count == 0:
        return []
    if ptr == ffi.NULL:
        raise InvalidArgument(f"{what} is NULL but its count is {count}")
    return ffi.unpack(ptr, count)
