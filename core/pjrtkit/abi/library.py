"""A pjrtkit backend as a shared library that any PJRT host loads: ``libpjrtkit_<backend>.so``.

``build_library("cpu", out_dir)`` (the command ``pjrtkit build-library cpu --output DIR``)
compiles ``library_entry.c`` with the C compiler Python was built with, configured for this
interpreter: its path (its virtual environment, where pjrtkit and the backend are installed),
its shared libpython and its version. The library exports ``GetPjrtApi``, which starts that
interpreter in a host without Python, or uses the host's when it runs the same Python version,
and returns the table ``api_address`` builds: the same PJRT_Api JAX gets through the
``jax_plugins`` entry point.

A library loaded into a process that also registered the backend with JAX gets a table of its
own (another slot); tables are never freed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from pjrtkit.errors import FailedPrecondition, InvalidArgument

ENTRY_SOURCE = Path(__file__).with_name("library_entry.c")

_lock = threading.Lock()
_addresses: dict[str, int] = {}


def library_name(backend: str) -> str:
    return f"libpjrtkit_{backend}.so"


def api_address(backend: str) -> int:
    """The address of the PJRT_Api of the installed backend ``backend`` (built once per process;
    ``GetPjrtApi`` of a built library calls this)."""
    with _lock:
        if backend not in _addresses:
            from pjrtkit import discovery
            from pjrtkit.abi._cffi import ffi
            from pjrtkit.abi.api import api_for_slot, register_backend

            _capsule, slot = register_backend(discovery.load_backend(backend))
            _addresses[backend] = int(ffi.cast("uintptr_t", api_for_slot(slot)))
        return _addresses[backend]


def _c_string(text: str) -> str:
    """``text`` as a C string literal (every byte outside printable ASCII escaped)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\' or not 32 <= byte < 127:
            out.append(f"\\{byte:03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def shared_libpython() -> Path:
    """This interpreter's shared libpython, which a host without Python loads."""
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    candidates = [Path(libdir) / soname] if libdir and soname else []
    if libdir and soname and ".so" not in soname:  # a static build names libpython3.X.a
        candidates = [Path(libdir) / f"libpython{sysconfig.get_python_version()}.so.1.0"]
    for path in candidates:
        if path.is_file():
            return path
    raise FailedPrecondition(
        f"this Python ({sys.executable}, {sysconfig.get_python_version()}) has no shared "
        f"libpython (looked for {', '.join(map(str, candidates)) or 'LIBDIR/INSTSONAME'}); a "
        f"PJRT plugin library starts Python in hosts without it, so build it with a Python "
        f"configured with --enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared)")


def _config_header(backend: str) -> str:
    values = {"PJRTKIT_BACKEND": backend,
              "PJRTKIT_PYTHON_EXECUTABLE": os.path.abspath(sys.executable),
              "PJRTKIT_LIBPYTHON": str(shared_libpython()),
              "PJRTKIT_PYTHON_VERSION": sysconfig.get_python_version()}
    return "".join(f"#define {name} {_c_string(value)}\n" for name, value in values.items())


def build_library(backend: str, output_dir: str | os.PathLike) -> Path:
    """Compile ``libpjrtkit_<backend>.so`` into ``output_dir``; returns its path."""
    from pjrtkit import discovery

    installed = discovery.installed_names()
    if backend not in installed:
        raise InvalidArgument(f"no pjrtkit backend named {backend!r} is installed in "
                              f"{sys.prefix}; installed: {', '.join(sorted(installed)) or 'none'}")
    if not sys.executable:
        raise FailedPrecondition("sys.executable is unknown: run pjrtkit build-library with the "
                                 "Python of the environment the library should start")
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(compiler[0]) is None:
        raise FailedPrecondition(f"no C compiler {compiler[0]!r} (the one Python was built "
                                 f"with); install gcc or set CC")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / library_name(backend)
    with tempfile.TemporaryDirectory(prefix="pjrtkit-library-") as scratch:
        Path(scratch, "pjrtkit_library_config.h").write_text(_config_header(backend))
        built = Path(scratch, target.name)
        command = [*compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
                   f"-I{sysconfig.get_paths()['include']}", f"-I{scratch}", str(ENTRY_SOURCE),
                   "-o", str(built), "-Wl,-z,defs", "-ldl", "-lpthread"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise FailedPrecondition(f"compiling {target.name} failed ({' '.join(command)}):\n"
                                     f"{done.stderr.strip()}")
        shutil.move(built, target)
    return target
