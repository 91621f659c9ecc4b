"""``trocket produce`` and ``trocket consume``: send and read messages from a shell, with the
SDK's producer, push consumer and (``--pop``) simple consumer (what RocketMQ users do with its
``tools.sh`` examples)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import trio

from trocket.cli.connection_options import add_connection_options, credentials_of, tls_of
from trocket.client import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageModel,
    PoppedMessage,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
    TransactionProducer,
    TransactionState,
)
from trocket.client.errors import ClientError
from wire.trace_data import TRACE_TOPIC

DEFAULT_NAMESRV = "127.0.0.1:9876"
FROM_WHERE = {
    "last": ConsumeFromWhere.LAST_OFFSET,
    "first": ConsumeFromWhere.FIRST_OFFSET,
    "timestamp": ConsumeFromWhere.TIMESTAMP,
}


def add_parsers(sub: Any) -> None:
    produce = sub.add_parser("produce", help="send messages (a body N times, or one per line of a file)")
    produce.add_argument("-n", "--namesrvAddr", dest="namesrv", default=DEFAULT_NAMESRV)
    produce.add_argument("-t", "--topic", required=True)
    produce.add_argument("--tag", default=None, help="the messages' tag")
    produce.add_argument("-k", "--keys", default="", help="comma-separated keys (indexed by the broker)")
    source = produce.add_mutually_exclusive_group(required=True)
    source.add_argument("-b", "--body", help="the body; {i} is replaced by the message's number")
    source.add_argument("-f", "--file", type=Path, help="one message per line ('-' reads stdin)")
    produce.add_argument(
        "-c", "--count", type=int, default=None, help="messages to send (default: 1 body / all lines)"
    )
    produce.add_argument(
        "-r", "--rate", type=float, default=0.0, help="messages per second (default: as fast as acked)"
    )
    produce.add_argument("-g", "--group", default="TROCKET_CLI_PRODUCER", help="producer group")
    produce.add_argument("--json", action="store_true", help="one JSON object per send result")
    produce.add_argument(
        "--transactional",
        nargs="?",
        const="commit",
        choices=sorted(STATES),
        help="send each message as a transaction and end it so (default commit; unknown leaves it "
        "to the broker's check-back)",
    )
    produce.add_argument(
        "--check",
        choices=sorted(STATES),
        default="commit",
        help="with --transactional: the answer to check-backs that arrive while this runs",
    )
    _trace_options(produce)
    add_connection_options(produce)
    produce.set_defaults(handler=cmd_produce)

    consume = sub.add_parser("consume", help="print a topic's messages as a push consumer of a group")
    consume.add_argument("-n", "--namesrvAddr", dest="namesrv", default=DEFAULT_NAMESRV)
    consume.add_argument("-g", "--group", required=True, help="consumer group (offsets are committed for it)")
    consume.add_argument("-t", "--topic", required=True)
    consume.add_argument(
        "-s", "--subExpression", dest="expression", default="*", help="tag expression: * or a || b"
    )
    consume.add_argument(
        "--from",
        dest="from_where",
        choices=sorted(FROM_WHERE),
        default="last",
        help="where a group new to a queue starts (default last)",
    )
    consume.add_argument(
        "--timestamp",
        default=None,
        help="with --from timestamp: epoch ms or ISO time (default: 30 minutes ago)",
    )
    consume.add_argument("-c", "--count", type=int, default=None, help="exit after this many messages")
    consume.add_argument("--broadcast", action="store_true", help="broadcasting instead of clustering")
    consume.add_argument(
        "--pop",
        action="store_true",
        help="consume by POP as RocketMQ 5's SimpleConsumer (each message acked after it is printed)",
    )
    consume.add_argument(
        "--invisible",
        type=float,
        default=30.0,
        help="with --pop: seconds a received message stays invisible before it is delivered again",
    )
    consume.add_argument("--json", action="store_true", help="one JSON object per message")
    _trace_options(consume)
    add_connection_options(consume)
    consume.set_defaults(handler=cmd_consume)


def _trace_options(parser: argparse.ArgumentParser) -> None:
    """RocketMQ's ``enableMsgTrace`` / ``customizedTraceTopic`` (docs/message-trace.md)."""
    parser.add_argument(
        "--trace", action="store_true", help="write message-trace records (read them with queryMsgTraceById)"
    )
    parser.add_argument("--traceTopic", default=TRACE_TOPIC, help=f"the trace topic (default {TRACE_TOPIC})")


