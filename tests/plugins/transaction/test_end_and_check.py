"""Transactions through the SDK against an in-process broker over TCP: commit, rollback,
check-back, give-up, repeated ends, admin figures."""

from __future__ import annotations

import json

import pytest
import trio
import trio.lowlevel

from kernel.model import PROPERTY_REAL_TOPIC, TRANSACTION_HALF_TOPIC
from plugins.transaction import TRANSACTIONS
from plugins.transaction.half import CHECK_MAX_TOPIC, OP_TOPIC, PROPERTY_CHECK_TIMES, op_offsets
from tests.network.wire import send_request
from tests.plugins.transaction.conftest import pulled, stored, until, visible
from trocket import Message, TransactionProducer, TransactionState
from trocket.admin import AdminClient, AdminError
from wire.record import decode_record, parse_offset_msg_id
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, Router


def decide(state: TransactionState):
    def executor(message, arg):
        return state

    return executor


@pytest.mark.parametrize("flush", ["async", "sync"])
async def test_commit_makes_the_message_visible_and_rollback_discards_it(tx_cluster, flush):
    """On store_mmap under either flush policy (a commit and its op record are one append,
    which SYNC_FLUSH acknowledges only once on disk)."""
    async with (
        tx_cluster(flush=flush) as cluster,
        TransactionProducer("PG_tx", cluster.namesrv_addr) as producer,
    ):
        committed = await producer.send_message_in_transaction(
            Message("Orders", b"paid", tags="t", keys=["o-1"]), decide(TransactionState.COMMIT)
        )
        rolled = await producer.send_message_in_transaction(
            Message("Orders", b"cancelled"), decide(TransactionState.ROLLBACK)
        )
        assert committed.local_state is TransactionState.COMMIT
        assert rolled.local_state is TransactionState.ROLLBACK
        service = cluster.broker.ctx.stash[TRANSACTIONS]
        await until(lambda: service.stats.committed + service.stats.rolled_back >= 2, 5)
        (shown,) = await visible(cluster, "Orders")
        assert shown.body == b"paid" and shown.tags == "t" and shown.keys == ["o-1"]
        assert shown.unique_key == committed.transaction_id
        assert shown.sys_flag & 0xC == 0x8  # COMMIT type
        assert "TRAN_MSG" not in shown.properties and PROPERTY_REAL_TOPIC not in shown.properties
        assert shown.properties["PGROUP"] == "PG_tx"
        halves = await stored(cluster, TRANSACTION_HALF_TOPIC)
        assert [h.body for h in halves] == [b"paid", b"cancelled"]
        assert halves[0].properties[PROPERTY_REAL_TOPIC] == "Orders"
        assert shown.prepared_transaction_offset == halves[0].physical_offset
        await service.flush_ops()
        ops = await stored(cluster, OP_TOPIC)
        assert sorted(o for op in ops for o in op_offsets(op)) == [0, 1]
        assert all(op.tags == "d" for op in ops)


async def test_unknown_transactions_are_resolved_by_the_check_back(tx_cluster):
    decisions = {}

    async def check(message):  # an async listener
        await trio.lowlevel.checkpoint()
        return decisions[message.body]

    async with tx_cluster() as cluster:
        async with TransactionProducer("PG_check", cluster.namesrv_addr, check_listener=check) as producer:
            for body, state in ((b"yes", TransactionState.COMMIT), (b"no", TransactionState.ROLLBACK)):
                decisions[body] = state
                result = await producer.send_message_in_transaction(
                    Message("Checked", body), decide(TransactionState.UNKNOW)
                )
                assert result.local_state is TransactionState.UNKNOW
            service = cluster.broker.ctx.stash[TRANSACTIONS]
            await until(lambda: service.stats.committed + service.stats.rolled_back >= 2, 10)
        (shown,) = await visible(cluster, "Checked")
        assert shown.body == b"yes"
        assert service.stats.checks_sent == 2


async def test_an_executor_that_raises_is_left_to_the_check_back(tx_cluster):
    def broken(message, arg):
        raise RuntimeError("database down")

    async with tx_cluster() as cluster:
        async with TransactionProducer(
            "PG_raise", cluster.namesrv_addr, check_listener=lambda m: TransactionState.COMMIT
        ) as producer:
            result = await producer.send_message_in_transaction(Message("Raised", b"x"), broken)
            assert result.local_state is TransactionState.UNKNOW
            service = cluster.broker.ctx.stash[TRANSACTIONS]
            await until(lambda: service.stats.committed >= 1)
        assert [m.body for m in await visible(cluster, "Raised")] == [b"x"]


async def test_a_transaction_never_resolved_is_given_up_after_the_maximum_checks(tx_cluster):
    async with tx_cluster(check_max=3, check_interval="100ms") as cluster:
        async with TransactionProducer(
            "PG_unknown", cluster.namesrv_addr, check_listener=lambda m: TransactionState.UNKNOW
        ) as producer:
            sent = await producer.send_message_in_transaction(
                Message("Never", b"?"), decide(TransactionState.UNKNOW)
            )
            service = cluster.broker.ctx.stash[TRANSACTIONS]
            await until(lambda: service.stats.given_up >= 1, 15)
        assert service.stats.checks_sent == 3
        assert await visible(cluster, "Never") == []
        (kept,) = await pulled(cluster, CHECK_MAX_TOPIC, 0)  # readable by a client, as in RocketMQ
        assert kept.body == b"?" and kept.properties[PROPERTY_CHECK_TIMES] == "3"
        assert kept.properties[PROPERTY_REAL_TOPIC] == "Never"
        assert (await service.pending()) == []
        async with AdminClient.open([cluster.namesrv_addr]) as admin:  # routed: an operator finds it
            with trio.fail_after(10):
                while not (found := await _query_when_routed(admin, CHECK_MAX_TOPIC, sent.transaction_id)):  # noqa: ASYNC110
                    await trio.sleep(0.05)
        assert [message.body for message in found] == [b"?"]


