"""trocket.BlockingProducer against a real ``trocket up`` process, as code without an event loop
uses it (plain calls, several threads): what is sent is stored where the result says, with
the properties, batches, compression and limits of the trio producer; failures are clear
errors within the timeout, and a broken peer costs one connection."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess

import pytest
import trio

from tests.interop.conftest import RunningBroker
from trocket import (
    BlockingProducer,
    ClientError,
    ConsumeFromWhere,
    InvalidMessage,
    LitePullConsumer,
    Message,
    ReceivedMessage,
    SendError,
    SendStatus,
    select_by_hash,
)
from trocket.client.blocking_connection import BlockingConnection
from wire.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.remoting.command import FrameDecoder


def consumed(namesrv: str, topic: str, count: int, group: str) -> list[ReceivedMessage]:
    """The topic's first ``count`` messages, read with the trio SDK's pull consumer."""

    async def read() -> list[ReceivedMessage]:
        got: list[ReceivedMessage] = []
        consumer = LitePullConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        async with consumer:
            consumer.subscribe(topic)
            with trio.fail_after(30):
                while len(got) < count:
                    got += await consumer.poll(timeout=1.0)
        return got

    return trio.run(read)


def test_send_returns_where_the_message_was_stored(broker: RunningBroker):
    with BlockingProducer("PG_blocking", broker.namesrv) as producer:
        message = Message("BlockingOrders", b"order 42 paid", tags="paid", keys=["order-42", "cust-7"])
        message.properties["region"] = "eu"
        result = producer.send(message)
    assert result.status is SendStatus.SEND_OK and result.queue.topic == "BlockingOrders"
    assert result.queue.broker_name == "broker-a" and result.queue_offset == 0
    (stored,) = consumed(broker.namesrv, "BlockingOrders", 1, "CG_blocking_orders")
    assert stored.body == b"order 42 paid" and stored.tags == "paid"
    assert stored.keys == ["order-42", "cust-7"] and stored.properties["region"] == "eu"
    assert stored.unique_key == result.msg_id and stored.offset_msg_id == result.offset_msg_id
    assert stored.queue == result.queue


def test_batches_oneway_compression_and_ordered_sends(broker: RunningBroker):
    big = bytes(range(256)) * 64  # 16 KiB that compresses
    with BlockingProducer("PG_blocking", broker.namesrv) as producer:
        batch = producer.send_batch([Message("BlockingMixed", f"b{i}".encode()) for i in range(8)])
        assert batch.status is SendStatus.SEND_OK and len(batch.msg_id.split(",")) == 8
        producer.send_oneway(Message("BlockingMixed", b"oneway"))
        compressed = producer.send(Message("BlockingMixed", big))
        ordered = [f"ord{i}".encode() for i in range(5)]
        queues = {
            producer.send(Message("BlockingMixed", body), selector=select_by_hash, arg="7").queue
            for body in ordered
        }
        assert len(queues) == 1  # one sharding key, one queue
    got = consumed(broker.namesrv, "BlockingMixed", 15, "CG_blocking_mixed")
    bodies = Counter(m.body for m in got)
    assert bodies == Counter([f"b{i}".encode() for i in range(8)] + [b"oneway", big] + ordered)
    (stored_big,) = [m for m in got if m.body == big]
    assert stored_big.unique_key == compressed.msg_id
    assert [m.body for m in sorted(got, key=lambda m: m.queue_offset) if m.body in ordered] == ordered


def test_bad_messages_are_refused_before_anything_is_sent(broker: RunningBroker):
    with BlockingProducer("PG_blocking", broker.namesrv, max_message_size=1024) as producer:
        with pytest.raises(InvalidMessage, match="the limit is 1024"):
            producer.send(Message("BlockingBad", b"x" * 1025))
        with pytest.raises(InvalidMessage, match="body is empty"):
            producer.send(Message("BlockingBad", b""))
        with pytest.raises(InvalidMessage, match="one topic"):
            producer.send_batch([Message("A", b"1"), Message("B", b"2")])
        with pytest.raises(SendError, match="refused: broker-a answered MESSAGE_ILLEGAL"):
            producer.send(Message("bad/topic", b"x"))  # MESSAGE_ILLEGAL: not retried, explained
    with pytest.raises(ClientError, match="not started"):
        BlockingProducer("PG_blocking", broker.namesrv).send(Message("BlockingBad", b"x"))


def test_threads_send_at_once_each_on_a_connection_of_its_own(broker: RunningBroker):
    threads, each = 8, 40
    results: list = []
    errors: list[BaseException] = []
    with BlockingProducer("PG_blocking_threads", broker.namesrv) as producer:
        producer.send(Message("BlockingThreads", b"warm"))
        start = threading.Barrier(threads)

        def sender(worker: int) -> None:
            try:
                start.wait()
                for i in range(each):
                    results.append(producer.send(Message("BlockingThreads", f"{worker}-{i}".encode())))
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        workers = [threading.Thread(target=sender, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        pool = producer._pool
        assert pool is not None
        idle = pool.idle_count(broker.broker)
    assert not errors, errors
    assert len(results) == threads * each and all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == threads * each
    assert 1 < idle <= threads  # concurrent sends took connections of their own, all returned
    got = consumed(broker.namesrv, "BlockingThreads", threads * each + 1, "CG_blocking_threads")
    assert {m.body for m in got} == {b"warm"} | {
        f"{w}-{i}".encode() for w in range(threads) for i in range(each)
    }


def test_the_broker_lists_the_producer_from_its_heartbeat(broker: RunningBroker):
    with BlockingProducer("PG_blocking_listed", broker.namesrv) as producer:
        producer.send(Message("BlockingListed", b"x"))
        shown = broker.admin("producerConnection", "-g", "PG_blocking_listed", "-t", "BlockingListed").stdout
    assert "PYTHON" in shown and "broker-a" in shown, shown


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP port that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for connection in accepted:
            connection.close()


def test_a_nameserver_that_never_answers_fails_the_send_within_its_timeout(silent_server: str):
    with BlockingProducer("PG_blocking", silent_server, send_timeout=0.5) as producer:
        began = time.monotonic()
        with pytest.raises(ClientError, match="no NameServer answered .*in time"):
            producer.send(Message("Anywhere", b"x"))
        assert time.monotonic() - began < 5


@contextmanager
def scripted_peer(
    script: Callable[[socket.socket, FrameDecoder], None], *, forked: bool = False
) -> Iterator[tuple[str, threading.Thread | BaseProcess]]:
    """A listening port whose first connection is handed to ``script`` (with a decoder for what
    it reads) on a thread, or with ``forked`` in a forked process: a peer thread of this process
    answers only when the caller lets go of the interpreter lock, which a polling caller holds
    between its looks (a broker is another process). Yields the address and that runner."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            script(peer, FrameDecoder())

    runner: threading.Thread | BaseProcess
    if forked:
        runner = multiprocessing.get_context("fork").Process(target=serve, daemon=True)
    else:
        runner = threading.Thread(target=serve, daemon=True)
    runner.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}", runner
    finally:
        listener.close()
        if isinstance(runner, BaseProcess):
            runner.join(10)
            if runner.is_alive():
                runner.kill()


