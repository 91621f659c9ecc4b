"""POP over remoting against an in-process broker on real TCP: RocketMQ 5's request codes and
headers, as a RocketMQ 5 remoting client (and the gRPC proxy) sends them."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import trio

from plugins.pop import POP_SERVICE
from tests.network.wire import send_request
from tests.plugins.pop.wire import Popped, ack_request, change_request, pop_request, popped
from tests.support import until
from wire.pop_receipt import ORDER_REVIVE_QUEUE, PROPERTY_POP_CK, retry_topic
from wire.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.remoting.admin_json import loads as loads_admin_json

GROUP = "CG_pop"


@asynccontextmanager
async def pop_cluster(cluster_factory, **tables):
    plugins = ["pop", "retry_dlq", "allocate"]
    async with cluster_factory(plugins=plugins, pop={"revive_interval": "50ms"}, **tables) as cluster:
        yield cluster


async def send(cluster, topic: str, *bodies: bytes, queue_id: int = 0, tags: str | None = None) -> None:
    for body in bodies:
        response = await cluster.call_raw(send_request(topic, body, queue_id=queue_id, tags=tags))
        assert response.code == ResponseCode.SUCCESS, response.remark
    await cluster.broker.wait_dispatched()


async def pop(cluster, topic: str = "T", group: str = GROUP, **options) -> list[Popped]:
    response = await cluster.call_raw(pop_request(group, topic, **options), timeout=30)
    assert response.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), response.remark
    return popped(response)


async def pop_until(cluster, count: int, topic: str = "T", group: str = GROUP, **options) -> list[Popped]:
    got: list[Popped] = []
    with trio.fail_after(20):
        while len(got) < count:
            got += await pop(cluster, topic, group, poll_ms=1000, **options)
    return got


async def test_pop_then_ack_delivers_each_message_once(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"a", b"b", queue_id=0)
        await send(cluster, "T", b"c", queue_id=1)
        first = await pop_until(cluster, 3)
        assert sorted(item.body for item in first) == [b"a", b"b", b"c"]
        assert all(item.handle.revive_qid != ORDER_REVIVE_QUEUE for item in first)
        assert await pop(cluster) == []  # all in flight: invisible to other pops
        stats = await cluster.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": "T"})
        rows = loads_admin_json(stats.body)["offsetTable"].values()
        assert sum(row["popInFlight"] for row in rows) == 3  # what consumerProgress shows per queue
        for item in first:
            response = await cluster.call_raw(ack_request(GROUP, item))
            assert response.code == ResponseCode.SUCCESS, response.remark
        # an ack repeated is answered the same way; nothing comes back after the deadline
        again = await cluster.call_raw(ack_request(GROUP, first[0]))
        assert again.code in (ResponseCode.SUCCESS, ResponseCode.NO_MESSAGE)
        service = cluster.broker.ctx.stash[POP_SERVICE]
        assert service.stats.acks == 3 and len(service.table) == 0
        figures = (await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body
        table = json.loads(figures)["table"]
        assert table["popAcks"] == "3" and table["popMessagesInFlight"] == "0"


async def test_unacked_message_comes_back_from_the_retry_topic_with_attempt_two(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"lost-ack")
        (first,) = await pop_until(cluster, 1, invisible_ms=300)
        assert first.message.reconsume_times == 0
        (again,) = await pop_until(cluster, 1, invisible_ms=60_000)
        assert again.body == b"lost-ack"
        assert again.message.topic == "T"  # shown under its own topic
        assert again.message.reconsume_times == 1
        assert again.message.unique_key == first.message.unique_key
        assert again.message.properties[PROPERTY_POP_CK] == again.handle.format()
        assert again.handle.topic_type == 1
        # the first handle is dead: its message was delivered again
        stale = await cluster.call_raw(ack_request(GROUP, first))
        assert stale.code == ResponseCode.NO_MESSAGE and "receipt handle" in stale.remark
        done = await cluster.call_raw(ack_request(GROUP, again))
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert cluster.network.topics.get(retry_topic(GROUP, "T")) is not None


async def test_change_invisible_time_gives_a_new_handle_and_kills_the_old(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"slow")
        (item,) = await pop_until(cluster, 1, invisible_ms=60_000)
        changed = await cluster.call_raw(change_request(GROUP, item, 300))
        assert changed.code == ResponseCode.SUCCESS, changed.remark
        new = item.handle.__class__(
            item.handle.queue_offset,
            int(changed.ext["popTime"]),
            int(changed.ext["invisibleTime"]),
            int(changed.ext["reviveQid"]),
            0,
            item.handle.broker_name,
            item.handle.queue_id,
            item.handle.queue_offset,
        )
        stale = await cluster.call_raw(ack_request(GROUP, item))
        assert stale.code == ResponseCode.NO_MESSAGE
        # nacked with 300 ms: it comes back soon, once
        (again,) = await pop_until(cluster, 1)
        assert again.body == b"slow" and again.message.reconsume_times == 1
        late = await cluster.call_raw(ack_request(GROUP, item, handle=new))
        assert late.code == ResponseCode.NO_MESSAGE


async def test_long_polling_pop_is_woken_by_a_send(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"creates-the-topic")
        await pop_until(cluster, 1)
        got: list[Popped] = []

        async def waiting_pop():
            got.extend(await pop(cluster, poll_ms=15_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting_pop)
            await trio.sleep(0.3)
            service = cluster.broker.ctx.stash[POP_SERVICE]
            assert service.waiting_topics >= 1
            await send(cluster, "T", b"arrived", queue_id=2)
        assert [item.body for item in got] == [b"arrived"]
        assert await pop(cluster, poll_ms=200) == []  # a pop that timed out leaves no waiter behind
        assert service.waiting_topics == 0


async def test_a_pop_that_skipped_a_queue_being_read_looks_again_when_the_read_ends(cluster_factory):
    """Pops of one group skip a queue another pop of the group is reading (its lock is held
    from the read to the checkpoint). One that found nothing else used to wait for a new
    message to arrive, which in a backlog read by many receivers may never come, while the
    queue it skipped still held messages: here the only message is in the queue being read,
    and the pop must deliver it once that read ends, long before its poll time."""
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"behind-a-reader", queue_id=0)
        service = cluster.broker.ctx.stash[POP_SERVICE]
        reading = service._lock((GROUP, "T", 0))  # as a pop of the group reading queue 0 holds it
        got: list[Popped] = []

        async def waiting_pop():
            got.extend(await pop(cluster, poll_ms=15_000))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await reading.acquire()
                nursery.start_soon(waiting_pop)
                await until(lambda: service.waiting_topics >= 1 or reading.statistics().tasks_waiting > 0)
                reading.release()
        assert [item.body for item in got] == [b"behind-a-reader"]

        # While it waits for the read to end, a message arriving elsewhere still wakes it.
        await send(cluster, "T", b"also-behind", queue_id=0)
        got.clear()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await reading.acquire()
                nursery.start_soon(waiting_pop)
                await until(lambda: reading.statistics().tasks_waiting > 0)
                await send(cluster, "T", b"arrived-elsewhere", queue_id=1)
                await until(lambda: bool(got))
                reading.release()
        assert [item.body for item in got] == [b"arrived-elsewhere"]


async def test_tag_filter_and_queue_choice(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"red-1", tags="red")
        await send(cluster, "T", b"blue-1", tags="blue")
        await send(cluster, "T", b"red-2", tags="red", queue_id=3)
        red = await pop_until(cluster, 2, exp="red")
        assert sorted(item.body for item in red) == [b"red-1", b"red-2"]
        assert await pop(cluster, exp="red") == []
        only_queue_3 = await pop(cluster, group="CG_other", queue_id=3)
        assert [item.body for item in only_queue_3] == [b"red-2"]


async def test_max_reconsume_times_then_dead_letter_queue(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        group_config = {"groupName": "CG_dlq", "retryMaxTimes": 1, "consumeEnable": True}
        created = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(group_config).encode()
        )
        assert created.code == 0, created.remark
        await send(cluster, "T", b"poison")
        first = await pop_until(cluster, 1, group="CG_dlq", invisible_ms=200)
        second = await pop_until(cluster, 1, group="CG_dlq", invisible_ms=200)
        assert [first[0].message.reconsume_times, second[0].message.reconsume_times] == [0, 1]
        service = cluster.broker.ctx.stash[POP_SERVICE]
        await until(lambda: service.stats.dead_lettered >= 1)
        await cluster.broker.wait_dispatched()
        dead = await cluster.call_raw(
            RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "CG_dlq_reader",
                    "topic": "%DLQ%CG_dlq",
                    "queueId": 0,
                    "queueOffset": 0,
                    "maxMsgNums": 32,
                    "sysFlag": 4,
                    "subscription": "*",
                    "subVersion": 0,
                },
            )
        )
        assert dead.code == ResponseCode.SUCCESS, dead.remark
        assert await pop(cluster, group="CG_dlq", poll_ms=300) == []


async def test_orderly_pop_blocks_the_queue_until_acked(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "F", b"1", b"2", b"3", queue_id=0)
        first = await pop_until(cluster, 1, topic="F", queue_id=0, max_msgs=1, order=True)
        assert [item.body for item in first] == [b"1"] and first[0].handle.orderly
        assert await pop(cluster, "F", queue_id=0, max_msgs=1, order=True) == []  # blocked
        assert (await cluster.call_raw(ack_request(GROUP, first[0]))).code == ResponseCode.SUCCESS
        second = await pop_until(cluster, 1, topic="F", queue_id=0, max_msgs=1, order=True, invisible_ms=300)
        assert [item.body for item in second] == [b"2"]
        # not acked: after its invisible time the same message comes again, counted
        third = await pop_until(cluster, 1, topic="F", queue_id=0, max_msgs=1, order=True)
        assert [item.body for item in third] == [b"2"]
        assert third[0].handle.pop_time > second[0].handle.pop_time
        stale = await cluster.call_raw(ack_request(GROUP, second[0]))
        assert stale.code == ResponseCode.NO_MESSAGE
        assert (await cluster.call_raw(ack_request(GROUP, third[0]))).code == ResponseCode.SUCCESS
        fourth = await pop_until(cluster, 1, topic="F", queue_id=0, max_msgs=1, order=True)
        assert [item.body for item in fourth] == [b"3"]


async def test_bad_requests_get_their_codes_and_the_broker_keeps_serving(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"x")
        missing = await cluster.call(RequestCode.POP_MESSAGE, {"consumerGroup": GROUP})
        assert missing.code == ResponseCode.SYSTEM_ERROR and "topic" in missing.remark
        too_many = await cluster.call_raw(pop_request(GROUP, "T", max_msgs=1000))
        assert too_many.code == ResponseCode.INVALID_PARAMETER
        unknown = await cluster.call_raw(pop_request(GROUP, "NoSuchTopic"))
        assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
        bad_group = await cluster.call_raw(pop_request("../escape", "T"))
        assert bad_group.code == ResponseCode.SYSTEM_ERROR
        malformed = await cluster.call(
            RequestCode.ACK_MESSAGE,
            {"consumerGroup": GROUP, "topic": "T", "queueId": 0, "extraInfo": "not a handle", "offset": 0},
        )
        assert malformed.code == ResponseCode.INVALID_PARAMETER and "receipt handle" in malformed.remark
        never = await cluster.call(
            RequestCode.ACK_MESSAGE,
            {
                "consumerGroup": GROUP,
                "topic": "T",
                "queueId": 0,
                "extraInfo": "0 1 60000 0 0 broker-a 0 0",
                "offset": 0,
            },
        )
        assert never.code == ResponseCode.NO_MESSAGE
        batch = await cluster.call(RequestCode.BATCH_ACK_MESSAGE, body=b"{not json")
        assert batch.code == ResponseCode.NO_MESSAGE
        assert [item.body for item in await pop_until(cluster, 1)] == [b"x"]


async def test_query_assignment_splits_pull_queues_and_gives_pop_consumers_every_broker(cluster_factory):
    async with pop_cluster(cluster_factory) as cluster:
        await send(cluster, "T", b"x")
        heartbeat = {
            "clientID": "client-a",
            "consumerDataSet": [
                {"groupName": "CG_assign", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                 "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}
            ],
            "producerDataSet": [],
        }  # fmt: skip
        assert (await cluster.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())).code == 0
        query = {"topic": "T", "consumerGroup": "CG_assign", "clientId": "client-a", "strategyName": "AVG"}
        pulled = await cluster.call(RequestCode.QUERY_ASSIGNMENT, body=json.dumps(query).encode())
        assert pulled.code == 0, pulled.remark
        assignments = json.loads(pulled.body)["messageQueueAssignments"]
        assert sorted(a["messageQueue"]["queueId"] for a in assignments) == [0, 1, 2, 3]  # alone: all
        assert {a["mode"] for a in assignments} == {"PULL"}

        mode = {"topic": "T", "consumerGroup": "CG_assign", "mode": "POP", "popShareQueueNum": 0}
        assert (
            await cluster.call(RequestCode.SET_MESSAGE_REQUEST_MODE, body=json.dumps(mode).encode())
        ).code == 0
        popped_mode = await cluster.call(RequestCode.QUERY_ASSIGNMENT, body=json.dumps(query).encode())
        (only,) = json.loads(popped_mode.body)["messageQueueAssignments"]
        assert only["mode"] == "POP" and only["messageQueue"]["queueId"] == -1
        assert (cluster.broker.config.broker.data_dir / "config" / "messageRequestMode.json").exists()
        bad = await cluster.call(RequestCode.QUERY_ASSIGNMENT, body=b"[1]")
        assert bad.code == ResponseCode.SYSTEM_ERROR
