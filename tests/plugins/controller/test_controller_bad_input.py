"""The controller's port under bad input (issue 40, item 4), against a `trocket controller`
process and a real etcd: a broker set named ``pzneg/evil`` once made the dead master of set
``pzneg`` count as alive (no failover), every registered set was kept forever with no way to
remove it, huge numbers answered SYSTEM_ERROR with a traceback, and with ACL on the port took
unsigned requests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import trio

from plugins.controller.etcd import EtcdClient
from plugins.controller.state import BrokerLive
from tests.interop.conftest import subprocess_env
from tests.plugins.controller.etcd_cluster import EtcdCluster, etcd_cluster
from tests.plugins.controller.test_controller import TEST_TIMINGS, call, start_controller
from wire.remoting import RemotingClient, RequestCode, ResponseCode
from wire.remoting.signature import SessionCredentials

PREFIX = "/trocket/controller"
ADMIN = SessionCredentials("admin-key", "admin-secret")
READER = SessionCredentials("reader-key", "reader-secret")
ACL = """
accounts:
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
  - accessKey: reader-key
    secretKey: reader-secret
"""


@pytest.fixture
def etcd(tmp_path: Path):
    with etcd_cluster(tmp_path) as cluster:
        yield cluster


def _register_ext(name: str, broker_id: int | str = 1) -> dict[str, object]:
    return {
        "clusterName": "C",
        "brokerName": name,
        "brokerId": broker_id,
        "brokerAddress": f"127.0.0.1:{20000 + (broker_id if isinstance(broker_id, int) else 0)}",
        "haAddress": "127.0.0.1:30001",
    }


async def _register(client: RemotingClient, controller: str, name: str, broker_id: int | str = 1):
    return await call(
        client, controller, RequestCode.CONTROLLER_REGISTER_BROKER, _register_ext(name, broker_id)
    )


async def _sync_state(client: RemotingClient, controller: str, names: list[str]) -> dict:
    data = await call(client, controller, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, orjson.dumps(names))
    assert data.code == ResponseCode.SUCCESS, data.remark
    return orjson.loads(data.body)["replicasInfoTable"]


async def _master_alive(client: RemotingClient, controller: str, name: str) -> bool:
    return bool((await _sync_state(client, controller, [name]))[name]["inSyncReplicas"][0]["alive"])


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", "admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )


async def test_names_and_numbers_are_checked_and_keys_read_exactly(tmp_path: Path, etcd: EtcdCluster):
    controller = start_controller(tmp_path, "c1", etcd)
    try:
        async with RemotingClient.open() as client:
            for name in ("pzneg/evil", "a\0b", "a\nb", "x" * 200, "../x"):
                refused = await _register(client, controller.addr, name)
                assert refused.code == ResponseCode.CONTROLLER_INVALID_REQUEST, name
                assert "the broker name" in refused.remark
            for broker_id in (10**30, "-" + "9" * 30):
                refused = await _register(client, controller.addr, "pzneg", broker_id)
                assert refused.code == ResponseCode.CONTROLLER_INVALID_REQUEST
                assert "is not a long" in refused.remark
            for body in (b"5", b'"pzneg"', b'{"a": 1}', b"[1]"):
                bad = await call(
                    client, controller.addr, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, body
                )
                assert bad.code == ResponseCode.CONTROLLER_INVALID_REQUEST, body
                assert bad.remark == "body must be a JSON list of broker names"

            # pzneg's master registers, then dies (no heartbeats): its lease expires.
            assert (await _register(client, controller.addr, "pzneg")).code == ResponseCode.SUCCESS
            with trio.fail_after(15):
                while await _master_alive(client, controller.addr, "pzneg"):  # noqa: ASYNC110 - polls etcd
                    await trio.sleep(0.2)
            # A key shaped like a replica of pzneg, written before names were checked, does not
            # bring its dead master back.
            async with EtcdClient(etcd.endpoints) as store:
                lease = await store.grant(30)
                junk = BrokerLive(1, "127.0.0.1:1").to_json()
                await store.put(f"{PREFIX}/alive/pzneg/evil/1", junk, lease=lease)
            await trio.sleep(1)  # several scans
            table = await _sync_state(client, controller.addr, ["pzneg"])
            assert table["pzneg"]["inSyncReplicas"][0]["alive"] is False
    finally:
        controller.stop()
    text = controller.text()
    assert "pzneg has a master again" not in text and "Traceback" not in text


async def test_broker_sets_are_bounded_and_clean_broker_metadata_removes_them(
    tmp_path: Path, etcd: EtcdCluster
):
    controller = start_controller(tmp_path, "c1", etcd, TEST_TIMINGS + "\nmax_broker_sets = 3")
    try:
        async with RemotingClient.open() as client:
            for name in ("s1", "s2", "s3"):
                assert (await _register(client, controller.addr, name)).code == ResponseCode.SUCCESS
            full = await _register(client, controller.addr, "s4")
            assert full.code == ResponseCode.CONTROLLER_INVALID_REQUEST
            assert "max_broker_sets" in full.remark and "cleanBrokerMetadata" in full.remark

            alive = _admin("cleanBrokerMetadata", "-a", controller.addr, "-bn", "s1")
            assert alive.returncode != 0 and "are alive" in alive.stderr, alive.stderr
            done = _admin("cleanBrokerMetadata", "-a", controller.addr, "-bn", "s1", "-l")
            assert done.returncode == 0, done.stderr
            assert "s1" not in await _sync_state(client, controller.addr, [])
            assert (await _register(client, controller.addr, "s4")).code == ResponseCode.SUCCESS

            # One replica of a set: the set stays, without it.
            assert (await _register(client, controller.addr, "s2", 2)).code == ResponseCode.SUCCESS
            one = _admin("cleanBrokerMetadata", "-a", controller.addr, "-bn", "s2", "-b", "2", "-l")
            assert one.returncode == 0, one.stderr
            replicas = (await _sync_state(client, controller.addr, ["s2"]))["s2"]
            assert [r["brokerId"] for r in replicas["inSyncReplicas"] + replicas["notInSyncReplicas"]] == [1]
            missing = _admin("cleanBrokerMetadata", "-a", controller.addr, "-bn", "nothing")
            assert missing.returncode != 0 and "no broker set 'nothing'" in missing.stderr
    finally:
        controller.stop()
    assert "broker set 's1' removed (cleanBrokerMetadata)" in controller.text()


async def test_with_acl_on_controller_requests_are_signed_and_elections_need_an_admin(
    tmp_path: Path, etcd: EtcdCluster
):
    (tmp_path / "plain_acl.yml").write_text(ACL)
    tables = f'[acl]\nplain_acl_file = "{tmp_path / "plain_acl.yml"}"\n'
    controller = start_controller(tmp_path, "c1", etcd, plugins=("acl",), tables=tables)
    try:
        async with RemotingClient.open() as unsigned:
            refused = await _register(unsigned, controller.addr, "secure")
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "not signed" in refused.remark
        async with RemotingClient.open(credentials=READER) as reader:
            assert (await _register(reader, controller.addr, "secure")).code == ResponseCode.SUCCESS
            elect = await call(
                reader,
                controller.addr,
                RequestCode.CONTROLLER_ELECT_MASTER,
                {"clusterName": "C", "brokerName": "secure", "brokerId": 1, "designateElect": True},
            )
            assert elect.code == ResponseCode.NO_PERMISSION and "Need admin permission" in elect.remark
        async with RemotingClient.open(credentials=ADMIN) as admin:
            clean = await call(
                admin,
                controller.addr,
                RequestCode.CLEAN_BROKER_DATA,
                {"brokerName": "secure", "isCleanLivingBroker": True},
            )
            assert clean.code == ResponseCode.SUCCESS, clean.remark
    finally:
        controller.stop()
