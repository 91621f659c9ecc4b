"""The trocket command as a user runs it: clear output, one-line errors, no tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import write

REPO = Path(__file__).resolve().parents[2]
MEMORY = "kernel.testing.memory_store"


def trocket(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_plugins_shows_hooks_providers_and_the_active_flush_policy(tmp_path):
    config = write(
        tmp_path,
        "b.toml",
        f"""
        [broker]
        plugins = ["{MEMORY}", "flush_sync", "flush_async"]
        store = "memory"
        flush = "sync"
        [flush_sync]
        timeout = "2s"
        """,
    )
    result = trocket("plugins", "-c", str(config))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "flush: sync (group commit" in out and "timeout=2s" in out
    assert "flush_sync (plugins.flush_sync)" in out
    assert "hooks: trocket_config_sections, trocket_register_flush_policies" in out
    assert "flush providers: sync" in out and "flush providers: async" in out
    assert "store providers: memory" in out


def test_swapping_the_flush_policy_is_one_key(tmp_path):
    for policy, shown in (("sync", "timeout=5s"), ("async", "interval=500ms")):
        config = write(
            tmp_path,
            f"{policy}.toml",
            f"""
            [broker]
            plugins = ["{MEMORY}", "flush_sync", "flush_async"]
            store = "memory"
            flush = "{policy}"
            """,
        )
        out = trocket("plugins", "-c", str(config)).stdout
        assert f"flush: {policy} (" in out and shown in out


def test_plugins_available_lists_installed_entry_points():
    result = trocket("plugins", "--available")
    assert result.returncode == 0
    assert "flush_sync" in result.stdout and "plugins.flush_async" in result.stdout


def test_config_check_ok(tmp_path):
    config = write(
        tmp_path,
        "b.toml",
        f"""
        [broker]
        plugins = ["{MEMORY}", "flush_async"]
        store = "memory"
        broker_name = "broker-x"
        [flush_async]
        least_pages = 16
        """,
    )
    result = trocket("config", "check", str(config))
    assert result.returncode == 0, result.stderr
    assert f"{config}: OK" in result.stdout
    assert "DefaultCluster/broker-x" in result.stdout
    assert "[flush_async] (flush_async): interval=0.5, least_pages=16" in result.stdout


def test_config_check_properties_file_reports_ignored_keys(tmp_path):
    config = write(tmp_path, "broker.properties", "flushDiskType=SYNC_FLUSH\nflushIntervalCommitLog=300\n")
    result = trocket("config", "check", str(config))
    assert result.returncode == 0, result.stderr
    assert "flush: sync (group commit" in result.stdout
    assert "note: flushIntervalCommitLog: applies to plugin 'flush_async'" in result.stdout


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("[broker]\nlisten_port = 'abc'\n", "[broker] listen_port: expected an integer"),
        ("[broker]\nplugins = ['no_such_plugin']\n", "unknown plugin 'no_such_plugin'"),
        ("[broker\n", "invalid TOML"),
        (
            f"[broker]\nplugins = ['{MEMORY}', 'flush_async']\nstore = 'memory'\n"
            "[flush_async]\ninterval = 'x'\n",
            "[flush_async] interval: expected a duration",
        ),
    ],
)
def test_broken_config_gives_one_clear_line(tmp_path, body, expected):
    config = write(tmp_path, "bad.toml", body)
    result = trocket("config", "check", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("trocket: error: ") and expected in lines[0]
    assert str(config) in lines[0] or "unknown plugin" in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_properties_file_gives_one_clear_line(tmp_path):
    config = write(tmp_path, "broker.properties", "listenPort=ten\n")
    result = trocket("config", "check", str(config))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"trocket: error: {config}: listenPort: expected an integer, got 'ten' (expected a TCP port)"
    )
