"""pjrtkit's own declarations against XLA's published pjrt_c_api.h, checked by the C compiler.

The official header comes from the ``xla-cpu-pjrt`` test dependency (minor 0.81, older than our
0.90). For every struct both declare, the official fields must be a prefix of ours (the ABI only
ever appends) and every shared field must have the same offset and size; shared enumerators
must have the same values. The numbers come from gcc, compiling one generated program twice:
once against each header.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess

import pytest
from pycparser import c_ast, c_parser

OURS = pathlib.Path(__file__).resolve().parents[2] / "core" / "pjrtkit" / "abi" / "pjrt_declarations.h"
STD_TYPES = (
    "typedef unsigned long size_t; typedef long int64_t; typedef int int32_t; typedef unsigned long "
    "uint64_t; typedef long intptr_t; typedef unsigned long uintptr_t; typedef _Bool bool;\n"
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None,
                                reason="gcc is needed to compile the layout check")


def official_header() -> pathlib.Path:
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("xla-cpu-pjrt is not installed; it is a test dependency: pip install -e '.[dev]'")
    header = pathlib.Path(spec.submodule_search_locations[0]) / "include" / "pjrt_c_api.h"
    assert header.is_file(), f"{header} is missing from the xla-cpu-pjrt package"
    return header


def _preprocess(header: pathlib.Path, tmp_path: pathlib.Path) -> str:
    # Drop the system includes so gcc -E leaves only the header's own declarations.
    stripped = tmp_path / f"stripped_{header.name}"
    stripped.write_text("".join(
        line for line in header.read_text().splitlines(keepends=True) if not line.startswith("#include")))
    text = subprocess.run(["gcc", "-E", "-P", "-x", "c", str(stripped)], check=True,
                          capture_output=True, text=True).stdout
    # The struct-traits macro leaves `enum { X_STRUCT_SIZE = offsetof(...) + ... };` behind.
    return re.sub(r"enum \{ \w+_STRUCT_SIZE = [^;]*\};", "", text)


def _declarations(text: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """(struct tag -> field names in order, enumerator -> declared position) from C text."""
    ast = c_parser.CParser().parse(STD_TYPES + text)
    structs: dict[str, list[str]] = {}
    enumerators: dict[str, int] = {}

    class Visitor(c_ast.NodeVisitor):
        def visit_Struct(self, node):
            if node.name and node.decls is not None:
                fields = []
                for decl in node.decls:
                    if decl.name is None and isinstance(decl.type, c_ast.Union):
                        fields += [d.name for d in decl.type.decls]  # anonymous union members
                    else:
                        fields.append(decl.name)
                structs[node.name] = fields
            self.generic_visit(node)

        def visit_Enumerator(self, node):
            enumerators[node.name] = len(enumerators)

    Visitor().visit(ast)
    return structs, enumerators


def _run(program: str, header: pathlib.Path, tmp_path: pathlib.Path, tag: str) -> list[str]:
    source = tmp_path / f"layout_{tag}.c"
    binary = tmp_path / f"layout_{tag}"
    source.write_text(
        "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n"
        f'#include "{header}"\n' + program)
    subprocess.run(["gcc", "-std=c11", "-Wall", "-o", str(binary), str(source)], check=True,
                   capture_output=True, text=True)
    return subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.splitlines()


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layout")
    official = official_header()
    return (official, _declarations(_preprocess(official, tmp)),
            _declarations(_preprocess(OURS, tmp)), tmp)


def test_official_fields_are_a_prefix_of_ours(both):
    _, (theirs, _), (ours, _), _ = both
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"structs in the official header that pjrtkit does not declare: {missing}"
    for name, fields in theirs.items():
        assert ours[name][:len(fields)] == fields, (
            f"struct {name}: official fields {fields} are not a prefix of ours {ours[name]}")


def test_shared_fields_have_the_same_offsets_and_sizes(both):
    official, (theirs, their_enums), (ours, our_enums), tmp = both
    lines = []
    for name, fields in sorted(theirs.items()):
        for field in fields:
            lines.append(f'    printf("{name}.{field} %zu %zu\\n", offsetof(struct {name}, {field}), '
                         f'sizeof(((struct {name}*)0)->{field}));')
        if fields == ours[name]:  # same field list: the whole struct must match too
            lines.append(f'    printf("sizeof {name} %zu\\n", sizeof(struct {name}));')
    shared_enums = sorted(set(their_enums) & set(our_enums))
    lines += [f'    printf("{e} %ld\\n", (long){e});' for e in shared_enums]
    program = "int main(void) {\n" + "\n".join(lines) + "\n    return 0;\n}\n"

    expected = _run(program, official, tmp, "official")
    got = _run(program, OURS, tmp, "ours")
    assert len(expected) > 700, f"suspiciously few checks ({len(expected)})"
    mismatches = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not mismatches, "layout differs from the official header:\n" + "\n".join(
        f"  official {e!r} / ours {g!r}" for e, g in mismatches[:40])
    assert len(expected) == len(got)


def test_api_table_slots_keep_official_order(both):
    _, (theirs, _), (ours, _), _ = both
    official_slots = theirs["PJRT_Api"]
    assert len(official_slots) >= 118 + 3
    assert ours["PJRT_Api"][:len(official_slots)] == official_slots
    assert len(ours["PJRT_Api"]) == 128 + 3  # struct_size, extension_start, version + 128 slots
