"""Consumer groups, offsets, locks, send-back and lookups on a broker, over TCP."""

from __future__ import annotations

import json

import trio

from kernel import Redelivery, hookimpl
from tests.network.wire import pull_request, send_request
from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, Router


def heartbeat(client_id: str, group: str, expression: str = "TagA||TagC") -> RemotingCommand:
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": 0,
                "consumeType": 1,
                "groupName": group,
                "messageModel": 1,
                "subscriptionDataSet": [
                    {"subString": "*", "subVersion": "1", "topic": f"%RETRY%{group}"},
                    {"codeSet": [0, 0], "subString": expression, "subVersion": "1", "topic": "TopicLive"},
                ],
            }
        ],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=(json.dumps(body) + "\n").encode())


async def test_heartbeats_build_groups_and_membership_changes_are_pushed(cluster_factory):
    async with cluster_factory() as cluster:
        notified = []
        arrived = trio.Event()

        async def on_notify(connection, request):
            notified.append(request.ext["consumerGroup"])
            arrived.set()

        router = Router()
        router.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
        async with RemotingClient.open(router) as first, RemotingClient.open() as second:
            assert (await first.invoke(cluster.broker_addr, heartbeat("c1", "CG"))).code == 0
            arrived = trio.Event()
            assert (await second.invoke(cluster.broker_addr, heartbeat("c2", "CG"))).code == 0
            with trio.fail_after(5):
                await arrived.wait()
            assert notified[-1] == "CG"
            ids = await first.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}),
            )
            assert json.loads(ids.body) == {"consumerIdList": ["c1", "c2"]}
            assert cluster.network.topics.get("%RETRY%CG") is not None, "retry topic created on heartbeat"
            subscription = cluster.network.clients.subscription("CG", "TopicLive")
            assert subscription.tags == {"TagA", "TagC"} and 0 not in subscription.codes, "codeSet recomputed"
            arrived = trio.Event()
            unregister = RemotingCommand.request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": "c2", "producerGroup": "", "consumerGroup": "CG"}
            )
            await second.invoke(cluster.broker_addr, unregister)
            with trio.fail_after(5):
                await arrived.wait()
        unknown = await cluster.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
        assert unknown.code == ResponseCode.SYSTEM_ERROR, "closed connections leave their groups"


async def test_idle_channels_are_dropped(cluster_factory):
    async with cluster_factory(
        remoting={"channel_expiry": "200ms", "channel_scan_interval": "50ms"}
    ) as cluster:
        assert (await cluster.call_raw(heartbeat("idle", "G2"))).code == 0
        await trio.sleep(0.5)
        assert "G2" not in cluster.network.clients.consumers


async def test_offsets_are_answered_committed_and_survive_a_restart(cluster_factory, tmp_path):
    async with cluster_factory(store="mmap") as cluster:
        for i in range(3):
            await cluster.call_raw(send_request("O", f"m{i}".encode(), queue_id=0))
        await cluster.broker.wait_dispatched()
        ext = {"consumerGroup": "G", "topic": "O", "queueId": 0}
        first = await cluster.call(RequestCode.QUERY_CONSUMER_OFFSET, ext)
        assert first.code == 0 and first.ext["offset"] == "0", (
            "a new group starts at 0 while data is in memory"
        )
        assert (await cluster.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": 2})).code == 0
        assert (await cluster.call(RequestCode.GET_MAX_OFFSET, {"topic": "O", "queueId": 0})).ext[
            "offset"
        ] == "3"
        assert (await cluster.call(RequestCode.GET_MIN_OFFSET, {"topic": "O", "queueId": 0})).ext[
            "offset"
        ] == "0"
        earliest = await cluster.call(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "O", "queueId": 0})
        stamp = int(earliest.ext["timestamp"])
        found = await cluster.call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "O", "queueId": 0, "timestamp": stamp}
        )
        assert found.ext["offset"] == "0"
        later = await cluster.call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "O", "queueId": 0, "timestamp": stamp + 10**9}
        )
        assert later.ext["offset"] == "3"
    saved = json.loads((tmp_path / "data" / "config" / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["O@G"] == {"0": 2}
    async with cluster_factory(store="mmap") as cluster:
        again = await cluster.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "O", "queueId": 0}
        )
        assert again.ext["offset"] == "2"
        assert cluster.network.topics.get("O") is not None, "topics.json survives too"


async def test_offsets_written_by_rocketmq_with_unquoted_keys_load(cluster_factory, tmp_path):
    config = tmp_path / "data" / "config"
    config.mkdir(parents=True)
    (config / "consumerOffset.json").write_text('{"offsetTable":{"T@G":{0:5,1:6}}}')
    async with cluster_factory() as cluster:
        assert cluster.network.offsets.query("G", "T", 1) == 6


async def test_queue_locks_belong_to_one_client_at_a_time(cluster_factory):
    async with cluster_factory() as cluster:
        queues = [{"brokerName": "broker-a", "queueId": q, "topic": "T"} for q in range(2)]

        async def lock(client_id: str, code: int = RequestCode.LOCK_BATCH_MQ):
            body = json.dumps({"clientId": client_id, "consumerGroup": "OG", "mqSet": queues}).encode()
            return await cluster.call(code, body=body)

        assert len(json.loads((await lock("a")).body)["lockOKMQSet"]) == 2
        assert json.loads((await lock("b")).body)["lockOKMQSet"] == []
        await lock("a", RequestCode.UNLOCK_BATCH_MQ)
        assert len(json.loads((await lock("b")).body)["lockOKMQSet"]) == 2


