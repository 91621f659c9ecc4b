"""ACL on a broker over real TCP, through the SDK and the admin client as users would: the right
keys send and consume; a wrong secret, a missing permission or a non-admin topic change is
refused with NO_PERMISSION and a remark that says why; nothing refused reaches the store; the
file is re-read while the broker runs."""

from __future__ import annotations

import pytest
import trio

from tests.network.conftest import pulled
from tests.network.wire import pull_request, send_request
from tests.plugins.pop.wire import ack_request, pop_request, popped
from trocket import (
    BlockingProducer,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    Producer,
    SendError,
    SendResult,
    SendStatus,
    SessionCredentials,
)
from trocket.admin import AdminClient, AdminError
from trocket.admin.message_trace import query_trace
from wire.remoting import ResponseCode
from wire.remoting.command import FLAG_ONEWAY

WRITER = SessionCredentials("writer-key", "writer-secret")
READER = SessionCredentials("reader-key", "12345678")
ADMIN = SessionCredentials("admin-key", "admin-secret")


async def refused_send(cluster, credentials: SessionCredentials, topic: str) -> str:
    producer = Producer("PG", cluster.namesrv_addr, credentials=credentials, retry_times_when_send_failed=0)
    async with producer as p:
        try:
            await p.send(Message(topic, b"refused"))
        except SendError as error:
            return str(error)
    raise AssertionError(f"a send to {topic} with {credentials.access_key} was accepted")


async def test_the_right_keys_send_and_consume_and_the_wrong_ones_are_refused(acl_cluster):
    async with acl_cluster() as cluster:
        async with Producer("PG", cluster.namesrv_addr, credentials=WRITER) as producer:
            for i in range(5):
                await producer.send(Message("Orders", f"o{i}".encode()))
        consumer = LitePullConsumer(
            "CG_orders",
            cluster.namesrv_addr,
            credentials=WRITER,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )
        got: list[bytes] = []
        async with consumer:
            consumer.subscribe("Orders")
            with trio.fail_after(20):
                while len(got) < 5:
                    got += [m.body for m in await consumer.poll(timeout=1.0)]
        assert sorted(got) == [f"o{i}".encode() for i in range(5)]

        wrong = await refused_send(cluster, SessionCredentials("writer-key", "not-the-secret"), "Orders")
        assert "Check signature failed for accessKey='writer-key'" in wrong
        unknown = await refused_send(cluster, SessionCredentials("nobody", "x"), "Orders")
        assert "No acl config for 'nobody'" in unknown
        no_pub = await refused_send(cluster, READER, "Orders")
        assert "No permission for topic 'Orders': accessKey='reader-key' needs PUB and has SUB" in no_pub
        denied = await refused_send(cluster, WRITER, "Elsewhere")  # defaultTopicPerm: DENY
        assert "needs PUB and has DENY" in denied

        # Nothing refused reached the store.
        bodies = [m.body for q in range(4) for m in await pulled_as(cluster, ADMIN, "Orders", q)]
        assert sorted(bodies) == [f"o{i}".encode() for i in range(5)]


async def pulled_as(cluster, credentials: SessionCredentials, topic: str, queue: int):
    """``pulled`` with a signing client (the plain cluster client is refused)."""
    original = cluster.client.credentials
    cluster.client.credentials = credentials
    try:
        return await pulled(cluster, topic, queue)
    finally:
        cluster.client.credentials = original


async def test_consuming_needs_sub_on_the_topic_and_the_group(acl_cluster):
    async with acl_cluster() as cluster:
        async with Producer("PG", cluster.namesrv_addr, credentials=ADMIN) as producer:
            await producer.send(Message("ReadOnly", b"r"))
        cluster.client.credentials = WRITER
        pull = await cluster.call_raw(pull_request("ReadOnly", 0, 0, group="CG_other"))
        assert pull.code == ResponseCode.NO_PERMISSION
        assert "group 'CG_other': accessKey='writer-key' needs SUB and has DENY" in pull.remark
        codes = [
            (await cluster.call_raw(pull_request("ReadOnly", q, 0, group="CG_orders"))).code for q in range(4)
        ]
        assert sorted(codes) == [ResponseCode.SUCCESS] + [ResponseCode.PULL_NOT_FOUND] * 3


