"""The clients of a fault run: producers that log every send and its outcome, and a final
drain that logs every message a replica holds.

Producers send raw ``SEND_MESSAGE_V2`` frames to whichever replica the NameServer names as the
broker set's master, rather than through the SDK's Producer: the SDK retries and hides which
replica answered, and the history needs both (an unknown outcome is retried by sending the same
body again, as a user's retry would, so the checker can tell explained duplicates apart).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs
import trio

from kernel.model import encode_properties
from trocket.chaos.history import HistoryWriter
from trocket.client.errors import ClientError
from trocket.client.routes import RouteCache
from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

NOT_STORED = frozenset(
    {
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.MESSAGE_ILLEGAL,
    }
)
"""Answers that say the message was not stored (a slave, a refused write): ``fail``. Any other
non-SUCCESS answer (FLUSH_SLAVE_TIMEOUT, SYSTEM_ERROR for too few in-sync replicas, ...) and a
transport error are ``info``: the outcome is unknown."""


@attrs.frozen
class Workload:
    """What the producers send: ``queues`` queues of ``topic`` on broker set ``broker``."""

    namesrv: str
    topic: str = "Chaos"
    broker: str = "broker-a"
    queues: int = 4
    timeout: float = 2.0
    """Seconds a send may take before its outcome is logged as unknown."""
    pause: float = 0.1
    """Seconds a producer waits after a failed or unknown send (no storm against a dead master)."""


def send_request(topic: str, queue: int, body: bytes) -> RemotingCommand:
    header = {
        "a": "PG_chaos", "b": topic, "c": "TBW102", "d": 4, "e": queue, "f": 0,
        "g": int(time.time() * 1000), "h": 0, "i": encode_properties({"WAIT": "true"}).decode(),
        "j": 0, "k": False, "m": False,
    }  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)


def pull_request(group: str, topic: str, queue: int, offset: int, max_messages: int = 32) -> RemotingCommand:
    """``PULL_MESSAGE`` of up to ``max_messages`` from ``offset`` (no suspend, no commit)."""
    header = {
        "consumerGroup": group, "topic": topic, "queueId": queue, "queueOffset": offset,
        "maxMsgNums": max_messages, "sysFlag": 4, "subscription": "*", "subVersion": 0,
    }  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header)


async def master_address(routes: RouteCache, workload: Workload) -> str | None:
    """The address the NameServer names as ``workload.broker``'s master (broker id 0), or None."""
    try:
        route = await routes.route(workload.topic)
    except ClientError:
        return None
    for data in (route or {}).get("brokerDatas", []):
        if data["brokerName"] == workload.broker and "0" in data["brokerAddrs"]:
            return str(data["brokerAddrs"]["0"])
    return None


async def produce(process: str, workload: Workload, history: HistoryWriter, stop: trio.Event) -> int:
    """Send ``<process>-<n>`` bodies round robin over the queues until ``stop``; returns how many
    were acknowledged. A body whose send had an unknown outcome is sent again."""
    acked = 0
    async with RemotingClient.open() as client:
        routes = RouteCache(client, [workload.namesrv], timeout=1.0)
        while not stop.is_set():
            address = await master_address(routes, workload)
            if address is None:
                await trio.sleep(workload.pause)
                continue
            body = f"{process}-{acked}"
            op = f"{body}@{time.monotonic():.6f}"
            queue = acked % workload.queues
            history.event("invoke", id=op, process=process, body=body)
            try:
                with trio.fail_after(workload.timeout):
                    answer = await client.invoke(
                        address, send_request(workload.topic, queue, body.encode()), workload.timeout
                    )
            except Exception as error:  # noqa: BLE001 - a transport failure or timeout: unknown
                history.event("info", id=op, replica=address, error=f"{type(error).__name__}: {error}")
                await trio.sleep(workload.pause)
                continue
            if answer.code == ResponseCode.SUCCESS:
                history.event(
                    "ok", id=op, broker=workload.broker, replica=address, queue=queue,
                    offset=int(answer.ext["queueOffset"]), msg_id=answer.ext.get("msgId", ""),
                )  # fmt: skip
                acked += 1
                continue
            kind = "fail" if answer.code in NOT_STORED else "info"
            history.event(kind, id=op, replica=address, error=f"{answer.code} {answer.remark}")
            await trio.sleep(workload.pause)
    return acked


async def drain(address: str, workload: Workload, history: HistoryWriter, *, timeout: float = 10) -> int:
    """Every message of the workload's queues on the replica at ``address``, logged as final
    reads; returns how many."""
    read = 0
    async with RemotingClient.open() as client:
        for queue in range(workload.queues):
            offset = 0
            while True:
                pull = pull_request("CG_chaos_drain", workload.topic, queue, offset)
                answer = await client.invoke(address, pull, timeout)
                if answer.code != ResponseCode.SUCCESS:
                    break
                for message in record.decode_records(answer.body):
                    history.event(
                        "read", process="drain", broker=workload.broker, queue=queue,
                        offset=message.queue_offset, body=message.body.decode(), final=True, source=address,
                    )  # fmt: skip
                    read += 1
                offset = int(answer.ext["nextBeginOffset"])
    return read


async def consume(workload: Workload, history: HistoryWriter, stop: trio.Event) -> int:
    """Read every queue from whichever replica the NameServer names as master, as a consumer
    with its offsets in hand would, until ``stop``; every message logged as a non-final read
    (``source`` consumer). A message read here and then gone from the set (served before it
    was safe, then cut by a failover) shows as two bodies at one offset, or a lost read.
    Returns how many were read."""
    offsets = dict.fromkeys(range(workload.queues), 0)
    read = 0
    async with RemotingClient.open() as client:
        routes = RouteCache(client, [workload.namesrv], timeout=1.0)
        while not stop.is_set():
            address = await master_address(routes, workload)
            if address is None:
                await trio.sleep(workload.pause)
                continue
            progressed = False
            for queue, offset in offsets.items():
                pull = pull_request("CG_chaos_live", workload.topic, queue, offset)
                try:
                    with trio.fail_after(workload.timeout):
                        answer = await client.invoke(address, pull, workload.timeout)
                except Exception:  # noqa: BLE001 - a dead or cut master: ask the routes again
                    break
                if answer.code != ResponseCode.SUCCESS:
                    continue
                for message in record.decode_records(answer.body):
                    history.event(
                        "read", process="consumer", broker=workload.broker, queue=queue,
                        offset=message.queue_offset, body=message.body.decode(), final=False, source=address,
                    )  # fmt: skip
                    read += 1
                    progressed = True
                offsets[queue] = int(answer.ext["nextBeginOffset"])
            if not progressed:
                await trio.sleep(workload.pause)
    return read


async def create_topic(addresses: Sequence[str], workload: Workload) -> None:
    """The workload's topic on every replica given (a slave refuses; the master's copy reaches
    the slaves with its metadata)."""
    async with RemotingClient.open() as client:
        for address in addresses:
            create = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": workload.topic, "readQueueNums": workload.queues,
                 "writeQueueNums": workload.queues, "perm": 6},
            )  # fmt: skip
            await client.invoke(address, create, 10)