async def _query_when_routed(admin: AdminClient, topic: str, unique_key: str) -> list:
    try:
        return await admin.query_by_key(topic, unique_key, unique=True)
    except AdminError:  # no route yet: the broker registers its new topic shortly
        return []


async def test_a_repeated_commit_is_answered_and_stored_once(tx_cluster):
    async with tx_cluster() as cluster, TransactionProducer("PG_rep", cluster.namesrv_addr) as producer:
        result = await producer.send_message_in_transaction(
            Message("Twice", b"1"), decide(TransactionState.COMMIT)
        )
        send = result.send_result

        header = {
            "producerGroup": "PG_rep",
            "tranStateTableOffset": send.queue_offset,
            "commitLogOffset": parse_offset_msg_id(send.offset_msg_id)[1],
            "commitOrRollback": 8,
            "fromTransactionCheck": False,
            "msgId": send.msg_id,
            "transactionId": result.transaction_id,
        }
        answer = await cluster.call(RequestCode.END_TRANSACTION, header)
        assert answer.code == 0 and "already ended" in (answer.remark or "")
        assert [m.body for m in await visible(cluster, "Twice")] == [b"1"]
        wrong = await cluster.call(RequestCode.END_TRANSACTION, {**header, "producerGroup": "other"})
        assert wrong.code == 1 and "producer group wrong" in wrong.remark
        missing = await cluster.call(RequestCode.END_TRANSACTION, {"producerGroup": "PG_rep"})
        assert missing.code == 1 and "tranStateTableOffset" in missing.remark
        nowhere = await cluster.call(RequestCode.END_TRANSACTION, {**header, "commitLogOffset": 10**9})
        assert nowhere.code == 1 and "Find prepared transaction message failed" in nowhere.remark
        runtime = await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert b"transactionCommitted" in runtime.body


async def test_wire_frames_as_the_java_client_sends_and_receives_them(tx_cluster):
    """A raw remoting client playing RocketMQ's Java producer: heartbeat, a SEND_MESSAGE_V2 half
    message (sysFlag 4, TRAN_MSG, PGROUP), then the broker's CHECK_TRANSACTION_STATE frame, and
    an END_TRANSACTION answer with Java's string-typed header values."""
    checks: list[RemotingCommand] = []
    arrived = trio.Event()

    async def on_check(connection, request):
        checks.append(request)
        arrived.set()

    router = Router(name="java producer")
    router.register(RequestCode.CHECK_TRANSACTION_STATE, on_check)
    async with tx_cluster() as cluster, RemotingClient.open(router) as java:
        heartbeat = {
            "clientID": "10.0.0.1@4242",
            "producerDataSet": [{"groupName": "PG_java"}],
            "consumerDataSet": [],
        }
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode())
        assert (await java.invoke(cluster.broker_addr, request, 5)).code == 0
        half = send_request(
            "JavaTx",
            b"java half",
            queue_id=1,
            code=RequestCode.SEND_MESSAGE_V2,
            group="PG_java",
            properties={"TRAN_MSG": "true", "PGROUP": "PG_java", "UNIQ_KEY": "AC1100010000JAVA"},
        )
        half.ext["f"] = "4"  # sysFlag: TRANSACTION_PREPARED_TYPE
        sent = await java.invoke(cluster.broker_addr, half, 5)
        assert sent.code == 0 and sent.ext["queueId"] == "1" and sent.ext["queueOffset"] == "0"
        with trio.fail_after(10):
            await arrived.wait()
        (check,) = checks[:1]
        assert check.is_oneway
        ext = check.ext
        assert ext["tranStateTableOffset"] == "0" and ext["transactionId"] == "AC1100010000JAVA"
        assert ext["msgId"] == "AC1100010000JAVA" and ext["offsetMsgId"] == sent.ext["msgId"]
        assert int(ext["commitLogOffset"]) == parse_offset_msg_id(sent.ext["msgId"])[1]
        shown = decode_record(check.body)
        assert (shown.topic, shown.queue_id, shown.body) == ("JavaTx", 1, b"java half")
        assert shown.properties[PROPERTY_CHECK_TIMES] == "1"
        end = RemotingCommand.request(
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": "PG_java",
                "tranStateTableOffset": ext["tranStateTableOffset"],
                "commitLogOffset": ext["commitLogOffset"],
                "commitOrRollback": "8",
                "fromTransactionCheck": "true",
                "msgId": ext["msgId"],
                "transactionId": ext["transactionId"],
            },
        )
        (await java.connection(cluster.broker_addr)).send_oneway(end)
        service = cluster.broker.ctx.stash[TRANSACTIONS]
        await until(lambda: service.stats.committed == 1)
        (visible_message,) = await visible(cluster, "JavaTx")
        assert visible_message.body == b"java half" and visible_message.queue_id == 1
