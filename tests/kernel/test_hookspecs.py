"""Meta-tests (datasette style): every kernel hook is documented and has a test."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from kernel import hookspecs

TESTS = Path(__file__).resolve().parents[1]
SPECS = sorted(
    name for name, obj in vars(hookspecs).items() if name.startswith("trocket_") and inspect.isfunction(obj)
)


def test_there_are_hookspecs():
    assert len(SPECS) >= 15


def _test_names() -> set[str]:
    names = set()
    for path in TESTS.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


@pytest.mark.parametrize("name", SPECS)
def test_every_hookspec_has_a_reference_docstring(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert len(doc.splitlines()[0]) > 20, f"{name} needs a one-line summary"
    for trailer in ("Firstresult:", "Colour:", "Since:"):
        assert trailer in doc, f"{name} docstring lacks {trailer}"
    params = [p for p in inspect.signature(getattr(hookspecs, name)).parameters]
    for param in params:
        assert f":param {param}:" in doc, f"{name} does not document {param}"


@pytest.mark.parametrize("name", SPECS)
def test_every_hookspec_has_a_test(name):
    assert f"test_hook_{name}" in _test_names(), f"write test_hook_{name}"


@pytest.mark.parametrize("name", SPECS)
def test_every_hookspec_is_in_the_plugin_author_guide(name):
    guide = (TESTS.parent / "docs" / "plugin-authors.md").read_text()
    assert name in guide, f"docs/plugin-authors.md does not mention {name}"