def test_a_request_timeout_leaves_the_connection_usable_and_drops_the_late_answer():
    """The peer answers the first request late, after the second was sent: the caller of the
    first got its timeout; the second gets its own answer, never the first's."""

    def answer_both_late(peer: socket.socket, decoder: FrameDecoder) -> None:
        requests: list[RemotingCommand] = []
        while len(requests) < 2:
            requests += decoder.feed(peer.recv(65536))
        for request in requests:  # the late answer first, then the one awaited
            peer.sendall(request.response(0, {"which": str(request.ext["n"])}).encode())
        time.sleep(0.5)

    with scripted_peer(answer_both_late) as (address, _):
        connection = BlockingConnection(address)
        try:
            with pytest.raises(Exception, match="in time"):
                connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {"n": "1"}), 0.2)
            answer = connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {"n": "2"}), 5)
            assert answer.ext["which"] == "2"
        finally:
            connection.close()


def test_a_peer_sending_a_broken_frame_costs_one_connection():
    def break_the_stream(peer: socket.socket, decoder: FrameDecoder) -> None:
        peer.recv(65536)
        peer.sendall(b"\x00\x00\x00\x02\x00\x00\x00\x00")  # a frame length below the minimum
        time.sleep(0.5)

    with scripted_peer(break_the_stream) as (address, _):
        connection = BlockingConnection(address)
        with pytest.raises(Exception, match="broken frame: frame length 2"):
            connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT), 5)
        assert connection.closed


def test_a_request_from_the_peer_is_refused_even_when_read_with_the_answer():
    """The peer writes the awaited answer and a request of its own in one go: the caller gets
    its answer, and the peer gets REQUEST_CODE_NOT_SUPPORTED (a producer serves nothing)."""
    refusals: list[RemotingCommand] = []

    def answer_and_ask(peer: socket.socket, decoder: FrameDecoder) -> None:
        (request,) = decoder.feed(peer.recv(65536))
        ours = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {"x": "1"})
        ours.opaque = 77
        peer.sendall(request.response(0, {"which": "answer"}).encode() + ours.encode())
        while not refusals:
            refusals.extend(decoder.feed(peer.recv(65536)))

    with scripted_peer(answer_and_ask) as (address, server):
        connection = BlockingConnection(address)
        try:
            answer = connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT), 5)
            assert answer.ext["which"] == "answer"
            server.join(5)
            (refusal,) = refusals
            assert refusal.is_response and refusal.opaque == 77
            assert refusal.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        finally:
            connection.close()
