"""Importing Triton in the mode this process needs.

Triton decides at import time whether ``@triton.jit`` makes compiled kernels or interpreted ones
(``TRITON_INTERPRET``): even ``tl.zeros`` is a jit function of its standard library. So one
process either emulates (every kernel interpreted on host memory) or compiles for a GPU, never
both; the compile report runs in a process of its own.
"""
from __future__ import annotations

import os
import sys

from pjrtkit.errors import FailedPrecondition

_INTERPRET = "TRITON_INTERPRET"
_chosen: list[bool] = []  # the mode of this process, once chosen


def import_triton(*, interpret: bool | None = None):
    """``(triton, triton.language)`` with ``@triton.jit`` interpreting (emulation) or compiling.

    ``interpret=None``: the mode already chosen in this process (by the emulated driver, or by
    the compile report), else the one ``PJRTKIT_GPU_EMULATE`` asks for.

    Raises:
        FailedPrecondition: Triton was already imported in the other mode in this process.
    """
    if interpret is None:
        from pjrtkit_gpu import settings

        interpret = _chosen[0] if _chosen else settings.emulation_requested()
    wanted = "1" if interpret else ""
    if "triton" not in sys.modules:
        if interpret:
            os.environ[_INTERPRET] = "1"
        elif os.environ.get(_INTERPRET, "") not in ("", "0"):
            raise FailedPrecondition(f"{_INTERPRET}=1 is set, but this process compiles Triton "
                                     f"kernels for a GPU; unset it")
    from pjrtkit.ast_threads import serialize_ast_parse

    serialize_ast_parse()  # Triton parses kernel sources on pjrtkit's execute thread
    import triton
    import triton.language as tl

    interpreting = triton.knobs.runtime.interpret if hasattr(triton, "knobs") else \
        os.environ.get(_INTERPRET, "") not in ("", "0")
    if bool(interpreting) != bool(wanted):
        mode = "Triton's interpreter" if interpret else "compiled kernels"
        raise FailedPrecondition(
            f"pjrtkit-gpu needs {mode}, but Triton was imported in this process with "
            f"{_INTERPRET}={os.environ.get(_INTERPRET, '')!r} before pjrtkit: emulation and GPU "
            f"compilation cannot share a process (start another, or set PJRTKIT_GPU_EMULATE "
            f"to match)")
    if not _chosen:
        _chosen.append(bool(interpret))
    return triton, tl
