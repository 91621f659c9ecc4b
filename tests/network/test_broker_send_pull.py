"""The broker's send and pull paths over TCP, as RocketMQ clients use them."""

from __future__ import annotations

import pytest
import trio

from tests.network.wire import batch_body, pull_request, send_request
from wire import record
from wire.java_hash import java_string_hash
from wire.remoting import RequestCode, ResponseCode


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
async def test_a_send_is_stored_and_pulled_back_byte_for_byte(cluster_factory, code):
    async with cluster_factory(store="mmap") as cluster:
        sent = await cluster.call_raw(
            send_request("T1", b"hello", queue_id=1, tags="A", keys="k1 k2", code=code)
        )
        assert sent.code == ResponseCode.SUCCESS
        assert sent.ext["queueId"] == "1" and sent.ext["queueOffset"] == "0" and len(sent.ext["msgId"]) == 32
        await cluster.broker.wait_dispatched()
        pulled = await cluster.call_raw(pull_request("T1", 1, 0))
        assert pulled.code == ResponseCode.SUCCESS
        assert pulled.ext == {
            "nextBeginOffset": "1",
            "minOffset": "0",
            "maxOffset": "1",
            "suggestWhichBrokerId": "0",
        }
        (message,) = record.decode_records(pulled.body)
        assert (message.body, message.tags, message.keys) == (b"hello", "A", ["k1", "k2"])
        assert message.offset_msg_id == sent.ext["msgId"]
        assert f"{message.store_host[0]}:{message.store_host[1]}" == cluster.broker_addr


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
async def test_a_send_header_field_that_is_no_integer_is_refused_by_its_long_name(cluster_factory, code):
    """V2's one-letter header is read as it came; a bad field is still named as RocketMQ names
    it, whichever form the header had."""
    async with cluster_factory(store="mmap") as cluster:
        request = send_request("TI", b"x", queue_id=0, code=code)
        request.ext["e" if code == RequestCode.SEND_MESSAGE_V2 else "queueId"] = "one"
        refused = await cluster.call_raw(request)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert refused.remark == "header field 'queueId' must be an integer, got 'one'"
        request = send_request("TI", b"x", queue_id=0, code=code)
        request.ext["g" if code == RequestCode.SEND_MESSAGE_V2 else "bornTimestamp"] = "soon"
        refused = await cluster.call_raw(request)
        assert "'bornTimestamp' must be an integer" in refused.remark
        assert cluster.broker.store.positions.wrote.value == 0


@pytest.mark.parametrize(
    "code,batch_flag", [(RequestCode.SEND_MESSAGE, "1"), (RequestCode.SEND_BATCH_MESSAGE, None)]
)
async def test_a_batch_becomes_consecutive_messages(cluster_factory, code, batch_flag):
    async with cluster_factory() as cluster:
        request = send_request("T2", b"", queue_id=0, code=code)
        request.body = batch_body([(f"m{i}".encode(), {"TAGS": "B", "UNIQ_KEY": f"U{i}"}) for i in range(3)])
        if batch_flag:
            request.ext["batch"] = batch_flag
        sent = await cluster.call_raw(request)
        assert sent.code == 0 and sent.ext["queueOffset"] == "0"
        assert len(sent.ext["msgId"].split(",")) == 3
        await cluster.broker.wait_dispatched()
        pulled = await cluster.call_raw(pull_request("T2", 0, 0))
        messages = record.decode_records(pulled.body)
        assert [(m.body, m.queue_offset, m.unique_key) for m in messages] == [
            (b"m0", 0, "U0"),
            (b"m1", 1, "U1"),
            (b"m2", 2, "U2"),
        ]


