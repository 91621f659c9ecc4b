"""The CLI as people expect it: ``--version``, and what the machine refuses (a port in use, a
path without permission) as one line with exit status 2, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.network.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def trocket(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_version_prints_the_version_the_python_and_the_codec():
    for args in (["--version"], ["version"]):
        result = trocket(*args)
        assert result.returncode == 0, result.stderr
        line = result.stdout.strip()
        assert line.startswith("trocket 0.1.0 (Python 3.") and "batch codec: " in line
        assert "\n" not in line


def config(tmp_path: Path, namesrv_port: int, data_dir: str | None = None) -> Path:
    path = tmp_path / "trocket.toml"
    path.write_text(
        f'[broker]\ndata_dir = "{data_dir or tmp_path / "data"}"\nlisten_port = {free_port()}\n'
        f'namesrv_addr = ["127.0.0.1:{namesrv_port}"]\n[namesrv]\nlisten_port = {namesrv_port}\n'
    )
    return path


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = trocket("up", "-c", str(config(tmp_path, port)))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("trocket: error:")]
    assert "port" in line and f"127.0.0.1:{port}" in line


def test_a_data_directory_without_permission_is_one_line_and_exit_2(tmp_path):
    result = trocket("up", "-c", str(config(tmp_path, free_port(), data_dir="/sys/trocket-cannot-write")))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("trocket: error:")]
    assert "permission denied" in line and "/sys/trocket-cannot-write" in line
