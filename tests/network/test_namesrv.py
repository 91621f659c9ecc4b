"""The NameServer: registrations, routes, expiry, write permission, KV config."""

from __future__ import annotations

import json
import zlib

import trio

from kernel import Broker
from kernel.testing import make_config
from plugins.namesrv.route_table import Registration, RouteTable
from tests.network.conftest import free_port
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from wire.remoting.register_body import decode_register_body, encode_register_body

TOPIC = {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}


def registration(
    addr: str, *, name: str = "b", broker_id: int = 0, version: int = 1, topics=None, state: int = 0
) -> Registration:
    data_version = {"counter": version, "stateVersion": state}
    return Registration("C", addr, name, broker_id, "", data_version, topics or {"T": TOPIC})


def test_route_comes_from_the_master_and_lists_every_address():
    table = RouteTable()
    table.register(registration("m:1"), now=0)
    master, _ = table.register(registration("s:1", broker_id=1, topics={}), now=0)
    assert master == "m:1"
    route = table.route("T")
    assert route["brokerDatas"] == [
        {"brokerAddrs": {"0": "m:1", "1": "s:1"}, "brokerName": "b", "cluster": "C"}
    ]
    assert route["queueDatas"][0] == {
        "brokerName": "b",
        "perm": 6,
        "readQueueNums": 4,
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert table.route("missing") is None


def test_wiped_write_permission_holds_until_the_topics_really_change():
    table = RouteTable()
    table.register(registration("m:1"), now=0)
    assert table.set_write_perm("b", writable=False) == 1
    table.register(registration("m:1"), now=1)  # same data version: periodic re-registration
    assert table.route("T")["queueDatas"][0]["perm"] == 4
    table.register(registration("m:1", version=2), now=2)
    assert table.route("T")["queueDatas"][0]["perm"] == 6


def test_a_deposed_master_cannot_take_the_route_back_from_a_newer_epoch():
    """Controller mode: the master of epoch 3 registered; the master of epoch 2, cut from its
    controllers but not from this NameServer, keeps registering as brokerId 0."""
    table = RouteTable()
    table.register(registration("old:1", state=2), now=0)
    table.register(registration("new:1", state=3, version=5), now=1)
    assert table.stale_master(registration("old:1", state=2, version=2)) == "new:1"
    table.register(registration("old:1", state=2, version=2), now=2)
    assert table.route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "new:1"}
    assert "old:1" not in table.live
    # Once it steps down it registers as a slave and learns the new master.
    assert table.register(registration("old:1", broker_id=1, state=2), now=3) == ("new:1", "")
    # Without controller epochs (stateVersion 0 on both), a new master replaces the old one.
    plain = RouteTable()
    plain.register(registration("m:1"), now=0)
    plain.register(registration("m:2", version=2), now=1)
    assert plain.route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "m:2"}


def test_expired_brokers_leave_every_route():
    table = RouteTable()
    table.register(registration("m:1"), now=0)
    table.register(registration("n:1", name="other", topics={"T": TOPIC, "U": TOPIC}), now=100)
    assert table.expire(now=121, expiry=120) == ["m:1"]
    assert [b["brokerName"] for b in table.route("T")["brokerDatas"]] == ["other"]
    assert table.cluster_info()["clusterAddrTable"] == {"C": ["other"]}


async def wait_for_route(cluster, topic: str, *, present: bool) -> None:
    """Poll the NameServer (for at most 5 s) until the topic's route appears or disappears."""
    for _ in range(250):
        response = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if (response.code == 0) == present:
            return
        await trio.sleep(0.02)
    raise AssertionError(f"route of {topic} still {'absent' if present else 'present'} after 5 s")


async def register(client: RemotingClient, namesrv: str, broker_addr: str, topics: dict, *, crc: bool = True):
    body = encode_register_body({"counter": 1, "timestamp": 1}, topics)
    return await client.invoke(
        namesrv,
        RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "brokerName": "broker-x",
                "brokerAddr": broker_addr,
                "clusterName": "ClusterX",
                "brokerId": 0,
                "haServerAddr": "",
                "compressed": False,
                "bodyCrc32": (zlib.crc32(body) & 0x7FFFFFFF) if crc else 12345,
            },
            body,
        ),
    )


