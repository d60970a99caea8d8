"""Meta-tests of the hook contract (datasette's test_docs style): every hook is documented as
a contract and has a test that names it. A new hook without both fails the build."""
import inspect
import pathlib
import re

import pytest

from pjrtkit import hookspecs

HOOKS = sorted(name for name, fn in vars(hookspecs).items()
               if name.startswith("pjrtkit_") and inspect.isfunction(fn))
TESTS = pathlib.Path(__file__).parent
PLUGIN_TESTS = TESTS.parent / "plugins"


def test_there_are_hooks():
    assert {"pjrtkit_compile", "pjrtkit_capabilities", "pjrtkit_client_topology",
            "pjrtkit_make_topology", "pjrtkit_transfer_to_device"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented_as_a_contract(hook):
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert len(doc.splitlines()[0]) > 10, f"{hook}: no summary line"
    for section in ("Returns:", "firstresult:", "Example::"):
        assert section in doc, f"{hook}: docstring lacks {section!r}"
    assert "Raises:" in doc or "Args:" in doc, f"{hook}: docstring lacks Args/Raises"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_test(hook):
    own = pathlib.Path(__file__).resolve()
    sources = [p for p in [*TESTS.rglob("test_*.py"), *PLUGIN_TESTS.rglob("test_*.py")]
               if p.resolve() != own]
    assert any(re.search(rf"\b{hook}\b", p.read_text()) for p in sources), (
        f"no test mentions {hook}; add one under tests/")


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_reachable_through_the_facade(hook):
    from pjrtkit.backend import Backend
    facade = inspect.getsource(Backend)
    assert f'"{hook}"' in facade, f"Backend facade never calls {hook}"
