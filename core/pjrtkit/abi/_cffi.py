"""The one place that imports the compiled cffi module; everything else takes ``ffi``/``lib`` here.

Keeping the import in one module means a missing build fails with one clear message.
"""
from __future__ import annotations

try:
    from pjrtkit.abi._pjrt_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "pjrtkit's C module pjrtkit.abi._pjrt_cffi is not built; run "
        "`pip install -e . --no-deps --no-build-isolation` in the pjrtkit checkout "
        "(or `python core/pjrtkit/abi/_build.py` to build it in place)"
    ) from exc

__all__ = ["ffi", "lib", "NULL"]

NULL = ffi.NULL