# --- produce ----------------------------------------------------------------------------------

STATES = {
    "commit": TransactionState.COMMIT,
    "rollback": TransactionState.ROLLBACK,
    "unknown": TransactionState.UNKNOW,
}


def cmd_produce(args: argparse.Namespace) -> int:
    bodies = _bodies(args)
    return trio.run(_produce, args, bodies)


def _bodies(args: argparse.Namespace) -> list[bytes]:
    if args.count is not None and args.count < 1:
        raise ClientError("--count must be at least 1")
    if args.body is not None:
        return [args.body.replace("{i}", str(i)).encode() for i in range(args.count or 1)]
    try:
        text = sys.stdin.read() if str(args.file) == "-" else args.file.read_text(encoding="utf-8")
    except OSError as error:
        raise ClientError(f"cannot read {args.file}: {error.strerror}") from None
    lines = [line for line in text.splitlines() if line]
    if not lines:
        raise ClientError(f"{args.file} has no non-empty line to send")
    return [line.encode() for line in lines[: args.count]]


async def _produce(args: argparse.Namespace, bodies: list[bytes]) -> int:
    keys = [k for k in args.keys.split(",") if k]
    started = time.monotonic()
    security = {
        "credentials": credentials_of(args),
        "tls": tls_of(args),
        "trace": args.trace,
        "trace_topic": args.traceTopic,
    }
    producer: Producer | TransactionProducer = Producer(args.group, args.namesrv, **security)
    if args.transactional:
        decided, checked = STATES[args.transactional], STATES[args.check]
        producer = TransactionProducer(args.group, args.namesrv, check_listener=lambda _: checked, **security)
    async with producer:
        for i, body in enumerate(bodies):
            if args.rate > 0:
                await trio.sleep_until(
                    trio.current_time() + max(0.0, started + i / args.rate - time.monotonic())
                )
            message = Message(args.topic, body, tags=args.tag, keys=keys)
            state = ""
            if isinstance(producer, TransactionProducer):
                sent = await producer.send_message_in_transaction(message, lambda _m, _a: decided)
                result, state = sent.send_result, sent.local_state.name
            else:
                result = await producer.send(message)
            if args.json:
                row = {
                    "status": result.status.value,
                    "msgId": result.msg_id,
                    "offsetMsgId": result.offset_msg_id,
                    "brokerName": result.queue.broker_name,
                    "queueId": result.queue.queue_id,
                    "queueOffset": result.queue_offset,
                }
                print(json.dumps({**row, "transaction": state} if state else row), flush=True)
            else:
                print(
                    f"{result.status.value} {result.msg_id} "
                    f"{result.queue.broker_name}:{result.queue.queue_id}@{result.queue_offset}"
                    f"{' ' + state if state else ''}",
                    flush=True,
                )
    elapsed = time.monotonic() - started
    print(
        f"sent {len(bodies)} message(s) to {args.topic} in {elapsed:.2f} s "
        f"({len(bodies) / elapsed if elapsed else 0:.0f} msgs/s)",
        file=sys.stderr,
    )
    return 0


# --- consume ----------------------------------------------------------------------------------