async def test_a_running_broker_registers_and_serves_routes(cluster_factory):
    async with cluster_factory() as cluster:
        route = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert route.code == 0
        data = json.loads(route.body)
        assert data["brokerDatas"][0]["brokerAddrs"] == {"0": cluster.broker_addr}
        missing = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in missing.remark
        info = json.loads((await cluster.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        topics = json.loads((await cluster.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)
        assert "TBW102" in topics["topicList"]


async def test_a_new_topic_reaches_the_namesrv_at_once(cluster_factory):
    async with cluster_factory() as cluster:
        created = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "Fresh", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
        )
        assert created.code == 0
        await wait_for_route(cluster, "Fresh", present=True)


async def test_registrations_expire_and_closed_connections_leave_at_once(cluster_factory):
    async with cluster_factory(namesrv={"broker_expiry": "300ms", "scan_interval": "100ms"}) as cluster:
        async with RemotingClient.open() as other:
            response = await register(
                other, cluster.namesrv_addr, "127.0.0.1:1", {"X": {**TOPIC, "topicName": "X"}}
            )
            assert response.code == 0
            route = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "X"})
            assert route.code == 0
            await trio.sleep(0.6)  # still connected, but silent for longer than the expiry
            route = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "X"})
            assert route.code == ResponseCode.TOPIC_NOT_EXIST
        # The cluster's own broker re-registers on its own schedule; it was never dropped for
        # silence because its connection is alive and it registers again on topic changes.


async def test_a_closed_registration_connection_removes_the_broker(cluster_factory):
    async with cluster_factory() as cluster:
        async with RemotingClient.open() as other:
            await register(other, cluster.namesrv_addr, "127.0.0.1:2", {"Y": {**TOPIC, "topicName": "Y"}})
            assert (await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Y"})).code == 0
        await wait_for_route(cluster, "Y", present=False)


async def test_a_bad_crc_is_refused(cluster_factory):
    async with cluster_factory() as cluster:
        response = await register(cluster.client, cluster.namesrv_addr, "127.0.0.1:3", {}, crc=False)
        assert response.code == ResponseCode.SYSTEM_ERROR and response.remark == "crc32 not match"


async def test_write_permission_can_be_wiped_and_added(cluster_factory):
    async with cluster_factory() as cluster:
        wiped = await cluster.call_namesrv(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        assert int(wiped.ext["wipeTopicCount"]) > 0
        route = json.loads(
            (await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})).body
        )
        assert route["queueDatas"][0]["perm"] & 2 == 0
        await cluster.call_namesrv(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        route = json.loads(
            (await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})).body
        )
        assert route["queueDatas"][0]["perm"] & 2 == 2


async def test_kv_config_is_kept_and_persisted(cluster_factory, tmp_path):
    async with cluster_factory() as cluster:
        put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}
        assert (await cluster.call_namesrv(RequestCode.PUT_KV_CONFIG, put)).code == 0
        got = await cluster.call_namesrv(
            RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}
        )
        assert got.ext["value"] == "broker-a:4"
        absent = await cluster.call_namesrv(RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"})
        assert absent.code == ResponseCode.QUERY_NOT_FOUND
    saved = json.loads((tmp_path / "data" / "namesrv" / "kvConfig.json").read_text())
    assert saved["configTable"]["ORDER_TOPIC_CONFIG"] == {"T": "broker-a:4"}


async def test_a_broker_registers_with_every_namesrv_and_they_run_independently(cluster_factory, tmp_path):
    second_port = free_port()
    second = f"127.0.0.1:{second_port}"
    config = make_config(
        broker={"roles": ["namesrv"], "plugins": ["namesrv"], "data_dir": str(tmp_path / "ns2")},
        namesrv={"listen_port": second_port},
    )
    other = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(other.run)
        async with cluster_factory(extra_namesrvs=[second]) as cluster:
            for address in (cluster.namesrv_addr, second):
                request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
                assert (await cluster.client.invoke(address, request)).code == 0, address
            other.request_stop("test")
            await other.wait_stopped()
            created = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "AfterStop"})
            assert created.code == 0, "a NameServer going away does not stop the broker"
            await wait_for_route(cluster, "AfterStop", present=True)


async def test_a_compressed_registration_carries_every_topic_in_a_tenth_of_the_bytes(cluster_factory):
    """``compressedRegister``: RocketMQ's deflated body, decoded by the NameServer as a Java
    NameServer decodes it; at a few hundred topics it is a small fraction of the JSON."""
    async with cluster_factory(remoting={"compressed_register": True}) as cluster:
        topics = [
            {"topicName": f"Compressed{i}", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}
            for i in range(300)
        ]
        created = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=json.dumps({"topicConfigList": topics}).encode()
        )
        assert created.code == 0, created.remark
        await wait_for_route(cluster, "Compressed299", present=True)
        route = json.loads(
            (await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Compressed7"})).body
        )
        assert route["queueDatas"][0]["readQueueNums"] == 8
    table = {t["topicName"]: t for t in topics}
    plain = encode_register_body({"counter": 1, "timestamp": 0}, table)
    deflated = encode_register_body({"counter": 1, "timestamp": 0}, table, compressed=True)
    assert len(deflated) * 10 < len(plain)
    version, decoded = decode_register_body(deflated, compressed=True)
    assert version == {"counter": 1, "timestamp": 0} and decoded["Compressed3"]["readQueueNums"] == 8
