"""The history checker on a real failover: three replicas in controller mode, eight producers
sending raw SEND_MESSAGE_V2 frames (so every answer names the replica that gave it), the master
SIGKILLed mid-run, then a final drain of the new master; every send, answer, read and the fault
go to a history file, and the checker must find nothing unsafe (the first of issue 36's
scenarios, without network namespaces)."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from tests.network.wire import send_request
from tests.plugins.controller.replicas import BROKER_NAME, ReplicaCluster, replica_cluster
from trocket.chaos import HistoryWriter, check, read_history
from trocket.client.errors import ClientError
from trocket.client.routes import RouteCache
from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

TOPIC = "Chaos"
PRODUCERS = 8
QUEUES = 4
NOT_STORED = {
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.NO_PERMISSION,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.MESSAGE_ILLEGAL,
}
"""Answers that say the message was not stored (a slave, a refused write): ``fail``. Any other
non-SUCCESS answer (FLUSH_SLAVE_TIMEOUT, ...) and a transport error are ``info`` (unknown)."""


async def master_address(routes: RouteCache) -> str | None:
    try:
        route = await routes.route(TOPIC)
    except ClientError:
        return None
    for data in (route or {}).get("brokerDatas", []):
        if data["brokerName"] == BROKER_NAME and "0" in data["brokerAddrs"]:
            return str(data["brokerAddrs"]["0"])
    return None


async def producer(process: int, cluster: ReplicaCluster, history: HistoryWriter, stop: trio.Event) -> None:
    async with RemotingClient.open() as client:
        routes = RouteCache(client, [cluster.ha.namesrv_addr], timeout=1.0)
        sent = 0
        while not stop.is_set():
            address = await master_address(routes)
            if address is None:
                await trio.sleep(0.1)
                continue
            body = f"p{process}-{sent}"
            op = f"{body}@{trio.current_time():.6f}"
            queue = sent % QUEUES
            history.event("invoke", id=op, process=f"p{process}", body=body)
            try:
                answer = await client.invoke(address, send_request(TOPIC, body.encode(), queue_id=queue), 2.0)
            except Exception as error:  # noqa: BLE001 - a transport failure: the outcome is unknown
                history.event("info", id=op, error=str(error))
                await trio.sleep(0.1)
                continue  # the same body again: a retried unknown send
            if answer.code == ResponseCode.SUCCESS:
                history.event(
                    "ok", id=op, broker=BROKER_NAME, replica=address, queue=queue,
                    offset=int(answer.ext["queueOffset"]), msg_id=answer.ext.get("msgId", ""),
                )  # fmt: skip
                sent += 1
            elif answer.code in NOT_STORED:
                history.event("fail", id=op, error=f"{answer.code} {answer.remark}")
                await trio.sleep(0.1)
            else:
                history.event("info", id=op, error=f"{answer.code} {answer.remark}")
                await trio.sleep(0.1)


async def drain(address: str, history: HistoryWriter) -> None:
    async with RemotingClient.open() as client:
        for queue in range(QUEUES):
            offset = 0
            while True:
                pull = RemotingCommand.request(
                    RequestCode.PULL_MESSAGE,
                    {"consumerGroup": "CG_drain", "topic": TOPIC, "queueId": queue, "queueOffset": offset,
                     "maxMsgNums": 32, "sysFlag": 4, "subscription": "*", "subVersion": 0},
                )  # fmt: skip
                answer = await client.invoke(address, pull, 10)
                if answer.code != ResponseCode.SUCCESS:
                    break
                for message in record.decode_records(answer.body):
                    history.event(
                        "read", process="drain", broker=BROKER_NAME, queue=queue, offset=message.queue_offset,
                        body=message.body.decode(), final=True, source=address,
                    )  # fmt: skip
                offset = int(answer.ext["nextBeginOffset"])


async def test_a_killed_master_loses_nothing_acknowledged_by_the_history(tmp_path: Path):
    path = tmp_path / "history.jsonl"
    with replica_cluster(tmp_path) as cluster, path.open("wb") as out:
        history = HistoryWriter(out, clock=trio.current_time)
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id)
        first = await cluster.wait_master(in_set=3)
        address = cluster.replicas[first].addr
        async with RemotingClient.open() as client:
            create = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6},
            )
            assert (await client.invoke(address, create, 10)).code == 0
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for process in range(PRODUCERS):
                nursery.start_soon(producer, process, cluster, history, stop)
            await trio.sleep(3)
            history.event("fault", name=f"SIGKILL replica {first} (the master)", phase="start")
            cluster.replicas[first].process.send_signal(signal.SIGKILL)
            second = await cluster.wait_master(not_id=first)
            history.event("fault", name=f"SIGKILL replica {first} (the master)", phase="stop")
            await trio.sleep(3)
            stop.set()
        await drain(cluster.replicas[second].addr, history)
    report = check(read_history(path))
    print(report.summary())
    assert report.acked > 50, report.summary()
    assert report.safe, report.summary()
    assert report.lost == () and report.inconsistent == () and report.split_brain == ()
    assert report.rto_after_fault  # service came back after the kill
