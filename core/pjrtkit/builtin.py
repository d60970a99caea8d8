"""Built-in behaviour, loaded as a plugin through the same path as any backend's hooks.

These implementations run last (``trylast``) so a backend overrides them by implementing the
hook itself.
"""
from __future__ import annotations

from pjrtkit._markers import hookimpl
from pjrtkit.types import Capabilities


@hookimpl(trylast=True)
def pjrtkit_memory_stats(device, tracked):
    return tracked


@hookimpl(trylast=True)
def pjrtkit_make_topology(name, options):
    return None


@hookimpl(trylast=True)
def pjrtkit_capabilities():
    return Capabilities()  # nothing declared: tools learn by trying


@hookimpl(trylast=True)
def pjrtkit_primitive_set():
    return None  # no primitive set declared: programs reach pjrtkit_compile as JAX wrote them


@hookimpl(trylast=True)
def pjrtkit_multi_process():
    return None  # single-process unless the backend says otherwise
