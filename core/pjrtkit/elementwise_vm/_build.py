"""cffi build script for ``pjrtkit.elementwise_vm._vm_cffi`` (out-of-line API mode).

Wired through ``setup.py`` (``cffi_modules``). To rebuild in place without pip::

    .venv/bin/python core/pjrtkit/elementwise_vm/_build.py

The C loops are generated from ``spellings.TABLE`` (one ``case`` per operation, operand dtype
and result dtype); ``vm.c`` is the interpreter around them. ``float32_source.h`` holds the
shared float32 functions as C, generated from their expressions (``program.float32_c_source``,
committed because this script runs before pjrtkit's dependencies are importable).
"""
from __future__ import annotations

import importlib.util
import pathlib
import sysconfig

import cffi

HERE = pathlib.Path(__file__).resolve().parent


def _spellings():
    # by path: at build time pjrtkit's dependencies (numpy) need not be importable
    spec = importlib.util.spec_from_file_location("_vm_spellings", HERE / "spellings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPELLINGS = _spellings()
# program.py's VERSION and MAX_REGISTERS (a test checks they agree: lib.VM_VERSION, ...)
VERSION = 1
MAX_REGISTERS = 96


def _case(op: str, typed: str, out: str, operands: tuple, expression: str) -> str:
    ctype, unsigned, signed, bits = SPELLINGS.CTYPES[typed]
    key = SPELLINGS.case_key(op, typed, out)
    out_type = SPELLINGS.CTYPES[out][0]
    if expression == "BITCAST":
        return f"    case {key}: memcpy(d, x0, (size_t)m * sizeof({out_type})); return 0;"
    names = "abc"
    reads = " ".join(f"const {SPELLINGS.CTYPES[t][0]} {names[i]} = "
                     f"((const {SPELLINGS.CTYPES[t][0]}*)x{i})[k];"
                     for i, t in enumerate(operands))
    return (f"    case {key}: {{\n"
            f"#define T {out_type}\n#define U {unsigned}\n#define S {signed}\n#define BITS {bits}\n"
            f"        T* out = (T*)d;\n"
            f"        for (int64_t k = 0; k < m; k++) {{ {reads} out[k] = (T)({expression}); }}\n"
            f"#undef T\n#undef U\n#undef S\n#undef BITS\n"
            f"        return 0;\n    }}")


def _apply_source() -> str:
    cases = "\n".join(_case(*row) for row in SPELLINGS.TABLE)
    sizes = ", ".join(str(SPELLINGS.CTYPES[name][3] // 8) for name in SPELLINGS.DTYPES)
    return f"""
#define VM_VERSION {VERSION}
#define VM_MAX_REGISTERS {MAX_REGISTERS}
#define VM_DTYPES {len(SPELLINGS.DTYPES)}
static const int64_t vm_dtype_size[VM_DTYPES] = {{ {sizes} }};

static int vm_apply(int64_t key, void* d, const void* x0, const void* x1, const void* x2,
                    int64_t m) {{
    (void)x1; (void)x2;
    switch (key) {{
{cases}
    default: return 5;
    }}
}}
"""


CDEF = """
int pjrtkit_vm_run(void* const* arguments, void* const* outputs, void* context);
int pjrtkit_vm_forward(void* const* arguments, void* const* outputs, void* context);
void pjrtkit_vm_cell_store(uint64_t* cell, uint64_t pair);
#define VM_VERSION ...
#define VM_MAX_REGISTERS ...
"""

SOURCE = ("#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
          + (HERE / "float32_source.h").read_text() + _apply_source()
          + (HERE / "vm.c").read_text())

ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
# -ffp-contract=off: every operation rounds as its spelling says (the VM's multiply-add is its
# own operation); no -ffast-math: NaN, infinities and signed zeros are the semantics'.
ffibuilder.set_source("pjrtkit.elementwise_vm._vm_cffi", SOURCE, py_limited_api=False,
                      libraries=["m"], extra_compile_args=["-O2", "-ffp-contract=off",
                                                           "-fno-fast-math"])

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=str(HERE.parent.parent),
                       target="_vm_cffi" + sysconfig.get_config_var("EXT_SUFFIX"), verbose=False)
