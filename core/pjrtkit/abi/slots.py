"""Which backend each PJRT_Api slot serves.

The C trampolines of a table pass its slot number back to Python; the callbacks (``fn_*``)
look the backend up here. ``api`` fills the list as it builds tables. Kept apart from ``api``,
which imports every callback module to define them, so that the callbacks need not import
``api`` back.
"""
from __future__ import annotations

from typing import Any

from pjrtkit.errors import Internal

# Index is the slot; appended to (under api's lock) and never shrunk: jaxlib keeps every table
# for the life of the process.
BACKENDS: list[Any] = []


def backend_for_slot(slot: int) -> Any:
    try:
        return BACKENDS[slot]
    except IndexError:
        raise Internal(f"no pjrtkit backend is registered in api slot {slot}") from None
