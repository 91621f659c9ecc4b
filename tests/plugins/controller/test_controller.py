"""The controller against a real etcd: RocketMQ 5's controller requests over TCP, elections by
lease expiry, and two controllers sharing one etcd (either answers; one scans, and when it is
SIGKILLed the other takes over)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
import trio

from tests.network.conftest import free_port
from tests.plugins.controller.etcd_cluster import EtcdCluster, etcd_cluster
from tests.plugins.ha.processes import Process
from tests.support import start_logged
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

SET = "broker-a"


TEST_TIMINGS = 'heartbeat_timeout = "2s"\nscan_interval = "200ms"\nlease_ttl = "2s"'
"""Shorter than the defaults so tests fail over in about 3 s (the benchmark uses the defaults)."""


def start_controller(
    root: Path,
    name: str,
    etcd: EtcdCluster,
    timings: str = TEST_TIMINGS,
    port: int = 0,
    *,
    plugins: tuple[str, ...] = (),
    tables: str = "",
) -> Process:
    """A ``trocket controller`` process (``port``: a given one, to restart it in place;
    ``plugins`` beside the controller's, ``tables`` appended to the config)."""
    port = port or free_port()
    config = root / f"{name}.toml"
    config.write_text(
        f"""
[broker]
plugins = {json.dumps(["controller", *plugins])}
data_dir = "{root / name}"

[controller]
listen_port = {port}
etcd_endpoints = {json.dumps(etcd.endpoints)}
{timings}
{tables}
"""
    )
    log = root / f"{name}.log"
    process = Process(name, start_logged(name, ["controller", "-c", str(config)], log), log)
    process.addr = f"127.0.0.1:{port}"
    return process


@pytest.fixture
def etcd(tmp_path: Path):
    with etcd_cluster(tmp_path) as cluster:
        yield cluster


async def call(
    client: RemotingClient, controller: str, code: int, ext: dict, body: bytes = b""
) -> RemotingCommand:
    return await client.invoke(controller, RemotingCommand.request(code, ext, body), 5)


async def register(client: RemotingClient, controller: str, broker_id: int) -> RemotingCommand:
    return await call(
        client,
        controller,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        {
            "clusterName": "C",
            "brokerName": SET,
            "brokerId": broker_id,
            "brokerAddress": f"127.0.0.1:{20000 + broker_id}",
            "haAddress": f"127.0.0.1:{30000 + broker_id}",
        },
    )


async def heartbeat(client: RemotingClient, controller: str, broker_id: int, lease: str, offset: int = 0):
    return await call(
        client,
        controller,
        RequestCode.BROKER_HEARTBEAT,
        {
            "clusterName": "C",
            "brokerName": SET,
            "brokerId": broker_id,
            "brokerAddr": f"127.0.0.1:{20000 + broker_id}",
            "leaseId": lease,
            "maxOffset": offset,
        },
    )


async def replica_info(client: RemotingClient, controller: str) -> tuple[dict, dict]:
    response = await call(client, controller, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": SET})
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response.ext, orjson.loads(response.body)


async def test_register_elect_alter_and_failover_by_lease(tmp_path: Path, etcd: EtcdCluster):
    first = start_controller(tmp_path, "c1", etcd)
    second = start_controller(tmp_path, "c2", etcd)
    try:
        async with RemotingClient.open() as client:
            one = await register(client, first.addr, 1)
            assert one.code == ResponseCode.SUCCESS, one.remark
            assert one.ext["masterBrokerId"] == "1" and one.ext["masterEpoch"] == "1"
            two = await register(client, second.addr, 2)
            assert two.ext["masterBrokerId"] == "1", "a live master is kept"
            assert two.ext["masterHaAddress"] == "127.0.0.1:30001"
            leases = {1: one.ext["leaseId"], 2: two.ext["leaseId"]}

            # The master grows its SyncStateSet; a stale epoch is fenced.
            body = orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
            header = {"brokerName": SET, "masterBrokerId": 1, "masterEpoch": 1}
            altered = await call(
                client, second.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body
            )
            assert altered.code == ResponseCode.SUCCESS, altered.remark
            assert orjson.loads(altered.body) == {"syncStateSet": [1, 2], "syncStateSetEpoch": 2}
            stale = await call(client, first.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body)
            assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
            wrong = await call(
                client,
                first.addr,
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {**header, "masterEpoch": 0},
                orjson.dumps({"syncStateSet": [1], "syncStateSetEpoch": 2}),
            )
            assert wrong.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH

            # Only broker 2 keeps heartbeating: broker 1's lease expires and 2 is elected.
            still = await call(
                client,
                first.addr,
                RequestCode.CONTROLLER_ELECT_MASTER,
                {"clusterName": "C", "brokerName": SET},
            )
            assert still.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
            with trio.fail_after(15):
                while True:
                    answer = await heartbeat(client, first.addr, 2, leases[2], offset=100)
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                    if answer.ext["masterBrokerId"] == "2":
                        break
                    await trio.sleep(0.3)
            ext, sync = await replica_info(client, second.addr)
            assert ext["masterEpoch"] == "2" and ext["masterAddress"] == "127.0.0.1:20002"
            assert sync == {"syncStateSet": [2], "syncStateSetEpoch": 3}

            # Broker 1's lease is gone: its heartbeat asks it to register again.
            late = await heartbeat(client, first.addr, 1, leases[1])
            assert late.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED

            data = await call(
                client, first.addr, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, b'["broker-a"]'
            )
            table = orjson.loads(data.body)["replicasInfoTable"][SET]
            assert [r["brokerId"] for r in table["inSyncReplicas"]] == [2]
            assert [(r["brokerId"], r["alive"]) for r in table["notInSyncReplicas"]] == [(1, False)]

            meta = await call(client, first.addr, RequestCode.CONTROLLER_GET_METADATA_INFO, {})
            assert meta.code == ResponseCode.SUCCESS
            leader_addr = meta.ext["controllerLeaderAddress"]
            assert leader_addr in (first.addr, second.addr)
            assert len(meta.ext["peers"].split(";")) == 2

            # Broker 1 registers again and master 2 takes it into its SyncStateSet. Then the
            # leading controller is SIGKILLed: the other takes the scan over and elects broker 1
            # when broker 2 stops heartbeating.
            again = await register(client, first.addr, 1)
            assert again.code == ResponseCode.SUCCESS and again.ext["masterBrokerId"] == "2"
            grown = await call(
                client,
                first.addr,
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {"brokerName": SET, "masterBrokerId": 2, "masterEpoch": 2},
                orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 3}),
            )
            assert grown.code == ResponseCode.SUCCESS, grown.remark
            leader, other = (first, second) if leader_addr == first.addr else (second, first)
            leader.kill()
            with trio.fail_after(20):
                while True:
                    answer = await heartbeat(client, other.addr, 1, again.ext["leaseId"], offset=200)
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                    if answer.ext["masterBrokerId"] == "1":
                        break
                    await trio.sleep(0.3)
            meta = await call(client, other.addr, RequestCode.CONTROLLER_GET_METADATA_INFO, {})
            assert meta.ext["controllerLeaderAddress"] == other.addr
    finally:
        first.stop()
        second.stop()
    assert "elected master 2" in first.text() + second.text()
