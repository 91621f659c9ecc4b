"""Consumers choose their allocate strategy by name: built-in ones, with options, and a
third-party one installed through the ``trocket.allocate_strategies`` entry-point group (read
by the client alone: a broken broker plugin installed beside it does not matter)."""

from __future__ import annotations

import textwrap

import pytest

from tests.client.consumer_helpers import Collector, eventually, produce
from trocket import ClientError, PushConsumer


def _install_by_parity(tmp_path, monkeypatch) -> None:
    (tmp_path / "parity_strategy.py").write_text(
        textwrap.dedent(
            """
            from kernel import AllocateStrategy

            def by_parity(group, current_id, queues, consumer_ids):
                if current_id not in consumer_ids[:2]:
                    return []
                parity = consumer_ids.index(current_id)
                return [q for q in queues if q.queue_id % 2 == parity]

            BY_PARITY = AllocateStrategy("by_parity", by_parity, "even/odd split")
            """
        )
    )
    dist = tmp_path / "parity_strategy-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: parity-strategy\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[trocket.allocate_strategies]\nparity = parity_strategy:BY_PARITY\n"
        # a broker plugin that cannot even be imported: consumers must not care
        "[trocket.plugins]\nbroken = no_such_module_anywhere\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


async def test_a_third_party_strategy_is_selected_by_name(cluster_factory, tmp_path, monkeypatch):
    _install_by_parity(tmp_path, monkeypatch)
    async with cluster_factory() as cluster:
        await produce(cluster.namesrv_addr, "Parity", 8)  # 4 queues
        consumers = []
        for name in ("p0", "p1"):
            consumer = PushConsumer(
                "CG_parity", cluster.namesrv_addr, allocate_strategy="by_parity", instance_name=name
            )
            consumer.subscribe("Parity")
            consumer.register_listener(Collector())
            await consumer.start()
            consumers.append(consumer)
        try:

            def split() -> list[set[int]]:
                return [{q.queue_id for q in c.assigned_queues if q.topic == "Parity"} for c in consumers]

            await eventually(lambda: split() in ([{0, 2}, {1, 3}], [{1, 3}, {0, 2}]), what="parity split")
        finally:
            for consumer in reversed(consumers):
                await consumer.shutdown()


async def test_strategy_names_and_options_are_checked_at_start(cluster_factory):
    async with cluster_factory() as cluster:
        consumer = PushConsumer("CG_bad", cluster.namesrv_addr, allocate_strategy="by_magic")
        consumer.subscribe("Anything")
        consumer.register_listener(Collector())
        with pytest.raises(ClientError, match="unknown allocate strategy 'by_magic'; installed: .*averagely"):
            await consumer.start()
        consumer = PushConsumer(
            "CG_bad",
            cluster.namesrv_addr,
            allocate_strategy="consistent_hash",
            allocate_options={"virtual_nodes": "x"},
        )
        consumer.subscribe("Anything")
        consumer.register_listener(Collector())
        with pytest.raises(ClientError, match="virtual_nodes must be a positive whole number"):
            await consumer.start()


async def test_consistent_hash_with_options_spreads_queues(cluster_factory):
    async with cluster_factory() as cluster:
        await produce(cluster.namesrv_addr, "Hashed", 4)
        consumers = []
        for name in ("h0", "h1"):
            consumer = PushConsumer(
                "CG_hash", cluster.namesrv_addr, allocate_strategy="consistent_hash",
                allocate_options={"virtual_nodes": "50"}, instance_name=name,
            )  # fmt: skip
            consumer.subscribe("Hashed")
            consumer.register_listener(Collector())
            await consumer.start()
            consumers.append(consumer)
        try:

            def owned() -> list[set]:
                return [{q for q in c.assigned_queues if q.topic == "Hashed"} for c in consumers]

            await eventually(lambda: sum(len(s) for s in owned()) == 4 and len(set().union(*owned())) == 4)
        finally:
            for consumer in reversed(consumers):
                await consumer.shutdown()