async def test_only_an_admin_creates_or_deletes_topics(acl_cluster):
    async with acl_cluster() as cluster:
        async with AdminClient.open([cluster.namesrv_addr], credentials=WRITER) as admin:
            try:
                await admin.update_topic(
                    cluster.broker_addr, "NewTopic", read=4, write=4, perm=6, order=False
                )
            except AdminError as error:
                assert "Need admin permission for request code=17" in str(error)
            else:
                raise AssertionError("a non-admin key created a topic")
        assert cluster.network.topics.get("NewTopic") is None
        async with AdminClient.open([cluster.namesrv_addr], credentials=ADMIN) as admin:
            await admin.update_topic(cluster.broker_addr, "NewTopic", read=4, write=4, perm=6, order=False)
        assert cluster.network.topics.get("NewTopic") is not None


async def test_unsigned_and_mangled_requests_are_refused_and_the_broker_lives_on(acl_cluster):
    async with acl_cluster() as cluster:
        unsigned = await cluster.call_raw(send_request("Orders", b"x"))
        assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark
        cases = [
            {"AccessKey": "writer-key"},  # no signature
            {"AccessKey": "writer-key", "Signature": "%%% not base64 %%%"},
            {"AccessKey": "writer-key", "Signature": "A" * 100_000},
            {"AccessKey": "k" * 100_000, "Signature": "x"},
            {"AccessKey": "", "Signature": ""},
        ]
        for fields in cases:
            request = send_request("Orders", b"x")
            request.ext.update(fields)
            answer = await cluster.call_raw(request)
            assert answer.code == ResponseCode.NO_PERMISSION, fields.keys()
            assert len(answer.remark) < 300
        oneway = send_request("Orders", b"oneway")
        oneway.flag = FLAG_ONEWAY
        (await cluster.client.connection(cluster.broker_addr)).send_oneway(oneway)
        cluster.client.credentials = WRITER  # the broker still serves, after the oneway was read
        assert (await cluster.call_raw(send_request("Orders", b"ok"))).code == ResponseCode.SUCCESS
        # Of everything above, only the signed send was stored.
        assert [m.body for m in await pulled_as(cluster, ADMIN, "Orders", 0)] == [b"ok"]


async def test_a_permission_revoked_in_the_file_applies_without_a_restart(acl_cluster, acl_file):
    async with acl_cluster() as cluster:
        cluster.client.credentials = WRITER
        assert (await cluster.call_raw(send_request("Orders", b"before"))).code == ResponseCode.SUCCESS
        acl_file.write_text(acl_file.read_text().replace('"Orders=PUB|SUB"', '"Orders=SUB"'))
        with trio.fail_after(10):
            while (await cluster.call_raw(send_request("Orders", b"after"))).code == 0:  # noqa: ASYNC110
                await trio.sleep(0.05)  # the broker notices the edit on its own
        acl_file.write_text("accounts: [this is: not valid")  # a broken edit: last good file stays
        await trio.sleep(0.5)
        refused = await cluster.call_raw(send_request("Orders", b"still"))
        assert refused.code == ResponseCode.NO_PERMISSION and "needs PUB and has SUB" in refused.remark
        async with AdminClient.open([cluster.namesrv_addr], credentials=ADMIN) as admin:
            figures = await admin.broker_runtime_info(cluster.broker_addr)  # as brokerStatus shows
        assert "not valid YAML" in figures["aclLastError"] and figures["aclReloads"] == "1"


