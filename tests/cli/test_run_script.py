"""``./run`` works from any directory and resolves the caller's relative paths (issue 23:
``./run trocket produce -f ../lines.txt`` looked for the file next to the repository)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_relative_paths_are_the_callers(tmp_path):
    (tmp_path / "broker.toml").write_text('[broker]\nbroker_name = "broker-relative"\n')
    caller = tmp_path / "elsewhere"
    caller.mkdir()
    result = subprocess.run(
        [str(REPO / "run"), "trocket", "config", "check", "../broker.toml"],
        cwd=caller,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stderr
    assert "../broker.toml: OK" in result.stdout and "broker-relative" in result.stdout


def test_without_a_command_it_prints_its_usage():
    result = subprocess.run([str(REPO / "run")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "./run tests" in result.stdout