class RetryAtOnce:
    """A redelivery policy for tests: retry immediately, dead-letter after two attempts."""

    @hookimpl
    def trocket_redelivery_decision(self, message, group, attempt, max_attempts):
        return Redelivery.retry(0) if attempt < 3 else Redelivery.dead_letter()


async def test_send_back_without_a_retry_plugin_says_so(cluster_factory):
    async with cluster_factory() as cluster:
        sent = await cluster.call_raw(send_request("SB", b"x"))
        await cluster.call_raw(heartbeat("c", "SBG"))
        _, offset = record.parse_offset_msg_id(sent.ext["msgId"])
        back = await cluster.call(
            RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "SBG", "offset": offset, "delayLevel": 0}
        )
        assert back.code == ResponseCode.SYSTEM_ERROR and "retry_dlq" in back.remark


async def test_send_back_stores_the_message_in_the_retry_topic_then_the_dlq(cluster_factory):
    async with cluster_factory(plugin_objects=[("retry_at_once", RetryAtOnce())]) as cluster:
        sent = await cluster.call_raw(
            send_request("SB", b"payload", tags="T", keys="K", properties={"UNIQ_KEY": "U1"})
        )
        await cluster.call_raw(heartbeat("c", "SBG"))
        _, offset = record.parse_offset_msg_id(sent.ext["msgId"])
        for attempt in (1, 2, 3):
            back = await cluster.call(
                RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "SBG", "offset": offset, "delayLevel": 0}
            )
            assert back.code == 0, back.remark
            await cluster.broker.wait_dispatched()
            topic = "%RETRY%SBG" if attempt < 3 else "%DLQ%SBG"
            pulled = await cluster.call_raw(
                pull_request(topic, 0, 0 if attempt == 3 else attempt - 1, group="SBG")
            )
            copy = record.decode_records(pulled.body)[0]
            assert (copy.body, copy.reconsume_times, copy.tags) == (b"payload", attempt, "T")
            assert copy.properties["RETRY_TOPIC"] == "SB" and copy.properties["ORIGIN_MESSAGE_ID"] == "U1"
            offset = copy.physical_offset
        assert cluster.network.topics.get("%DLQ%SBG").write_queue_nums == 1


async def test_messages_are_found_by_key_unique_key_and_offset_id(cluster_factory):
    async with cluster_factory(store="mmap") as cluster:
        sent = await cluster.call_raw(
            send_request("Q", b"findme", keys="order-1", properties={"UNIQ_KEY": "UK1"})
        )
        await cluster.broker.wait_dispatched()
        by_key = await cluster.call(
            RequestCode.QUERY_MESSAGE,
            {"topic": "Q", "key": "order-1", "maxNum": 8, "beginTimestamp": 0, "endTimestamp": 2**62},
        )
        assert [m.body for m in record.decode_records(by_key.body)] == [b"findme"]
        by_unique = await cluster.call(
            RequestCode.QUERY_MESSAGE, {"topic": "Q", "key": "UK1", "maxNum": 1, "_UNIQUE_KEY_QUERY": "true"}
        )
        assert record.decode_records(by_unique.body)[0].unique_key == "UK1"
        absent = await cluster.call(RequestCode.QUERY_MESSAGE, {"topic": "Q", "key": "nope"})
        assert absent.code == ResponseCode.QUERY_NOT_FOUND
        _, offset = record.parse_offset_msg_id(sent.ext["msgId"])
        viewed = await cluster.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
        assert record.decode_record(viewed.body).body == b"findme"
        wrong = await cluster.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset + 3})
        assert wrong.code == ResponseCode.SYSTEM_ERROR and "can not find message" in wrong.remark


async def test_missing_header_fields_get_a_clear_error(cluster_factory):
    async with cluster_factory() as cluster:
        response = await cluster.call(RequestCode.PULL_MESSAGE, {"topic": "T"})
        assert response.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in response.remark
        response = await cluster.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "x"}
        )
        assert (
            response.code == ResponseCode.SYSTEM_ERROR and "'queueId' must be an integer" in response.remark
        )


async def test_retry_topic_route_exists_right_after_the_first_heartbeat(cluster_factory):
    """RocketMQ creates ``%RETRY%<group>`` on a clustering group's first heartbeat and registers
    it at once; a client that looks its route up at start must find it (issue 22, item 7).
    Groups arrive one after another, so some arrive while a registration is under way."""
    async with cluster_factory() as cluster:
        groups = [f"CG_{i}" for i in range(8)]
        for group in groups:
            assert (await cluster.call_raw(heartbeat("c1", group))).code == 0
            await trio.sleep(0.001)
        for group in groups:
            with trio.fail_after(3):
                while True:  # noqa: ASYNC110 - polls the NameServer as a client would
                    topic = {"topic": f"%RETRY%{group}"}
                    route = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic)
                    if route.code == ResponseCode.SUCCESS:
                        break
                    await trio.sleep(0.02)