async def test_pop_and_ack_need_sub_on_the_topic_and_the_group(cluster_factory, acl_file):
    async with cluster_factory(
        plugins=["acl", "pop"], acl={"plain_acl_file": str(acl_file), "reload_interval": "100ms"}
    ) as cluster:
        async with Producer("PG", cluster.namesrv_addr, credentials=ADMIN) as producer:
            await producer.send(Message("ReadOnly", b"r"))
        unsigned = await cluster.call_raw(pop_request("CG_orders", "ReadOnly"))
        assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark
        cluster.client.credentials = WRITER
        other = await cluster.call_raw(pop_request("CG_other", "ReadOnly"))
        assert other.code == ResponseCode.NO_PERMISSION
        assert "group 'CG_other': accessKey='writer-key' needs SUB and has DENY" in other.remark
        await cluster.broker.wait_dispatched()
        (item,) = popped(await cluster.call_raw(pop_request("CG_orders", "ReadOnly", poll_ms=2000)))
        assert item.body == b"r"
        assert (await cluster.call_raw(ack_request("CG_orders", item))).code == ResponseCode.SUCCESS


async def test_trace_records_are_signed_and_need_pub_on_the_trace_topic(cluster_factory, acl_file):
    """A traced producer signs its trace writes with its own keys: an account without PUB on
    the trace topic loses its traces (counted; its sends succeed), one with it writes them."""
    async with cluster_factory(
        plugins=["acl"],
        acl={"plain_acl_file": str(acl_file), "reload_interval": "100ms"},
        remoting={"trace_topic_enable": True},
    ) as cluster:
        async with Producer("PG", cluster.namesrv_addr, credentials=WRITER, trace=True) as producer:
            untraced = await producer.send(Message("Orders", b"untraced"))
            tracer = producer._tracer
        assert untraced.status.name == "SEND_OK"
        assert tracer is not None and tracer.dropped == 1 and tracer.written == 0

        acl_file.write_text(
            acl_file.read_text().replace('"ReadOnly=SUB"', '"ReadOnly=SUB", "RMQ_SYS_TRACE_TOPIC=PUB"')
        )
        await trio.sleep(0.5)  # re-read every 100 ms
        async with Producer("PG", cluster.namesrv_addr, credentials=WRITER, trace=True) as producer:
            traced = await producer.send(Message("Orders", b"traced"))
            tracer = producer._tracer
        assert tracer is not None and tracer.written == 1 and tracer.dropped == 0
        async with AdminClient.open([cluster.namesrv_addr], credentials=ADMIN) as admin:
            with trio.fail_after(20):  # found by key once indexed, a moment after it is stored
                while not (views := await query_trace(admin, traced.msg_id)):  # noqa: ASYNC110 - polls the index
                    await trio.sleep(0.1)
            assert [(v.type, v.group, v.status) for v in views] == [("Pub", "PG", "success")]
            assert await query_trace(admin, untraced.msg_id) == []


async def test_a_blocking_producer_signs_its_requests(acl_cluster):
    """The BlockingProducer (a blocking socket per call, run here on a worker thread) signs as
    the trio producer does: the right key sends, a wrong secret is refused with the reason."""

    def send(credentials: SessionCredentials, body: bytes) -> SendResult:
        producer = BlockingProducer(
            "PG", cluster.namesrv_addr, credentials=credentials, retry_times_when_send_failed=0
        )
        with producer:
            return producer.send(Message("Orders", body))

    async with acl_cluster() as cluster:
        stored = await trio.to_thread.run_sync(send, WRITER, b"signed")
        assert stored.status is SendStatus.SEND_OK
        with pytest.raises(SendError, match="Check signature failed for accessKey='writer-key'"):
            await trio.to_thread.run_sync(send, SessionCredentials("writer-key", "wrong"), b"refused")
        bodies = [m.body for q in range(4) for m in await pulled_as(cluster, ADMIN, "Orders", q)]
        assert bodies == [b"signed"]
