"""``wire`` is the lowest floor (issue 35, item 0): the kernel, the plugins and the SDK import it,
and it imports none of them, so a client, a tool or a proxy speaks RocketMQ without a broker."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import wire

UPPER_FLOORS = ("kernel", "plugins", "trocket", "pyspark_trocket")


def _imported_modules(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".pyx":  # Cython: its Python-level imports are plain lines
        return {m.group(1) for m in re.finditer(r"^\s*(?:from|import)\s+([\w.]+)", text, flags=re.M)}
    tree = ast.parse(text, filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_wire_module_names_an_upper_floor():
    root = Path(wire.__file__).parent
    offences = [
        f"{path.relative_to(root.parent)} imports {module}"
        for path in sorted([*root.rglob("*.py"), *root.rglob("*.pyx")])
        for module in sorted(_imported_modules(path))
        if module.split(".")[0] in UPPER_FLOORS
    ]
    assert offences == []


def test_importing_every_wire_module_loads_no_upper_floor():
    """In a fresh interpreter: the AST check above, as the import system sees it."""
    script = (
        "import importlib, pkgutil, sys, wire\n"
        "for info in pkgutil.walk_packages(wire.__path__, 'wire.'):\n"
        "    importlib.import_module(info.name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {UPPER_FLOORS!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_wire_module_imports():
    for info in pkgutil.walk_packages(wire.__path__, "wire."):
        importlib.import_module(info.name)
