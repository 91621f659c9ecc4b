"""Several official C++ producers sending at once (each its own process and connection, one send
in flight): the broker reads their lone sends together (``wire.remoting.read_reactor``), and
each acknowledged message is delivered once, on its own topic."""

from __future__ import annotations

import threading

from tests.interop.conftest import RunningBroker, run_client

PRODUCERS = 4
SECONDS = "3"


def test_official_producers_sending_at_once_each_get_their_own_messages_back(running_broker: RunningBroker):
    topics = [f"Concurrent{index}" for index in range(PRODUCERS)]
    results: dict[str, list[dict]] = {}

    def produce(topic: str) -> None:
        results[topic] = run_client(
            "produce_for", running_broker.namesrv, topic, SECONDS, shutdown_abort_ok=True
        )

    threads = [threading.Thread(target=produce, args=(topic,)) for topic in topics]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    figures = running_broker.figures()
    for topic in topics:
        acknowledged = {f"p-{r['i']}" for r in results[topic] if r["kind"] == "sync" and r["status"] == 0}
        assert len(acknowledged) > 10 and not [r for r in results[topic] if r["kind"] == "failed"], results[
            topic
        ]
        received = run_client(
            "consume", running_broker.namesrv, topic, f"CG_{topic}", "*", str(len(acknowledged)), "60"
        )
        bodies = [r["body"] for r in received if r["kind"] == "received"]
        assert sorted(bodies) == sorted(acknowledged), (
            f"{topic}: every acknowledged send once (sendsReadTogetherTotal "
            f"{figures['sendsReadTogetherTotal']})"
        )
    sends = sum(1 for records in results.values() for r in records if r["kind"] == "sync")
    assert int(figures["putMessageTimesTotal"]) >= sends
