"""Small helpers shared by test modules."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(directory: Path, name: str, text: str) -> Path:
    """Write a dedented config file and return its path."""
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path
