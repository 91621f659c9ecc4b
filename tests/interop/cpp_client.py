"""Drives the official RocketMQ C++ client (PyPI ``rocketmq==0.4.4``) for the interop tests.

Run as a subprocess (the client is a native library with its own threads); prints one JSON
line per result so the test can check exactly what the official client saw.

    python cpp_client.py produce NAMESRV TOPIC COUNT
    python cpp_client.py consume NAMESRV TOPIC GROUP EXPRESSION EXPECTED SECONDS [MODE]
    python cpp_client.py produce_for NAMESRV TOPIC SECONDS

``produce_for`` sends ``p-<i>`` one at a time for SECONDS, through whatever happens to the
brokers: each send is a ``sync`` line (with the wall time) or a ``failed`` line, and it goes on.
With ``CPP_CLIENT_OK_AFTER_FILE`` set, it goes on past SECONDS (at most ``CPP_CLIENT_EXTRA_SECONDS``
more) until 20 sends acknowledged after the time in that file (written by the test when it
kills a master) have been seen: the client learns a new master only from its route refresh,
every 30 s, so one slow election must not leave the run without a refresh after it.
With ``CPP_CLIENT_EXPECT_FILE`` set, ``consume`` also stops once every body listed in that
file (one JSON list, written when known) was received.

MODE ``reconsume_first`` fails each message once; ``always_fail`` fails every delivery and
EXPECTED counts failures instead of distinct messages received.

With ``CPP_CLIENT_ACCESS_KEY`` and ``CPP_CLIENT_SECRET_KEY`` set, both sign with
``set_session_credentials`` (RocketMQ ACL), and a refused send ends ``produce`` with a
``refused`` line instead of an error.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

_OUTPUT = threading.Lock()


def produce(namesrv: str, topic: str, count: int) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer("PG_interop")
    producer.set_namesrv_addr(namesrv)
    _sign(producer)
    producer.start()
    try:
        for i in range(count):
            tag = "TagA" if i % 2 == 0 else "TagB"
            message = Message(topic)
            message.set_keys(f"key-{i}")
            message.set_tags(tag)
            message.set_property("seq", str(i))
            message.set_body(f"sync-{i}" if i % 10 else "x" * 5000 + f"-{i}")  # some bodies get zlib'd
            try:
                result = producer.send_sync(message)
            except Exception as error:  # noqa: BLE001 - the refusal is the result being tested
                emit({"kind": "refused", "i": i, "error": str(error)})
                return
            emit(
                {
                    "kind": "sync",
                    "i": i,
                    "tag": tag,
                    "status": int(result.status),
                    "msg_id": result.msg_id,
                    "offset": result.offset,
                }
            )
        oneway = Message(topic)
        oneway.set_tags("TagA")
        oneway.set_keys("oneway-key")
        oneway.set_body("oneway")
        producer.send_oneway(oneway)
        emit({"kind": "oneway"})
        for i in range(4):
            ordered = Message(topic)
            ordered.set_tags("TagA")
            ordered.set_keys(f"order-{i}")
            ordered.set_body(f"orderly-{i}")
            result = producer.send_orderly(ordered, 7)
            emit(
                {
                    "kind": "orderly",
                    "i": i,
                    "status": int(result.status),
                    "msg_id": result.msg_id,
                    "offset": result.offset,
                }
            )
    finally:
        producer.shutdown()


def produce_for(namesrv: str, topic: str, seconds: float) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer("PG_interop_failover")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    deadline = time.monotonic() + seconds
    last_call = deadline + float(os.environ.get("CPP_CLIENT_EXTRA_SECONDS", "0"))
    acked_at: list[float] = []
    i = 0
    try:
        while time.monotonic() < deadline or (time.monotonic() < last_call and not _seen_ok_after(acked_at)):
            message = Message(topic)
            message.set_keys(f"key-{i}")
            message.set_body(f"p-{i}")
            try:
                result = producer.send_sync(message)
            except Exception as error:  # noqa: BLE001 - a failover in progress: go on
                emit({"kind": "failed", "i": i, "t": time.time(), "error": str(error)[:200]})
                time.sleep(0.2)
            else:
                now = time.time()
                emit({"kind": "sync", "i": i, "t": now, "status": int(result.status)})
                if int(result.status) == 0:
                    acked_at.append(now)
            i += 1
            time.sleep(0.02)
        emit({"kind": "done"})  # every send reported: what comes after is the client's shutdown
    finally:
        producer.shutdown()


def _seen_ok_after(acked_at: list[float], enough: int = 20) -> bool:
    """Whether ``enough`` sends were acknowledged after the time in ``CPP_CLIENT_OK_AFTER_FILE``
    (True without the variable; False while the file is not written)."""
    path = os.environ.get("CPP_CLIENT_OK_AFTER_FILE")
    if not path:
        return True
    try:
        with open(path) as source:
            since = float(source.read())
    except (OSError, ValueError):
        return False
    return sum(1 for t in acked_at if t > since) >= enough


def _expected_bodies() -> set[str] | None:
    path = os.environ.get("CPP_CLIENT_EXPECT_FILE")
    if not path or not os.path.exists(path):
        return None
    with open(path) as source:
        return set(json.load(source))


def consume(
    namesrv: str, topic: str, group: str, expression: str, expected: int, seconds: float, mode: str
) -> None:
    from rocketmq.client import PushConsumer
    from rocketmq.ffi import _CConsumeStatus

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    _sign(consumer)
    seen: list[dict] = []
    failed_once: set[str] = set()
    rejected: list[str] = []
    received: set[str] = set()
    done = rejected if mode == "always_fail" else received  # distinct bodies: copies may repeat

    def on_message(_consumer, handle):  # raw callback: return a status code, never raise
        from rocketmq.client import RecvMessage

        message = RecvMessage(handle)
        body = _text(message.body)
        if mode == "always_fail" or (mode == "reconsume_first" and body not in failed_once):
            failed_once.add(body)
            rejected.append(body)
            emit({"kind": "rejected", "body": body, "reconsume": message.reconsume_times})
            return _CConsumeStatus.RECONSUME_LATER.value
        seen.append(
            {
                "kind": "received",
                "body": body,
                "tags": _text(message.tags),
                "topic": _text(message.topic),
                "keys": _text(message.keys),
                "reconsume": message.reconsume_times,
                "id": _text(message.id),
                "queue": message.queue_id,
                "offset": message.queue_offset,
            }
        )
        received.add(body)
        emit(seen[-1])
        return _CConsumeStatus.CONSUME_SUCCESS.value

    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import dll

    ffi_check(dll.Subscribe(consumer._handle, topic.encode(), expression.encode()))
    consumer._register_callback(on_message)
    consumer.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(done) < expected:
        wanted = _expected_bodies()
        if wanted is not None and wanted <= received:
            break
        time.sleep(0.1)
    time.sleep(1.0)  # anything arriving late (a duplicate) is still recorded
    consumer.shutdown()


def _sign(client: object) -> None:
    access_key = os.environ.get("CPP_CLIENT_ACCESS_KEY")
    if access_key:
        client.set_session_credentials(access_key, os.environ["CPP_CLIENT_SECRET_KEY"], "ALIYUN")


def emit(record: dict) -> None:
    """One result line; the marker lets the test find it even if the native library's own
    logging shares the line."""
    line = "@RESULT@" + json.dumps(record) + "\n"
    with _OUTPUT:  # callbacks run on several native threads; print() could interleave lines
        sys.stdout.write(line)
        sys.stdout.flush()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "produce":
        produce(args[0], args[1], int(args[2]))
    elif command == "produce_for":
        produce_for(args[0], args[1], float(args[2]))
    else:
        consume(
            args[0], args[1], args[2], args[3], int(args[4]), float(args[5]), args[6] if len(args) > 6 else ""
        )
