"""Small helpers shared by test modules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write(directory: Path, name: str, text: str) -> Path:
    """Write a dedented config file and return its path."""
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def start_trocket(*args: str, cwd: Path | None = None) -> tuple[subprocess.Popen[str], list[str]]:
    """``python -m trocket ARGS`` with its output piped; returns once it printed ``ready`` (or
    ended, or printed 500 lines), with the lines read so far."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trocket", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("ready") or len(lines) > 500:
            break
    return process, lines
