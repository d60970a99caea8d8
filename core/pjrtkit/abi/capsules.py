"""PyCapsules over C addresses, with ctypes prototypes of our own: ``ctypes.pythonapi`` hands
every caller the same function object per name, so setting its ``argtypes`` there (as other
libraries in the user's process may) would change them for everyone."""
from __future__ import annotations

import ctypes

_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def new_capsule(address: int, name: ctypes.Array) -> object:
    """A capsule over ``address`` named by ``name``, a ``ctypes.create_string_buffer`` that
    must live as long as the capsule (the capsule keeps a pointer to it, not a copy)."""
    return _new(address, ctypes.addressof(name), None)


def capsule_pointer(capsule: object) -> int:
    """The address a capsule holds (its name unchecked)."""
    return _pointer(capsule, None)
