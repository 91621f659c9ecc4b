"""The official C++ client (``rocketmq==0.4.4``) through an automatic failover: a producer and a
push consumer run while the controller-mode master is SIGKILLed; both follow the route to the
elected master (the client refreshes routes from the NameServer every 30 s), and the consumer
receives every message the producer saw acknowledged (issue 17)."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import trio

from tests.interop.conftest import run_client
from tests.plugins.controller.replicas import replica_cluster

TOPIC = "InteropFailover"
PRODUCE_SECONDS = 50
PRODUCE_EXTRA_SECONDS = 35
"""How much longer the producer may go on when it has not yet sent through the elected master
(one more of the client's 30 s route refreshes)."""
KILL_AFTER = 8
SEND_OK = 0


async def test_official_producer_and_consumer_follow_an_automatic_failover(tmp_path: Path):
    with replica_cluster(tmp_path) as cluster:
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id)
        first = await cluster.wait_master(in_set=3)
        namesrv = cluster.ha.namesrv_addr
        acked_file = tmp_path / "acked.json"
        killed_file = tmp_path / "killed_at"
        results: dict[str, list[dict]] = {}

        async def produce() -> None:
            sent = await trio.to_thread.run_sync(
                functools.partial(
                    run_client,
                    "produce_for",
                    namesrv,
                    TOPIC,
                    str(PRODUCE_SECONDS),
                    timeout=PRODUCE_SECONDS + PRODUCE_EXTRA_SECONDS + 60,
                    env_extra={
                        "CPP_CLIENT_OK_AFTER_FILE": str(killed_file),
                        "CPP_CLIENT_EXTRA_SECONDS": str(PRODUCE_EXTRA_SECONDS),
                    },
                )
            )
            results["sent"] = sent
            acked = [f"p-{r['i']}" for r in sent if r["kind"] == "sync" and r["status"] == SEND_OK]
            acked_file.write_text(json.dumps(acked))  # the consumer stops once it has all of them

        async def consume() -> None:
            results["received"] = await trio.to_thread.run_sync(
                functools.partial(
                    run_client,
                    "consume",
                    namesrv,
                    TOPIC,
                    "CG_interop_failover",
                    "*",
                    str(10**9),
                    str(PRODUCE_SECONDS + PRODUCE_EXTRA_SECONDS + 90),
                    timeout=PRODUCE_SECONDS + PRODUCE_EXTRA_SECONDS + 150,
                    env_extra={"CPP_CLIENT_EXPECT_FILE": str(acked_file)},
                )
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            nursery.start_soon(consume)
            await trio.sleep(KILL_AFTER)
            killed_at = time.time()
            cluster.replicas[first].kill()
            killed_file.write_text(repr(killed_at))
            second = await cluster.wait_master(not_id=first)
            elected_after = time.time() - killed_at

        assert second != first
        acked = [r for r in results["sent"] if r["kind"] == "sync" and r["status"] == SEND_OK]
        assert any(r["t"] < killed_at for r in acked), "the official producer wrote to the first master"
        after = [r for r in acked if r["t"] > killed_at]
        assert after, (
            f"the official producer wrote to the elected master (elected {elected_after:.1f}s after "
            f"the kill); what it saw after the kill: {_summary(results['sent'], killed_at)}"
        )
        received = {r["body"] for r in results["received"] if r["kind"] == "received"}
        missing = sorted({f"p-{r['i']}" for r in acked} - received, key=lambda b: int(b[2:]))
        assert not missing, f"{len(missing)} acknowledged messages never consumed: {missing[:10]}"


def _summary(sent: list[dict], since: float) -> str:
    """Each kind of result after ``since`` with its count and its first and last time (seconds
    after ``since``), and the last error: what a failure needs to be read without a rerun."""
    kinds: dict[str, list[dict]] = {}
    for record in sent:
        if record.get("t", 0) > since:
            kinds.setdefault(f"{record['kind']}/{record.get('status', '')}", []).append(record)
    parts = [
        f"{kind} x{len(rows)} ({rows[0]['t'] - since:.1f}-{rows[-1]['t'] - since:.1f}s)"
        for kind, rows in kinds.items()
    ]
    errors = [r["error"] for r in sent if r.get("t", 0) > since and "error" in r]
    return "; ".join(parts) + (f"; last error: {errors[-1]}" if errors else "") or "nothing"