async def test_send_refusals_carry_a_code_and_a_remark(cluster_factory):
    async with cluster_factory(broker={"auto_create_topic_enable": False}) as cluster:
        unknown = await cluster.call_raw(send_request("NoSuchTopic", b"x"))
        assert unknown.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in unknown.remark
        bad_name = await cluster.call_raw(send_request("bad topic!", b"x"))
        assert bad_name.code == ResponseCode.MESSAGE_ILLEGAL and "characters" in bad_name.remark
        await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Small", "readQueueNums": 1, "writeQueueNums": 1}
        )
        out_of_range = await cluster.call_raw(send_request("Small", b"x", queue_id=5))
        assert out_of_range.code == ResponseCode.SYSTEM_ERROR and "queueId[5]" in out_of_range.remark
        too_big = await cluster.call_raw(send_request("Small", b"x" * (4 * 1024 * 1024 + 1)))
        assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in too_big.remark
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "ReadOnly", "perm": 4})
        read_only = await cluster.call_raw(send_request("ReadOnly", b"x"))
        assert read_only.code == ResponseCode.NO_PERMISSION


async def test_a_broker_without_write_permission_refuses_sends(cluster_factory):
    async with cluster_factory(remoting={"broker_permission": 4}) as cluster:
        refused = await cluster.call_raw(send_request("TBW102", b"x"))
        assert refused.code == ResponseCode.NO_PERMISSION and "sending message is forbidden" in refused.remark


async def test_auto_create_makes_the_topic_from_tbw102(cluster_factory):
    async with cluster_factory() as cluster:
        sent = await cluster.call_raw(send_request("AutoMade", b"x", queue_id=2))
        assert sent.code == 0
        config = cluster.network.topics.get("AutoMade")
        assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 4, 6)


async def test_pull_statuses_follow_rocketmq(cluster_factory):
    async with cluster_factory() as cluster:
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "P"})
        empty = await cluster.call_raw(pull_request("P", 0, 0))
        assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext["nextBeginOffset"] == "0"
        moved = await cluster.call_raw(pull_request("P", 0, 5))
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED
        for i in range(3):
            await cluster.call_raw(send_request("P", f"b{i}".encode(), tags="X"))
        await cluster.broker.wait_dispatched()
        at_end = await cluster.call_raw(pull_request("P", 0, 3))
        assert at_end.code == ResponseCode.PULL_NOT_FOUND and at_end.ext["nextBeginOffset"] == "3"
        beyond = await cluster.call_raw(pull_request("P", 0, 9))
        assert (
            beyond.code == ResponseCode.PULL_OFFSET_MOVED and beyond.ext["nextBeginOffset"] == "0"
        )  # min is 0
        unmatched = await cluster.call_raw(pull_request("P", 0, 0, subscription="Y"))
        assert (
            unmatched.code == ResponseCode.PULL_RETRY_IMMEDIATELY and unmatched.ext["nextBeginOffset"] == "3"
        )
        limited = await cluster.call_raw(pull_request("P", 0, 0, max_msgs=2))
        assert len(record.decode_records(limited.body)) == 2 and limited.ext["nextBeginOffset"] == "2"
        bad_queue = await cluster.call_raw(pull_request("P", 99, 0))
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in bad_queue.remark
        no_topic = await cluster.call_raw(pull_request("Absent", 0, 0))
        assert no_topic.code == ResponseCode.TOPIC_NOT_EXIST


async def test_tags_are_filtered_by_hash_then_by_exact_tag(cluster_factory):
    assert java_string_hash("Aa") == java_string_hash("BB"), "a real Java hashCode collision"
    async with cluster_factory() as cluster:
        for tag in ("Aa", "BB", "Aa", "C"):
            await cluster.call_raw(send_request("F", tag.encode(), tags=tag))
        await cluster.broker.wait_dispatched()
        pulled = await cluster.call_raw(pull_request("F", 0, 0, subscription="Aa || C"))
        assert [m.body for m in record.decode_records(pulled.body)] == [b"Aa", b"Aa", b"C"]
        only_collision = await cluster.call_raw(pull_request("F", 0, 1, subscription="Aa", max_msgs=1))
        assert only_collision.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert only_collision.ext["nextBeginOffset"] == "2"


