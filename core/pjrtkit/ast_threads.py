"""``ast.parse`` serialized across threads, on the CPython versions that need it.

CPython 3.11 and 3.12 keep the recursion depth of the C-to-Python AST conversion in state that
threads share; two threads running ``ast.parse`` at once can fail with "SystemError: AST
constructor recursion depth mismatch" (seen here on 3.11.7: pytest formatting a failure on the
main thread while pjrtkit's execute thread ran Triton's interpreter, which parses each kernel's
source; the pytest worker died). pjrtkit parses on its own threads (Triton's jit and
interpreter, discovery's imports), so it makes ``ast.parse`` take one process-wide lock.
Nothing else changes: the same function runs, one call at a time.
"""
from __future__ import annotations

import ast
import sys
import threading

# Where the shared counter exists (3.13 keeps it per call).
AFFECTED = sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] < (3, 13)
_LOCK = threading.RLock()
# The parse that runs under the lock (the standard library's, once installed).
_ORIGINAL = [ast.parse]


def _serialized_parse(*args, **kwargs):
    with _LOCK:
        return _ORIGINAL[0](*args, **kwargs)


_serialized_parse.__doc__ = ast.parse.__doc__
_serialized_parse.pjrtkit_serialized = True


def serialize_ast_parse() -> None:
    """Make ``ast.parse`` take one lock (once; nothing on unaffected versions)."""
    if not AFFECTED or getattr(ast.parse, "pjrtkit_serialized", False):
        return
    _ORIGINAL[0] = ast.parse
    ast.parse = _serialized_parse
