"""Transactions against a real ``trocket up`` process (default plugins, store_mmap), as an
application uses them: a mix of outcomes, a broker SIGKILLed between prepare and end, a
producer that is gone when the broker checks back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from tests.interop.conftest import RunningBroker, start_broker, subprocess_env
from tests.network.wire import pulled_bodies
from tests.support import start_logged
from trocket import Message, TransactionProducer, TransactionState
from trocket.admin.client import AdminClient, AdminError
from wire.remoting import RemotingClient

FAST = """
[transaction]
check_interval = "500ms"
timeout = "300ms"
check_max = 3
op_batch_interval = "200ms"
"""


async def visible_bodies(broker: RunningBroker, topic: str, queues: int = 4) -> list[bytes]:
    """Every message of the topic's first ``queues`` queues, by pulling as a consumer would."""
    async with RemotingClient.open() as client:
        return sorted((await pulled_bodies(client, broker.broker, topic, queues)).elements())


async def figures(broker: RunningBroker) -> dict[str, str]:
    """The broker's runtime figures (what ``trocket admin brokerStatus`` shows)."""
    async with AdminClient.open([broker.namesrv]) as admin:
        return await admin.broker_runtime_info(broker.broker)


async def until_figure(broker: RunningBroker, name: str, wanted: int, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while int((await figures(broker)).get(name, "0")) < wanted:  # noqa: ASYNC110 - polls a process
            await trio.sleep(0.2)


async def routed(admin: AdminClient, topic: str) -> bool:
    try:
        return bool((await admin.route(topic))["queueDatas"])
    except AdminError:  # no route yet
        return False


def decide(state: TransactionState):
    return lambda message, arg: state


@contextmanager
def running_broker(tmp_path, tables: str) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path, tables=tables)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def broker(tmp_path):
    with running_broker(tmp_path, FAST) as running:
        yield running


async def test_committed_transactions_become_visible_once_and_the_rest_never(broker):
    """120 transactions: 30 commit, 30 roll back, 20 commit when checked, 20 roll back when
    checked, 20 never answer and are given up after the maximum checks."""
    plan = (
        [(f"commit-{i}", TransactionState.COMMIT, None) for i in range(30)]
        + [(f"rollback-{i}", TransactionState.ROLLBACK, None) for i in range(30)]
        + [(f"check-commit-{i}", TransactionState.UNKNOW, TransactionState.COMMIT) for i in range(20)]
        + [(f"check-rollback-{i}", TransactionState.UNKNOW, TransactionState.ROLLBACK) for i in range(20)]
        + [(f"unknown-{i}", TransactionState.UNKNOW, TransactionState.UNKNOW) for i in range(20)]
    )
    on_check = {body.encode(): checked for body, _, checked in plan}
    checks: list[bytes] = []

    def check(message):
        checks.append(message.body)
        return on_check[message.body]

    async with TransactionProducer(
        "PG_mix", broker.namesrv, check_listener=check, heartbeat_interval=1.0
    ) as producer:
        async with trio.open_nursery() as nursery:
            for body, local, _ in plan:
                nursery.start_soon(
                    producer.send_message_in_transaction, Message("Mixed", body.encode()), decide(local)
                )
        await until_figure(broker, "transactionGivenUp", 20)
    assert await visible_bodies(broker, "Mixed") == sorted(
        body.encode() for body, local, checked in plan if TransactionState.COMMIT in (local, checked)
    )
    table = await figures(broker)
    assert table["transactionCommitted"] == "50" and table["transactionRolledBack"] == "50"
    assert table["transactionHalfOpen"] == "0"
    assert checks.count(b"unknown-0") == 3 and checks.count(b"check-commit-0") == 1
    assert not any(body.startswith(b"commit-") for body in checks)
    assert broker.admin_json("pendingTransactions", "-g", "PG_mix") == []
    given_up = await visible_bodies(broker, "TRANS_CHECK_MAX_TIME_TOPIC", queues=1)
    assert given_up == sorted(f"unknown-{i}".encode() for i in range(20))
    async with AdminClient.open([broker.namesrv]) as admin:  # registered: an operator finds it
        with trio.fail_after(10):
            while not await routed(admin, "TRANS_CHECK_MAX_TIME_TOPIC"):  # noqa: ASYNC110
                await trio.sleep(0.1)