async def test_a_held_pull_answers_as_soon_as_a_message_arrives(cluster_factory):
    async with cluster_factory() as cluster:
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "LP"})
        results = {}

        async def pull() -> None:
            started = trio.current_time()
            results["response"] = await cluster.call_raw(
                pull_request("LP", 1, 0, suspend_ms=20000), timeout=30
            )
            results["waited"] = trio.current_time() - started

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pull)
            await trio.sleep(0.3)
            assert "response" not in results, "held while the queue is empty"
            await cluster.call_raw(send_request("LP", b"wake", queue_id=1))
        assert results["response"].code == ResponseCode.SUCCESS
        assert results["waited"] < 10, "answered by the arrival, not by the 20 s hold"


async def test_a_held_pull_ends_with_not_found_after_its_suspend_time(cluster_factory):
    async with cluster_factory() as cluster:
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "LP2"})
        started = trio.current_time()
        response = await cluster.call_raw(pull_request("LP2", 0, 0, suspend_ms=400))
        assert response.code == ResponseCode.PULL_NOT_FOUND
        assert trio.current_time() - started >= 0.4


async def test_short_polling_waits_once_when_long_polling_is_off(cluster_factory):
    async with cluster_factory(
        remoting={"long_polling_enable": False, "short_polling_time": "200ms"}
    ) as cluster:
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "SP"})
        started = trio.current_time()
        response = await cluster.call_raw(pull_request("SP", 0, 0, suspend_ms=15000))
        assert response.code == ResponseCode.PULL_NOT_FOUND
        assert 0.2 <= trio.current_time() - started < 10


async def test_pulls_commit_offsets_when_asked(cluster_factory):
    async with cluster_factory() as cluster:
        await cluster.call_raw(send_request("CO", b"x"))
        await cluster.call_raw(pull_request("CO", 0, 0, group="G1", sys_flag=5, commit_offset=7))
        assert cluster.network.offsets.query("G1", "CO", 0) == 7


async def test_sends_arriving_together_are_answered_one_by_one_and_stored_in_order(cluster_factory):
    """Several sends in one write (a client with many in flight) are handled as a group and
    appended with one store call; each still gets its own answer, a refused one refuses only
    itself, and the accepted ones are stored in request order."""
    from wire.remoting.command import FrameDecoder

    async with cluster_factory(store="mmap") as cluster:
        await cluster.call_raw(send_request("TG", b"warm-up", queue_id=0))
        before = cluster.broker.statistics().put
        requests = [
            send_request("TG", b"g0", queue_id=0),
            send_request("TG", b"g1", queue_id=0, code=RequestCode.SEND_MESSAGE_V2),
            send_request("TG", b"", queue_id=0),  # an empty body: MESSAGE_ILLEGAL
            send_request("TG", b"g2", queue_id=0, tags="x"),
            send_request("TG", b"g3", queue_id=0, code=RequestCode.SEND_MESSAGE_V2),
        ]
        for opaque, request in enumerate(requests, start=1000):
            request.opaque = opaque
        host, _, port = cluster.broker_addr.rpartition(":")
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(b"".join(r.encode() for r in requests))
            decoder, answers = FrameDecoder(1 << 20), {}
            with trio.fail_after(10):
                while len(answers) < len(requests):
                    for response in decoder.feed(await stream.receive_some(65536)):
                        answers[response.opaque] = response
        codes = [answers[r.opaque].code for r in requests]
        assert codes == [0, 0, ResponseCode.MESSAGE_ILLEGAL, 0, 0]
        offsets = [int(answers[r.opaque].ext["queueOffset"]) for r in requests if answers[r.opaque].code == 0]
        assert offsets == [1, 2, 3, 4]
        after = cluster.broker.statistics().put
        assert after.batches - before.batches == 4  # the empty body is refused by the handler
        assert after.appends - before.appends == 1, "the accepted sends were appended together"
        await cluster.broker.wait_dispatched()
        pulled = await cluster.call_raw(pull_request("TG", 0, 0))
        assert [m.body for m in record.decode_records(pulled.body)] == [
            b"warm-up",
            b"g0",
            b"g1",
            b"g2",
            b"g3",
        ]
