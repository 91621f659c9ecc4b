"""The shipped two-machine configs check out, and ``trocket up --ha`` runs a working pair on
loopback as a newcomer starts it (issue 16)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_up import REPO
from tests.support import start_trocket

CONFIGS = sorted((REPO / "conf").glob("2m-2s-*/*.properties"))
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def trocket(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=ENV
    )


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_check_out_with_their_role(path):
    result = trocket("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    if path.stem.endswith("-s"):
        expected = "role=SLAVE"
    else:
        expected = "role=SYNC_MASTER" if path.parent.name.endswith("-sync") else "role=ASYNC_MASTER"
    assert expected in result.stdout and "replicator: ha" in result.stdout


def test_there_are_sync_and_async_pairs():
    assert {p.parent.name for p in CONFIGS} == {"2m-2s-sync", "2m-2s-async"} and len(CONFIGS) == 8


def test_up_ha_runs_a_master_and_a_slave_that_replicates(tmp_path):
    process, lines = start_trocket("up", "--ha", "sync", cwd=tmp_path)
    try:
        assert any("role=SYNC_MASTER" in line for line in lines) and any(
            "role=SLAVE" in line for line in lines
        )
        rows = json.loads(trocket("admin", "clusterList", "--json").stdout)
        assert sorted((row["#BID"], row["#Role"]) for row in rows) == [(0, "SYNC_MASTER"), (1, "SLAVE")]
        for _ in range(100):
            status = json.loads(trocket("admin", "haStatus", "-b", "127.0.0.1:10911", "--json").stdout)
            if status and status[0]["#In Sync"] is True:
                break
        sent = trocket("produce", "-t", "UpHa", "-b", "hello {i}", "-c", "5")
        assert sent.returncode == 0 and sent.stdout.count("SEND_OK") == 5, sent.stdout + sent.stderr
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and "stopped cleanly" in rest
    assert (tmp_path / "data" / "master" / "commitlog").is_dir()
    assert (tmp_path / "data" / "slave" / "commitlog").is_dir()