async def _consume_by_pop(args: argparse.Namespace) -> int:
    """Receive, print, ack until ``--count`` or a signal (RocketMQ 5's simple consumer loop)."""
    printed = 0
    consumer = SimpleConsumer(
        args.group,
        args.namesrv,
        {args.topic: args.expression},
        await_duration=5.0,
        credentials=credentials_of(args),
        tls=tls_of(args),
    )
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with consumer, trio.open_nursery() as nursery:

            async def on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(on_signal)
            while args.count is None or printed < args.count:
                wanted = min(32, args.count - printed) if args.count is not None else 32
                for message in await consumer.receive(wanted, args.invisible):
                    print(_popped_line(message, args.json), flush=True)
                    await consumer.ack(message)
                    printed += 1
            nursery.cancel_scope.cancel()
    print(f"consumed {printed} message(s) by POP; acked for group {args.group}", file=sys.stderr)
    return 0


def _popped_line(message: PoppedMessage, as_json: bool) -> str:
    body = message.body.decode("utf-8", errors="replace")
    if as_json:
        return json.dumps(
            {
                "topic": message.topic,
                "brokerName": message.broker_name,
                "queueId": message.queue_id,
                "queueOffset": message.queue_offset,
                "msgId": message.message_id,
                "tags": message.tag,
                "keys": message.keys,
                "deliveryAttempt": message.delivery_attempt,
                "storeTimestamp": message.store_timestamp,
                "body": body,
            }
        )
    return (
        f"{message.broker_name}:{message.queue_id}@{message.queue_offset} {message.message_id} "
        f"tags={message.tag or ''} keys={','.join(message.keys)} attempt={message.delivery_attempt} {body}"
    )


def cmd_consume(args: argparse.Namespace) -> int:
    return trio.run(_consume, args)


def _timestamp(text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise ClientError(f"--timestamp {text!r} is neither epoch milliseconds nor an ISO time") from None


def _line(message: ReceivedMessage, as_json: bool) -> str:
    body = message.body.decode("utf-8", errors="replace")
    if as_json:
        return json.dumps(
            {
                "topic": message.topic,
                "brokerName": message.queue.broker_name,
                "queueId": message.queue.queue_id,
                "queueOffset": message.queue_offset,
                "msgId": message.msg_id,
                "tags": message.tags,
                "keys": message.keys,
                "reconsumeTimes": message.reconsume_times,
                "storeTimestamp": message.store_timestamp,
                "body": body,
            }
        )
    return (
        f"{message.queue.broker_name}:{message.queue.queue_id}@{message.queue_offset} {message.msg_id} "
        f"tags={message.tags or ''} keys={','.join(message.keys)} {body}"
    )


async def _consume(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        raise ClientError("--count must be at least 1")
    if args.pop:
        if args.broadcast or args.from_where != "last" or args.timestamp:
            raise ClientError("--pop consumes as the group shares it: no --broadcast, --from or --timestamp")
        return await _consume_by_pop(args)
    consumer = PushConsumer(
        args.group,
        args.namesrv,
        message_model=MessageModel.BROADCASTING if args.broadcast else MessageModel.CLUSTERING,
        consume_from_where=FROM_WHERE[args.from_where],
        consume_timestamp_ms=_timestamp(args.timestamp),
        consume_thread_max=1,
        credentials=credentials_of(args),
        tls=tls_of(args),
        trace=args.trace,
        trace_topic=args.traceTopic,
    )
    consumer.subscribe(args.topic, args.expression)
    printed = 0
    enough = trio.Event()

    async def show(messages: list[ReceivedMessage], context: object) -> ConsumeStatus:
        nonlocal printed
        if enough.is_set():
            return ConsumeStatus.RECONSUME_LATER  # beyond --count: left for the next consumer
        for message in messages:
            print(_line(message, args.json), flush=True)
        printed += len(messages)
        if args.count is not None and printed >= args.count:
            enough.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_listener(show)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with consumer:
            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    async for _ in signals:
                        enough.set()
                        return

                nursery.start_soon(on_signal)
                await enough.wait()
                nursery.cancel_scope.cancel()
    print(f"consumed {printed} message(s); offsets committed for group {args.group}", file=sys.stderr)
    return 0
