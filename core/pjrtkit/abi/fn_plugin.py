"""PJRT_Plugin_*: reached through the per-slot trampolines, since they carry no handle."""
from __future__ import annotations

from typing import Any

from pjrtkit.abi.args import Args
from pjrtkit.abi.errors import pjrt_function
from pjrtkit.abi.named_values import NamedValues
from pjrtkit.abi.slots import backend_for_slot

# NamedValues handed out by Plugin_Attributes; C may keep reading them for the process lifetime.
_attributes: dict[int, NamedValues] = {}


@pjrt_function("PJRT_Plugin_Initialize")
def plugin_initialize(slot: int, args: Any) -> None:
    Args(args)
    backend_for_slot(slot)


@pjrt_function("PJRT_Plugin_Attributes")
def plugin_attributes(slot: int, args: Any) -> None:
    a = Args(args)
    a.require_outputs("attributes", "num_attributes")
    values = _attributes.get(slot)
    if values is None:
        attributes = backend_for_slot(slot).plugin_attributes()
        values = _attributes.setdefault(slot, NamedValues(attributes))
    a.set("attributes", values.array)
    a.set("num_attributes", values.count)
