"""`trocket up` as a newcomer runs it: from an empty directory, Ctrl-C to stop."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from tests.network.conftest import free_port
from tests.support import start_logged
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb

REPO = Path(__file__).resolve().parents[2]


def start_up(cwd: Path) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "trocket", "up"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("ready"):
            return process, lines
    process.kill()
    process.communicate()
    raise AssertionError("trocket up did not become ready:\n" + "".join(lines))


def test_up_serves_a_namesrv_and_a_broker_on_the_default_loopback_ports(tmp_path):
    process, lines = start_up(tmp_path)
    output = "".join(lines)
    assert "roles: broker, namesrv" in output
    assert f"data dir: {tmp_path / 'data'}" in output
    assert "store: mmap" in output and "flush: async" in output
    assert "not available" not in output
    assert "reserved at start 72.0 MiB" in output, "the embedded default says what it allocates"
    clusters = subprocess.run(
        [sys.executable, "-m", "trocket", "admin", "clusterList", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert clusters.returncode == 0, clusters.stderr
    assert '"#Addr": "127.0.0.1:10911"' in clusters.stdout, "the broker registered with 127.0.0.1:9876"
    assert "metrics: http://127.0.0.1:5557/metrics\n" in output, "up serves metrics on RocketMQ 5's port"
    with urllib.request.urlopen("http://127.0.0.1:5557/metrics", timeout=10) as response:
        scraped = response.read().decode()
    asked = [line for line in scraped.splitlines() if line.startswith("rocketmq_rpc_latency_count")]
    assert any('node_type="nameserver"' in line and 'request_code="106"' in line for line in asked), asked
    assert "grpc: 127.0.0.1:8081\n" in output, "up serves RocketMQ 5's gRPC on the proxy's port"
    with grpc.insecure_channel("127.0.0.1:8081") as channel:
        route = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=spb.QueryRouteRequest.SerializeToString,
            response_deserializer=spb.QueryRouteResponse.FromString,
        )(
            spb.QueryRouteRequest(topic=pb.Resource(name="TBW102")),
            metadata=[("x-mq-client-id", "t@1")],
            timeout=10,
        )
    assert route.status.code == pb.OK and route.message_queues[0].broker.endpoints.addresses[0].port == 8081
    assert (tmp_path / "data" / "abort").exists() and (tmp_path / "data" / "commitlog").is_dir()
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    assert "stopped cleanly" in rest
    assert not (tmp_path / "data" / "abort").exists()
    allocated = sum(p.stat().st_blocks * 512 for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert allocated < 100 * 2**20, f"the embedded default allocated {allocated >> 20} MiB"


def test_a_config_file_keeps_rocketmq_file_sizes(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text("[broker]\n")
    result = subprocess.run(
        [sys.executable, "-m", "trocket", "config", "check", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert "commit log file 1024.0 MiB" in result.stdout and "index file 400.5 MiB" in result.stdout


def test_a_second_up_on_the_same_data_dir_is_refused_in_one_line(tmp_path):
    first, _ = start_up(tmp_path)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "trocket", "up"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )
        assert second.returncode == 2
        errors = [line for line in second.stderr.splitlines() if line.startswith("trocket: error:")]
        assert len(errors) == 1 and "another broker is using this store directory" in errors[0]
        assert "Traceback" not in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0


@pytest.mark.parametrize(
    ("host", "acl", "warned"),
    [("0.0.0.0", False, True), ("0.0.0.0", True, False), ("127.0.0.1", False, False)],
)
def test_up_warns_when_it_opens_a_port_beyond_loopback_with_acl_off(tmp_path, host, acl, warned):
    if acl:
        (tmp_path / "plain_acl.yml").write_text("accounts: []\n")
    config = tmp_path / "broker.properties"
    config.write_text(
        f"brokerIP1={host}\nlistenPort={free_port()}\nnamesrvAddr=127.0.0.1:{free_port()}\n"
        f"storePathRootDir={tmp_path / 'data'}\nmapedFileSizeCommitLog=16777216\n"
        + ("aclEnable=true\n" if acl else "")
    )
    log = tmp_path / "up.log"
    process = start_logged("broker", ["broker", "-c", str(config)], log)
    try:
        text = log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert ("WARNING: the broker listens on 0.0.0.0, beyond this machine, with ACL off" in text) is warned, (
        text
    )
