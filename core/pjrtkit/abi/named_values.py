"""PJRT_NamedValue lists <-> ``dict[str, int | float | bool | str | list[int]]``."""
from __future__ import annotations

from typing import Any, Mapping

from pjrtkit.abi._cffi import ffi, lib
from pjrtkit.abi.args import int_list, string, struct_array
from pjrtkit.errors import InvalidArgument

Value = int | float | bool | str | list[int]


def read(base: Any, count: int, what: str) -> dict[str, Value]:
    """Decode ``count`` NamedValues (e.g. Client_Create options) into a dict."""
    out: dict[str, Value] = {}
    for i, nv in enumerate(struct_array(base, count, what)):
        where = f"{what}[{i}]"
        name = string(nv.req("name"), nv.req("name_size"), f"{where}.name")
        kind = nv.req("type")
        if kind == lib.PJRT_NamedValue_kString:
            out[name] = string(nv.req("string_value"), nv.req("value_size"),
                               f"{where}.string_value")
        elif kind == lib.PJRT_NamedValue_kInt64:
            out[name] = int(nv.req("int64_value"))
        elif kind == lib.PJRT_NamedValue_kInt64List:
            out[name] = int_list(nv.req("int64_array_value"), nv.req("value_size"),
                                 f"{where}.int64_array_value")
        elif kind == lib.PJRT_NamedValue_kFloat:
            out[name] = float(nv.req("float_value"))
        elif kind == lib.PJRT_NamedValue_kBool:
            out[name] = bool(nv.req("bool_value"))
        else:
            raise InvalidArgument(f"{where} ({name!r}) has unknown PJRT_NamedValue_Type {kind}")
    return out


class NamedValues:
    """A C array of NamedValues plus every buffer it points into; keep it alive while C reads."""

    __slots__ = ("array", "count", "_keep")

    def __init__(self, values: Mapping[str, Value]):
        self.count = len(values)
        self.array = ffi.new("PJRT_NamedValue[]", max(self.count, 1))
        self._keep: list[Any] = []
        for nv, (name, value) in zip(self.array, values.items()):
            self._fill(nv, str(name), value)

    def _fill(self, nv: Any, name: str, value: Value) -> None:
        encoded = name.encode()
        cname = ffi.new("char[]", encoded)
        self._keep.append(cname)
        nv.struct_size = ffi.sizeof("PJRT_NamedValue")
        nv.extension_start = ffi.NULL
        nv.name = cname
        nv.name_size = len(encoded)
        nv.value_size = 1
        # bool before int: bool is an int subclass but a different PJRT type.
        if isinstance(value, bool):
            nv.type = lib.PJRT_NamedValue_kBool
            nv.bool_value = value
        elif isinstance(value, int):
            nv.type = lib.PJRT_NamedValue_kInt64
            nv.int64_value = value
        elif isinstance(value, float):
            nv.type = lib.PJRT_NamedValue_kFloat
            nv.float_value = value
        elif isinstance(value, str):
            text = value.encode()
            cvalue = ffi.new("char[]", text)
            self._keep.append(cvalue)
            nv.type = lib.PJRT_NamedValue_kString
            nv.string_value = cvalue
            nv.value_size = len(text)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            items = ffi.new("int64_t[]", [int(v) for v in value] or [0])
            self._keep.append(items)
            nv.type = lib.PJRT_NamedValue_kInt64List
            nv.int64_array_value = items
            nv.value_size = len(value)
        else:
            raise InvalidArgument(
                f"attribute {name!r} has value {value!r} of type {type(value).__name__}; PJRT "
                "NamedValues hold int, float, bool, str or a list of ints")