def still_pending(broker: RunningBroker, group: str) -> bool:
    """Whether the group has open transactions, or the restarted broker has not registered yet
    (the admin command then fails rather than answering none). Blocking: a subprocess."""
    shown = broker.admin("pendingTransactions", "-g", group, "--json", check=False)
    if shown.returncode != 0:
        assert "no master broker is registered" in shown.stderr, shown.stderr
        return True
    return bool(json.loads(shown.stdout))


PATIENT = FAST.replace('timeout = "300ms"', 'timeout = "5s"')
"""FAST, but a half message is checked only once 5 s old: the transactions a test leaves open are
still open (none checked, none given up) when it kills the broker a moment later, however
slow the machine."""


@pytest.fixture
def patient_broker(tmp_path):
    with running_broker(tmp_path, PATIENT) as running:
        yield running


async def test_a_broker_killed_between_prepare_and_end_resolves_every_transaction_after_restart(
    patient_broker, tmp_path
):
    """Ten transactions ended, ten left open (the producer's end never reaches the broker), the
    broker SIGKILLed and restarted: the check-backs resolve the open ones. With FAST's 300 ms
    the first broker checked them while a slow admin call held the producer's loop, reached
    ``check_max`` before the kill, and the restarted broker gave them up at once."""
    broker = patient_broker
    database: dict[bytes, TransactionState] = {}

    def check(message):
        return database[message.body]

    async with TransactionProducer(
        "PG_kill", broker.namesrv, check_listener=check, heartbeat_interval=0.5
    ) as producer:
        for i in range(10):  # ended before the crash
            state = TransactionState.COMMIT if i % 2 == 0 else TransactionState.ROLLBACK
            database[f"before-{i}".encode()] = state
            await producer.send_message_in_transaction(
                Message("Killed", f"before-{i}".encode()), decide(state)
            )
        for i in range(10):  # prepared; the end never reaches the broker
            database[f"open-{i}".encode()] = TransactionState.COMMIT if i < 6 else TransactionState.ROLLBACK
            await producer.send_message_in_transaction(
                Message("Killed", f"open-{i}".encode()), decide(TransactionState.UNKNOW)
            )
        open_now = await trio.to_thread.run_sync(broker.admin_json, "pendingTransactions", "-g", "PG_kill")
        assert len(open_now) >= 1, open_now  # all ten unless this call outlasted the 5 s
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(timeout=30)
        config = tmp_path / "trocket.toml"
        broker.process = start_logged("broker", ["up", "-c", str(config)], broker.log, fresh=False)
        with trio.fail_after(60):
            # On a thread: the producer's loop must answer the check-backs meanwhile (a blocking
            # admin call of a second held their answers past the last check the broker allows).
            while await trio.to_thread.run_sync(still_pending, broker, "PG_kill"):  # noqa: ASYNC110
                await trio.sleep(0.3)
    expected = sorted(body for body, state in database.items() if state is TransactionState.COMMIT)
    assert await visible_bodies(broker, "Killed") == expected


async def test_the_check_back_goes_to_another_producer_of_the_group(broker):
    """The producer that prepared is a `trocket produce` process that has exited; a second
    producer of the same group answers the check-back."""
    sent = subprocess.run(  # noqa: ASYNC221 - the test waits for the command, as a shell would
        [sys.executable, "-m", "trocket", "produce", "-n", broker.namesrv, "-t", "Orphan", "-g", "PG_orphan",
         "-b", "orphan-{i}", "-c", "3", "--transactional", "unknown", "--json"],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    rows = [json.loads(line) for line in sent.stdout.splitlines() if line.startswith("{")]
    assert [r["transaction"] for r in rows] == ["UNKNOW"] * 3
    assert await visible_bodies(broker, "Orphan") == []
    async with TransactionProducer(
        "PG_orphan", broker.namesrv, check_listener=lambda m: TransactionState.COMMIT, heartbeat_interval=0.5
    ) as survivor:
        await survivor.send_message_in_transaction(
            Message("Orphan", b"own"), decide(TransactionState.ROLLBACK)
        )
        with trio.fail_after(30):
            while len(await visible_bodies(broker, "Orphan")) < 3:  # noqa: ASYNC110
                await trio.sleep(0.2)
    assert await visible_bodies(broker, "Orphan") == [b"orphan-0", b"orphan-1", b"orphan-2"]
