"""`trocket up --ha auto`: a local etcd, a controller and three replicas; a send succeeds and
the controller names a master. Without etcd it says what to install."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.plugins.controller.etcd_cluster import require_etcd

REPO = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def trocket(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", *args], capture_output=True, text=True, timeout=60, env=ENV
    )


def test_up_ha_auto_elects_a_master_and_takes_messages(tmp_path: Path):
    require_etcd()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trocket",
            "up",
            "--ha",
            "auto",
            "--metrics-port",
            "-1",
            "--console-port",
            "-1",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )
    assert process.stdout is not None
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("ready") or len(lines) > 500:
                break
        output = "".join(lines)
        assert "etcd: http://127.0.0.1:2379" in output, output
        assert output.count("broker: DefaultCluster/broker-a id=") == 3
        deadline = time.monotonic() + 60
        while True:
            rows = trocket("admin", "getSyncStateSet", "-a", "127.0.0.1:9878", "--json")
            masters = (
                [r for r in json.loads(rows.stdout or "[]") if r["#Master"]] if rows.returncode == 0 else []
            )
            if masters:
                break
            assert time.monotonic() < deadline, rows.stderr
            time.sleep(0.5)
        sent = trocket("produce", "-t", "AutoTopic", "-b", "hello", "--json")
        while sent.returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            sent = trocket("produce", "-t", "AutoTopic", "-b", "hello", "--json")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "SEND_OK" in sent.stdout
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    assert (tmp_path / "data" / "etcd" / "data").is_dir()
    assert (tmp_path / "data" / "replica1" / "epochFileCheckpoint").exists() or (
        tmp_path / "data" / "replica2" / "epochFileCheckpoint"
    ).exists()


def test_up_ha_auto_without_etcd_says_what_to_install(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "trocket", "up", "--ha", "auto"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV, "PATH": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "apt-get install etcd-server" in result.stderr
