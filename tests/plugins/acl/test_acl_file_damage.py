"""A damaged ``plain_acl.yml`` costs one log line, never the broker process (issue 40, item 3a):
a stray 0xFF byte or 20,000 levels of nesting once ended a running broker, an empty file was
put in force (every request refused), and at start the same files printed a traceback. Each
against a `trocket up` process with the acl plugin, as an operator edits the file."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.interop.conftest import RunningBroker, start_broker, subprocess_env
from tests.interop.test_official_client_acl import ACL
from trocket.cli.defaults import TROCKET_DEFAULTS

ADMIN = ("--authKey", "operator-key", "--authSecret", "operator-secret")
PLUGINS = "plugins = [" + ", ".join(f'"{name}"' for name in (*TROCKET_DEFAULTS.plugins, "acl")) + "]"
RELOAD = '[acl]\nreload_interval = "100ms"\n'

DAMAGED = {
    "byte 0xFF": b"accounts:\n  - accessKey: operator-key\n    secretKey: s\xff\n",
    "deep nesting": b"accounts: " + b"[" * 20000 + b"]" * 20000 + b"\n",
    "empty file": b"",
    "accounts without a value": b"accounts:\n",
}
PROBLEMS = {
    "byte 0xFF": "not UTF-8 text: byte 0xFF at offset",
    "deep nesting": "nested too deeply",
    "empty file": "the file is empty",
    "accounts without a value": "accounts: missing or without a value",
}


def _wait_for_error(broker: RunningBroker, problem: str) -> dict[str, str]:
    deadline = time.monotonic() + 20
    while True:
        assert broker.process.poll() is None, f"the broker exited:\n{broker.log.read_text()[-3000:]}"
        figures = broker.figures(*ADMIN)
        if problem in figures["aclLastError"]:
            return figures
        if time.monotonic() > deadline:
            raise AssertionError(f"aclLastError is {figures['aclLastError']!r}, not about {problem!r}")
        time.sleep(0.2)


def test_a_damaged_file_rewritten_while_the_broker_runs_keeps_the_last_good_one(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    broker = start_broker(tmp_path, PLUGINS, tables=RELOAD)
    try:
        for name, content in DAMAGED.items():
            acl_file.write_bytes(content)
            figures = _wait_for_error(broker, PROBLEMS[name])
            assert figures["aclAccounts"] == "3", name  # the last good file is in force
            acl_file.write_text(ACL + "\n")  # a good edit in between: the next damage is a change
            deadline = time.monotonic() + 20
            while broker.figures(*ADMIN)["aclLastError"] and time.monotonic() < deadline:
                time.sleep(0.2)
        produced = broker.admin("topicList", *ADMIN)
        assert produced.returncode == 0
        log = broker.log.read_text()
        assert "Traceback" not in log
        assert sum(PROBLEMS["byte 0xFF"] in line for line in log.splitlines()) == 1
    finally:
        broker.stop()


@pytest.mark.parametrize("name", list(DAMAGED))
def test_a_damaged_file_at_start_is_one_clear_error(tmp_path: Path, name: str):
    (tmp_path / "plain_acl.yml").write_bytes(DAMAGED[name])
    config = tmp_path / "trocket.toml"
    config.write_text(f'[broker]\n{PLUGINS}\ndata_dir = "{tmp_path / "data"}"\nlisten_port = 0\n')
    done = subprocess.run(
        [sys.executable, "-m", "trocket", "broker", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert PROBLEMS[name] in output and str(tmp_path / "plain_acl.yml") in output
    assert "Traceback" not in output and "ExceptionGroup" not in output
