"""The wheel installs anywhere (issue 37): built from this checkout, installed into a fresh
virtualenv outside the repository, and then, from a directory that is not the repository and
without PYTHONPATH: `trocket --version` (with the compiled codec), `pip check`, the entry-point
plugins, `trocket up` with metrics and the console, and a produce/consume round trip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.network.conftest import free_port

REPO = Path(__file__).resolve().parents[2]


def run(argv: list[str], *, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, (
        f"{' '.join(argv)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel of this checkout installed; returns its bin/."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)], cwd=root)
    [wheel] = dist.glob("trocket-*.whl")
    run([sys.executable, "-m", "venv", str(root / "venv")], cwd=root)
    bin_dir = root / "venv" / "bin"
    run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        cwd=root,
    )
    return bin_dir


def test_the_wheel_carries_metadata_and_the_compiled_codec(installed: Path, tmp_path: Path):
    assert (
        "No broken requirements found"
        in run([str(installed / "python"), "-m", "pip", "check"], cwd=tmp_path).stdout
    )
    version = run([str(installed / "trocket"), "--version"], cwd=tmp_path).stdout
    assert version.startswith("trocket 0.1.0") and "batch codec: compiled" in version
    where = run(
        [str(installed / "python"), "-c", "import trocket, kernel; print(trocket.__file__)"], cwd=tmp_path
    )
    assert str(REPO) not in where.stdout and "site-packages" in where.stdout
    metadata = run([str(installed / "python"), "-m", "pip", "show", "-v", "trocket"], cwd=tmp_path).stdout
    for field in (
        "License: Apache-2.0",
        "Project-URLs:",
        "Programming Language :: Python :: 3.11",
        "Typing :: Typed",
    ):
        assert field in metadata, metadata
    plugins = run([str(installed / "trocket"), "plugins", "--available"], cwd=tmp_path).stdout
    for name in ("store_mmap", "flush_sync", "ha", "retry_dlq", "pop", "proxy", "console", "metrics"):
        assert name in plugins


def test_trocket_up_from_the_wheel_serves_a_round_trip_metrics_and_the_console(
    installed: Path, tmp_path: Path
):
    namesrv, broker, metrics, console = free_port(), free_port(), free_port(), free_port()
    config = tmp_path / "trocket.toml"
    config.write_text(
        f"""
[broker]
plugins = ["store_mmap", "flush_async", "remoting", "namesrv", "retry_dlq", "pop", "metrics", "console"]
data_dir = "{tmp_path / "data"}"
listen_port = {broker}
namesrv_addr = ["127.0.0.1:{namesrv}"]

[store_mmap]
commit_log_file_size = "16MiB"

[namesrv]
listen_port = {namesrv}

[metrics]
prom_exporter_port = {metrics}

[console]
port = {console}
"""
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    log = tmp_path / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen([str(installed / "trocket"), "up", "-c", str(config)], cwd=tmp_path, stdout=out,
                              stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "ready (Ctrl-C" not in log.read_text():
            assert up.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        address = f"127.0.0.1:{namesrv}"
        trocket = str(installed / "trocket")
        body = "from the wheel {i}"
        sent = run(
            [trocket, "produce", "-n", address, "-t", "WheelTopic", "-b", body, "-c", "3", "--json"],
            cwd=tmp_path,
        )
        assert [json.loads(line)["status"] for line in sent.stdout.splitlines()] == ["SEND_OK"] * 3
        consume = [trocket, "consume", "-n", address, "-g", "CG_wheel", "-t", "WheelTopic", "--from", "first"]
        consumed = run([*consume, "-c", "3", "--json"], cwd=tmp_path)
        assert sorted(json.loads(line)["body"] for line in consumed.stdout.splitlines()) == [
            f"from the wheel {i}" for i in range(3)
        ]
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as answer:
            assert b"rocketmq_messages_in_total" in answer.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{console}/", timeout=10) as answer:
            page = answer.read()
        assert answer.status == 200 and b"<html" in page.lower()
        assert "batch codec: compiled" in log.read_text()  # said at start
    finally:
        up.terminate()
        up.wait(timeout=60)


def test_an_example_plugin_and_the_pytest_plugin_work_from_the_wheel(installed: Path, tmp_path: Path):
    """A plugin author's setup (issue 41): Trocket from the wheel, the example plugins
    installed from their own directories, pytest and pytest-trio; their tests then run there
    against real brokers through the ``trocket`` pytest plugin the wheel registers, and
    ``mypy --strict`` passes on their sources against the wheel's own annotations."""
    pip = [str(installed / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, "pytest>=8", "pytest-trio>=0.8", "mypy>=1.10"], cwd=tmp_path)
    for name in ("acme_guard", "acme_audit"):
        # A copy, as an author's checkout (building it leaves build/ beside its sources).
        package = tmp_path / "packages" / name
        shutil.copytree(
            REPO / "examples" / name, package, ignore=shutil.ignore_patterns("build", "*.egg-info")
        )
        run([*pip, str(package)], cwd=tmp_path)
        # Its tests and pytest settings in a directory of their own: they use the installed plugin.
        copy = tmp_path / name
        shutil.copytree(package / "tests", copy / "tests")
        shutil.copy(package / "pyproject.toml", copy / "pyproject.toml")
        result = run([str(installed / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=copy)
        assert " passed" in result.stdout and "failed" not in result.stdout, result.stdout
        # Typed from outside: the plugin's source against the installed wheel's annotations.
        typed = run([str(installed / "python"), "-m", "mypy", "--strict", name], cwd=package)
        assert "Success: no issues found" in typed.stdout, typed.stdout
    plugins = run([str(installed / "trocket"), "plugins", "--available"], cwd=tmp_path).stdout
    assert "acme_guard" in plugins and "acme_audit" in plugins
