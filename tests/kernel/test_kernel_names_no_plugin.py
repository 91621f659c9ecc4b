"""The kernel knows no plugin by name (issue 22): it neither imports a built-in plugin nor
names one in code. Docstrings and comments may mention them (they explain, they do not bind);
the names a broker loads by default come from the CLI (``trocket.cli.defaults``)."""

from __future__ import annotations

import ast
from pathlib import Path

from kernel.config.broker import ROLES
from kernel.plugin import available_plugins

KERNEL = Path(__file__).resolve().parents[2] / "kernel"


def _built_in_plugins() -> set[str]:
    """Entry-point names of the plugins shipped in ``plugins/``, less the role names: a role
    (``namesrv``) is the kernel's own concept, and the plugin serving it is named after it."""
    shipped = {name for name, module in available_plugins().items() if module.startswith("plugins.")}
    return shipped - set(ROLES)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function, attribute)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for statement in body:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                found.add(id(statement.value))
    return found


def _offences(path: Path, names: set[str], root: Path = KERNEL.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = _docstrings(tree)
    where = path.relative_to(root)
    offences = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            modules = []
        offences += [f"{where}:{node.lineno} imports {m}" for m in modules if m.split(".")[0] == "plugins"]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if text in names or text.startswith("plugins."):
                offences.append(f"{where}:{node.lineno} names plugin {text!r}")
    return offences


def test_the_built_in_plugins_are_known_to_this_test():
    assert {"store_mmap", "flush_sync", "flush_async", "retry_dlq", "ha"} <= _built_in_plugins()


def test_no_kernel_module_imports_or_names_a_built_in_plugin():
    names = _built_in_plugins()
    offences = [o for path in sorted(KERNEL.rglob("*.py")) for o in _offences(path, names)]
    assert offences == []


def test_the_check_sees_a_plugin_named_in_code(tmp_path):
    """The scan itself can fail: code naming a plugin is reported, its docstring is not."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""Mentions store_mmap."""\nfrom plugins.ha import x\nDEFAULT = ("store_mmap",)\n')
    assert _offences(sample, _built_in_plugins(), root=tmp_path) == [
        "sample.py:2 imports plugins.ha",
        "sample.py:3 names plugin 'store_mmap'",
    ]
